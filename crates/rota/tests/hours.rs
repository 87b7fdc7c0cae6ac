//! The failure budget end to end, with the operator's `rota status` and `rota resume` beside
//! agents as real processes on a real SQLite store, and the refusal of bad `--hours` and
//! `--failure-budget` flags. The maintenance hours themselves are tested in-process in
//! `crates/rota-agent/tests/hours.rs`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Host, ROTA};
use rota_core::{HistoryEvent, NodeState};
use rota_e2e::host::{PATIENCE, touch};
use rota_store::{HistoryFilter, Millis, StoreExt};

async fn entries(host: &Host, event: HistoryEvent) -> Vec<rota_store::HistoryEntry> {
    host.store()
        .await
        .history(&HistoryFilter {
            node: Some(host.node.clone()),
            event: Some(event),
            ..HistoryFilter::default()
        })
        .await
        .expect("history")
}

fn rota(host: &Host, args: &[&str]) -> String {
    let output = Command::new(ROTA)
        .args(args)
        .args(["--store", &host.store_url()])
        .output()
        .expect("run rota");
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether `host`'s node ever started work.
async fn started(host: &Host) -> bool {
    !entries(host, HistoryEvent::Started).await.is_empty()
}

#[tokio::test]
async fn an_exhausted_failure_budget_pauses_the_fleet_until_resumed() {
    let a = Host::new();
    let b = Host::sharing("node-b", &a);
    let c = Host::sharing("node-c", &a);
    const BUDGET: [&str; 2] = ["--failure-budget", "1"];
    let failing = format!(
        "echo drain >> {}; echo 'pdb says no' >&2; exit 3",
        a.path("actions.log").display()
    );
    let _agent_a = a.agent(&["--failure-budget", "1", "--drain-command", &failing]);
    a.wait_for("registered", |_| true).await;
    touch(&a.root("run/reboot-needed"));
    a.wait_for("queued again after the failed drain", |r| {
        r.state == NodeState::Queued && r.last_result.is_some()
    })
    .await;
    assert_eq!(entries(&a, HistoryEvent::Failed).await.len(), 1);

    let agent_b = b.agent(&BUDGET);
    let agent_c = c.agent(&BUDGET);
    touch(&b.root("run/reboot-needed"));
    touch(&c.root("run/reboot-needed"));
    let store = a.store().await;
    let start = std::time::Instant::now();
    let pause = loop {
        if let Some(pause) = store.paused().await.expect("paused") {
            break pause;
        }
        assert!(start.elapsed() < PATIENCE, "the fleet never paused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        pause.reason,
        "failure budget exhausted: 1 node failed since the beginning (node-a), budget 1; \
         rota resume continues"
    );
    // Nobody else starts while paused.
    b.wait_for("queued", |r| r.state == NodeState::Queued).await;
    c.wait_for("queued", |r| r.state == NodeState::Queued).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for host in [&b, &c] {
        let record = host.record().await.expect("record");
        assert_eq!(record.state, NodeState::Queued, "{record:?}");
        assert_eq!(record.slot, None);
        assert_eq!(host.count("drain"), 0);
        assert!(!started(host).await, "{} started while paused", host.node);
    }
    let status = rota(&a, &["status"]);
    assert!(
        status.contains("PAUSED since") && status.contains("failure budget exhausted"),
        "{status}"
    );

    // A resume starts a new rollout: node-a's old failure no longer counts.
    assert!(rota(&a, &["resume"]).contains("fleet resumed"));
    let resumed: Millis = store
        .resumed_at()
        .await
        .expect("resumed at")
        .expect("recorded");
    a.wait_until("one of the others reboots", || {
        b.count("reboot") + c.count("reboot") == 1
    })
    .await;
    // The first to go reboots its host; then the other one goes.
    let (first, second, first_agent) = if b.count("reboot") == 1 {
        (&b, &c, agent_b)
    } else {
        (&c, &b, agent_c)
    };
    first_agent.kill();
    first.reboot_host("boot-2");
    let _first_agent = first.agent(&BUDGET);
    first
        .wait_for("finished", |r| {
            r.state == NodeState::Idle && r.slot.is_none()
        })
        .await;
    second
        .wait_until("the second reboot", || second.count("reboot") == 1)
        .await;
    assert_eq!(
        store.paused().await.expect("paused"),
        None,
        "not paused again"
    );
    let failed = store
        .history(&HistoryFilter {
            event: Some(HistoryEvent::Failed),
            since: Some(resumed),
            ..HistoryFilter::default()
        })
        .await
        .expect("history");
    assert!(failed.is_empty(), "{failed:?}");
}

#[test]
fn bad_hours_and_budgets_are_refused_at_start() {
    let host = Host::new();
    let store = host.store_url();
    let cases = [
        ("--hours", "mon-fry 22:00-04:00", "unknown day \"fry\""),
        ("--hours", "mon 25:00-04:00", "HH:MM-HH:MM"),
        (
            "--hours",
            "mon 22:00-04:00 Mars/Olympus",
            "unknown time zone",
        ),
        ("--failure-budget", "0", "at least 1"),
        ("--failure-budget", "many", "`10%`"),
        ("--failure-budget", "0%", "from 1% to 100%"),
        ("--batches", "fast", "`exponential`, `linear:<step>`"),
        ("--batches", "linear:0", "at least 1"),
        (
            "--batches",
            "1,4,3",
            "width 3 after 4: a rollout only widens",
        ),
    ];
    for (flag, value, allowed) in cases {
        let output = Command::new(ROTA)
            .args(["agent", "--store", &store, "--node", "node-a"])
            .arg("--host-root")
            .arg(host.path("root"))
            .arg("--boot-id-file")
            .arg(host.path("boot_id"))
            .args([flag, value])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag} {value} was accepted");
        assert!(
            stderr.contains(flag) && stderr.contains(value) && stderr.contains(allowed),
            "{flag} {value}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{flag} {value}: {stderr}");
        assert!(!host.db.exists(), "the agent did not start: no store");
    }
}
