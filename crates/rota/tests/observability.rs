//! What an operator watches: `rota agent --metrics-addr` scraped over real HTTP, and its
//! `--notify-*` webhooks received by a real HTTP server, while a real agent process reboots its
//! node on a real SQLite store.

mod common;

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Json, State};
use axum::http::{StatusCode, Uri};
use axum::routing::post;
use common::Host;
use rota_core::NodeState;
use rota_e2e::host::PATIENCE;
use serde_json::Value;

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

/// The webhook bodies a test server received, by path.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(String, Value)>>>);

impl Received {
    fn bodies(&self, path: &str) -> Vec<Value> {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, body)| body.clone())
            .collect()
    }

    /// Waits until `path` received `count` bodies, and returns them.
    async fn wait_for(&self, path: &str, count: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let bodies = self.bodies(path);
            if bodies.len() >= count {
                return bodies;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{path} received only {bodies:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn record(received: &Received, uri: &Uri, body: Value) {
    received
        .0
        .lock()
        .expect("lock")
        .push((uri.path().to_owned(), body));
}

/// A webhook receiver on 127.0.0.1: `/hook` and `/slack` accept, `/broken` answers 500.
async fn receiver() -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .route(
            "/hook",
            post(
                |State(r): State<Received>, uri: Uri, Json(body): Json<Value>| async move {
                    record(&r, &uri, body).await;
                    StatusCode::OK
                },
            ),
        )
        .route(
            "/slack",
            post(
                |State(r): State<Received>, uri: Uri, Json(body): Json<Value>| async move {
                    record(&r, &uri, body).await;
                    StatusCode::OK
                },
            ),
        )
        .route(
            "/broken",
            post(
                |State(r): State<Received>, uri: Uri, Json(body): Json<Value>| async move {
                    record(&r, &uri, body).await;
                    StatusCode::INTERNAL_SERVER_ERROR
                },
            ),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), received)
}

fn events(bodies: &[Value]) -> Vec<&str> {
    bodies.iter().filter_map(|b| b["event"].as_str()).collect()
}

#[tokio::test]
async fn one_reboot_window_is_announced_to_json_and_slack_webhooks() {
    let (url, received) = receiver().await;
    let host = Host::new();
    let hook = format!("{url}/hook");
    let slack = format!("{url}/slack");
    let flags = [
        "--notify-webhook",
        hook.as_str(),
        "--notify-slack",
        slack.as_str(),
        "--notify-template",
        "reboot=going down: {node} ({process}, slot {slot})",
    ];
    let agent = host.agent(&flags);
    host.wait_for("registered", |_| true).await;
    std::fs::write(host.root("run/reboot-needed"), b"").expect("touch");
    host.wait_until("the reboot command", || host.count("reboot") == 1)
        .await;
    // Delivered before the agent "goes down" with its host.
    received.wait_for("/hook", 2).await;
    received.wait_for("/slack", 2).await;
    agent.kill();
    host.reboot_host("boot-2");
    let agent = host.agent(&flags);
    host.wait_for("idle after the reboot", |r| {
        r.state == NodeState::Idle && r.last_result.as_deref() == Some("finished")
    })
    .await;
    let bodies = received.wait_for("/hook", 3).await;
    assert_eq!(events(&bodies), ["drain-started", "reboot", "finished"]);
    let drain = &bodies[0];
    assert_eq!(drain["node"], "node-a");
    assert_eq!(drain["process"], "reboot");
    assert_eq!(drain["slot"], 0);
    assert_eq!(drain["cause"], Value::Null);
    assert_eq!(
        drain["message"],
        "rota: draining node-a for reboot (slot 0)"
    );
    assert!(drain["at"].as_str().is_some_and(|at| at.ends_with('Z')));
    assert_eq!(bodies[1]["message"], "going down: node-a (reboot, slot 0)");
    let texts: Vec<Value> = received
        .wait_for("/slack", 3)
        .await
        .iter()
        .map(|b| b["text"].clone())
        .collect();
    assert_eq!(
        texts,
        [
            "rota: draining node-a for reboot (slot 0)",
            "going down: node-a (reboot, slot 0)",
            "rota: node-a finished reboot",
        ]
    );
    assert!(agent.terminate().success());
}

#[tokio::test]
async fn a_failing_webhook_is_counted_and_the_window_still_finishes() {
    let (url, received) = receiver().await;
    let host = Host::new();
    let broken = format!("{url}/broken");
    let addr = format!("127.0.0.1:{}", free_port());
    let agent = host.agent(&["--notify-webhook", &broken, "--metrics-addr", &addr]);
    host.wait_for("registered", |_| true).await;
    std::fs::write(host.root("run/reboot-needed"), b"").expect("touch");
    host.wait_until("the reboot command", || host.count("reboot") == 1)
        .await;
    received.wait_for("/broken", 2).await;
    agent.kill();
    host.reboot_host("boot-2");
    let addr = format!("127.0.0.1:{}", free_port());
    let _agent = host.agent(&["--notify-webhook", &broken, "--metrics-addr", &addr]);
    host.wait_for("idle after the reboot", |r| {
        r.state == NodeState::Idle && r.last_result.as_deref() == Some("finished")
    })
    .await;
    assert_eq!(
        events(&received.wait_for("/broken", 3).await),
        ["drain-started", "reboot", "finished"]
    );
    let start = Instant::now();
    loop {
        let (_, text) = get(&format!("http://{addr}/metrics")).await;
        if sample(&text, "rota_notifications_total{outcome=\"failed\"}") >= 1.0 {
            assert_eq!(
                sample(&text, "rota_notifications_total{outcome=\"sent\"}"),
                0.0
            );
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "no failed notification counted: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_failed_drain_is_announced_with_its_cause_and_counted() {
    let (url, received) = receiver().await;
    let host = Host::new();
    let hook = format!("{url}/hook");
    let addr = format!("127.0.0.1:{}", free_port());
    let _agent = host.agent(&[
        "--notify-webhook",
        &hook,
        "--metrics-addr",
        &addr,
        "--drain-command",
        "echo 'pdb says no' >&2; exit 3",
    ]);
    host.wait_for("registered", |_| true).await;
    std::fs::write(host.root("run/reboot-needed"), b"").expect("touch");
    let bodies = received.wait_for("/hook", 2).await;
    assert_eq!(events(&bodies), ["drain-started", "failed"]);
    let failed = &bodies[1];
    assert_eq!(failed["process"], "reboot");
    assert_eq!(failed["slot"], 0, "the slot it held when the drain failed");
    let cause = failed["cause"].as_str().expect("a cause");
    assert!(cause.contains("pdb says no"), "{cause}");
    assert_eq!(
        failed["message"],
        format!("rota: node-a failed reboot: {cause}")
    );
    let (_, text) = get(&format!("http://{addr}/metrics")).await;
    assert_eq!(
        sample(
            &text,
            "rota_work_results_total{node=\"node-a\",process=\"reboot\",outcome=\"failed\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(sample(&text, "rota_drain_duration_seconds_count"), 1.0);
}

#[tokio::test]
async fn bad_notification_settings_stop_the_agent_at_start() {
    let host = Host::new();
    for (flags, code, expected) in [
        (
            &["--notify-webhook", "ftp://example.com/x"][..],
            2,
            "ftp://example.com/x",
        ),
        (
            &["--notify-slack", "hooks.example.com/x"][..],
            2,
            "hooks.example.com/x",
        ),
        (
            &[
                "--notify-webhook",
                "http://127.0.0.1:9/x",
                "--notify-template",
                "drained={node}",
            ][..],
            2,
            "drained",
        ),
        (
            &[
                "--notify-webhook",
                "http://127.0.0.1:9/x",
                "--notify-template",
                "failed={node} is {state}",
            ][..],
            2,
            "{state}",
        ),
        (&["--notify-template", "failed={node}"][..], 1, "no webhook"),
    ] {
        let out = host.agent(flags).output();
        assert_eq!(out.status.code(), Some(code), "{flags:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let flag = flags[flags.len() - 2];
        assert!(
            stderr.starts_with("error: ") && stderr.contains(flag) && stderr.contains(expected),
            "{flags:?}: {stderr}"
        );
        assert!(
            !host.path("rota.db").exists(),
            "{flags:?}: the agent stopped before it opened the store"
        );
    }
}
