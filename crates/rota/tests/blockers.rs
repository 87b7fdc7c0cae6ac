//! Blockers outside Kubernetes: `rota agent` as a real process on a real SQLite store, asking a
//! real Prometheus (`scripts/prometheus-up`, named by `ROTA_TEST_PROMETHEUS_URL`) whose one rule
//! is an alert that always fires, RotaTestAlwaysFiring. Without that variable the tests that
//! need it fail, unless `ROTA_PROMETHEUS_SKIP=1` says that skipping them is intended.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Host, ROTA, assert_refused};

use rota_core::NodeState;
use rota_e2e::host::touch;

fn prometheus_url() -> Option<String> {
    match std::env::var("ROTA_TEST_PROMETHEUS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("ROTA_PROMETHEUS_SKIP").as_deref() == Ok("1") => {
            eprintln!("skipped: ROTA_PROMETHEUS_SKIP=1 and no ROTA_TEST_PROMETHEUS_URL");
            None
        }
        _ => panic!(
            "ROTA_TEST_PROMETHEUS_URL is not set: run the tests with scripts/test, or start a \
             server with `url=$(scripts/prometheus-up | tail -n 1)` and export \
             ROTA_TEST_PROMETHEUS_URL=$url (set ROTA_PROMETHEUS_SKIP=1 to skip these tests on \
             purpose)"
        ),
    }
}

/// Starts an agent with `flags`, asks for a reboot and waits until the node is blocked for a
/// reason containing `reason`; then checks that it stays queued, without a slot or a drain, and
/// that the reason was written once.
async fn held_back(host: &Host, flags: &[&str], reason: &str) -> common::Agent {
    let mut args = vec!["--blocker-interval", "200ms"];
    args.extend_from_slice(flags);
    let agent = host.agent(&args);
    touch(&host.root("run/reboot-needed"));
    let blocked = host
        .wait_for("blocked", |r| {
            r.blocked
                .as_ref()
                .is_some_and(|b| b.reason.contains(reason))
        })
        .await;
    assert_eq!(blocked.state, NodeState::Queued, "{blocked:?}");
    // Several blocker checks later: still held back, the reason not written again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let record = host.record().await.expect("record");
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None, "a blocked node takes no slot");
    assert_eq!(record.blocked, blocked.blocked, "written once");
    assert_eq!(host.count("drain"), 0);
    let shown = host.rota_ok(&["status"]);
    assert!(
        shown.contains("BLOCKED") && shown.contains(reason),
        "rota status shows why: {shown}"
    );
    agent
}

#[tokio::test]
async fn a_firing_alert_holds_the_node_back_and_says_which() {
    let Some(url) = prometheus_url() else {
        return;
    };
    let host = Host::new();
    let _agent = held_back(
        &host,
        &["--prometheus-url", &url],
        "alerts active in prometheus at",
    )
    .await;
    let record = host.record().await.expect("record");
    let reason = record.blocked.expect("blocked").reason;
    assert!(reason.contains("RotaTestAlwaysFiring"), "{reason}");
}

#[tokio::test]
async fn an_unreachable_prometheus_holds_the_node_back_and_says_so() {
    // A port nothing listens on: bound, then given up.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let host = Host::new();
    let _agent = held_back(
        &host,
        &["--prometheus-url", &url],
        &format!("prometheus at {url}/ unreachable"),
    )
    .await;
}

#[tokio::test]
async fn a_filtered_alert_does_not_hold_the_node_back() {
    let Some(url) = prometheus_url() else {
        return;
    };
    let host = Host::new();
    let _agent = host.agent(&[
        "--blocker-interval",
        "200ms",
        "--prometheus-url",
        &url,
        "--alert-filter-regexp",
        "^RotaTestAlwaysFiring$",
        "--alert-firing-only",
    ]);
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    let record = host.record().await.expect("record");
    assert_eq!(record.blocked, None, "{record:?}");
    // And only matching alerts block with --alert-filter-match-only: the same alert then does.
    let other = Host::new();
    let _held = held_back(
        &other,
        &[
            "--prometheus-url",
            &url,
            "--alert-filter-regexp",
            "^RotaTest",
            "--alert-filter-match-only",
        ],
        "RotaTestAlwaysFiring",
    )
    .await;
}

#[tokio::test]
async fn a_resumed_fleet_goes_on_and_the_pause_was_a_blocked_reason() {
    let host = Host::new();
    host.store().await;
    host.rota_ok(&["pause", "--reason", "kernel CVE triage"]);
    let _agent = held_back(&host, &[], "the fleet is paused: kernel CVE triage").await;
    host.rota_ok(&["resume"]);
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    let record = host.wait_for("unblocked", |r| r.blocked.is_none()).await;
    assert_ne!(record.state, NodeState::Queued);
}

#[test]
fn bad_blocker_flags_are_refused_naming_the_flag_and_the_value() {
    let host = Host::new();
    let store = host.store_url();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--blocking-pod-selector", "tier in (db"],
            "--blocking-pod-selector \"tier in (db\": unbalanced parentheses",
        ),
        (
            &["--blocking-pod-selector", "app=back up"],
            "--blocking-pod-selector \"app=back up\"",
        ),
        (
            &["--blocking-pod-selector", "app=backup"],
            "--blocking-pod-selector needs --node-actions kube",
        ),
        (
            &["--prometheus-url", "prometheus:9090"],
            "--prometheus-url \"prometheus:9090\": the scheme must be http or https",
        ),
        (
            &["--prometheus-url", "http://"],
            "--prometheus-url \"http://\"",
        ),
        (
            &[
                "--prometheus-url",
                "http://127.0.0.1:9090",
                "--alert-filter-regexp",
                "(Watchdog",
            ],
            "--alert-filter-regexp \"(Watchdog\": not a regular expression",
        ),
        (
            &["--alert-filter-regexp", "Watchdog"],
            "--alert-filter-regexp needs --prometheus-url",
        ),
        (
            &["--alert-firing-only"],
            "--alert-firing-only needs --prometheus-url",
        ),
        (
            &[
                "--prometheus-url",
                "http://127.0.0.1:9090",
                "--alert-filter-match-only",
            ],
            "--alert-filter-match-only needs --alert-filter-regexp",
        ),
        (&["--blocker-interval", "0s"], "--blocker-interval"),
        (&["--blocker-interval", "soon"], "soon"),
    ];
    for (args, named) in cases {
        let output = Command::new(ROTA)
            .args(["agent", "--store", &store, "--node", "n"])
            .arg("--host-root")
            .arg(host.path("root"))
            .args(*args)
            .output()
            .expect("run");
        assert_refused(&output, args, named);
        assert!(
            !host.path("rota.db").exists(),
            "{args:?}: the agent opened the store before refusing"
        );
    }
}
