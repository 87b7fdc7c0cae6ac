//! What an operator watches: `rota agent --metrics-addr` scraped over real HTTP while a real
//! agent process reboots its node on a real SQLite store.

mod common;

use std::net::TcpListener;
use std::time::Duration;

use common::Host;
use rota_core::NodeState;

/// A port nobody listens on now (the agent binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// The value of the sample `series` (name and labels exactly as exposed).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in {text}"))
        .parse()
        .expect("a number")
}

/// Polls until `/readyz` answers 200 (the agent has a session and read the store).
async fn wait_ready(base: &str) {
    for _ in 0..300 {
        if let Ok(response) = reqwest::get(format!("{base}/readyz")).await
            && response.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{base}/readyz never answered 200");
}

#[tokio::test]
async fn metrics_follow_one_reboot_and_the_agent_reports_ready() {
    let host = Host::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{addr}");
    let agent = host.agent(&["--metrics-addr", &addr]);
    wait_ready(&base).await;
    let (status, body) = get(&format!("{base}/healthz")).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (_, before) = get(&format!("{base}/metrics")).await;
    assert_eq!(
        sample(&before, "rota_node_state{node=\"node-a\",state=\"idle\"}"),
        1.0
    );
    assert_eq!(sample(&before, "rota_drain_duration_seconds_count"), 0.0);

    std::fs::write(host.root("run/reboot-needed"), b"").expect("touch");
    host.wait_for("rebooting", |r| r.state == NodeState::Rebooting)
        .await;
    host.wait_until("the reboot command", || host.count("reboot") == 1)
        .await;
    let (_, rebooting) = get(&format!("{base}/metrics")).await;
    let state = |text: &str, state: &str| {
        sample(
            text,
            &format!("rota_node_state{{node=\"node-a\",state=\"{state}\"}}"),
        )
    };
    assert_eq!(state(&rebooting, "rebooting"), 1.0, "{rebooting}");
    assert_eq!(state(&rebooting, "idle"), 0.0);
    assert_eq!(sample(&rebooting, "rota_slot_held{node=\"node-a\"}"), 1.0);
    assert_eq!(
        sample(
            &rebooting,
            "rota_requests_open{node=\"node-a\",process=\"reboot\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(&rebooting, "rota_reboot_required{node=\"node-a\"}"),
        1.0
    );
    assert_eq!(
        sample(&rebooting, "rota_maintenance_required{node=\"node-a\"}"),
        1.0
    );
    assert_eq!(sample(&rebooting, "rota_slot_wait_seconds_count"), 1.0);
    assert_eq!(sample(&rebooting, "rota_drain_duration_seconds_count"), 1.0);
    assert_eq!(
        sample(&rebooting, "rota_maintenance_duration_seconds_count"),
        1.0
    );
    agent.kill();

    // The machine comes back: a new process with a new boot id finishes the window.
    host.reboot_host("boot-2");
    let addr = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{addr}");
    let _agent = host.agent(&["--metrics-addr", &addr]);
    host.wait_for("idle after the reboot", |r| {
        r.state == NodeState::Idle && r.last_result.as_deref() == Some("finished")
    })
    .await;
    wait_ready(&base).await;
    // The record is written before the agent's observer hears of it: poll for the result.
    let mut after = String::new();
    for _ in 0..100 {
        after = get(&format!("{base}/metrics")).await.1;
        if after.contains("outcome=\"finished\"") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        sample(
            &after,
            "rota_work_results_total{node=\"node-a\",process=\"reboot\",outcome=\"finished\"}"
        ),
        1.0,
        "{after}"
    );
    assert_eq!(state(&after, "idle"), 1.0, "{after}");
    assert_eq!(sample(&after, "rota_slot_held{node=\"node-a\"}"), 0.0);
    assert_eq!(sample(&after, "rota_reboot_duration_seconds_count"), 1.0);
    assert_eq!(sample(&after, "rota_verify_duration_seconds_count"), 1.0);
    assert!(sample(&after, "rota_reboot_duration_seconds_sum") > 0.0);
    assert_eq!(
        sample(&after, "rota_notifications_total{outcome=\"sent\"}"),
        0.0
    );
    let (status, _) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_bad_or_taken_metrics_address_stops_the_agent_at_start() {
    let host = Host::new();
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let agent = host.agent(&["--metrics-addr", &addr]);
    let out = agent.output();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("--metrics-addr {addr}")),
        "{stderr}"
    );
    assert!(
        !host.path("rota.db").exists(),
        "the agent stopped before it opened the store"
    );

    let agent = host.agent(&["--metrics-addr", "localhost"]);
    let out = agent.output();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--metrics-addr") && stderr.contains("localhost"),
        "{stderr}"
    );
}
