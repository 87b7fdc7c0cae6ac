//! Maintenance windows and the failure budget end to end: `rota agent` as a real process on a
//! real SQLite store, with windows a few seconds from now (UTC, seconds precision) and node
//! actions that log to a file.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Host, ROTA};
use rota_core::{HistoryEvent, NodeState, Process};
use rota_store::{HistoryFilter, Millis, Store};

fn touch(path: &Path) {
    std::fs::write(path, b"").expect("touch");
}

/// The current second since the epoch.
fn now_s() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since.as_secs()).expect("seconds fit")
}

/// `HH:MM:SS` in UTC of second `at` since the epoch.
fn clock(at: i64) -> String {
    let day = at.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", day / 3600, day / 60 % 60, day % 60)
}

/// A daily window from second `from` to second `to` since the epoch (less than a day apart).
fn window(from: i64, to: i64) -> String {
    format!("{}-{} UTC", clock(from), clock(to))
}

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

#[tokio::test]
async fn a_closed_window_keeps_the_node_queued_until_it_opens() {
    let host = Host::new();
    let opens = now_s() + 6;
    let spec = window(opens, opens + 3600);
    let _agent = host.agent(&["--window", &spec]);
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_for("queued", |r| r.state == NodeState::Queued)
        .await;
    // Watch the closed window for a while: the node waits in the queue and takes nothing.
    while now_s() < opens - 2 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let record = host.record().await.expect("record");
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None, "no slot outside the window");
    assert!(
        host.store()
            .await
            .slot_holders()
            .await
            .expect("holders")
            .is_empty()
    );
    assert_eq!(host.count("drain"), 0);
    assert!(
        entries(&host, HistoryEvent::Started).await.is_empty(),
        "no started before the window opens"
    );

    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    let started = entries(&host, HistoryEvent::Started).await;
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(
        started[0].at >= opens * 1000,
        "started at {} ms, the window opened at {} ms",
        started[0].at,
        opens * 1000
    );
}

#[tokio::test]
async fn a_node_already_in_the_queue_waits_for_its_window_without_a_slot() {
    let host = Host::new();
    host.store().await;
    // Queued while the fleet was paused, with no window: its place in the queue is now.
    rota(&host, &["pause", "--reason", "queue first"]);
    let agent = host.agent(&[]);
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    let queued = host
        .wait_for("queued", |r| {
            r.state == NodeState::Queued && r.queued_at.is_some()
        })
        .await;
    agent.kill();
    rota(&host, &["resume"]);

    let opens = now_s() + 5;
    let spec = window(opens, opens + 3600);
    let _agent = host.agent(&["--window", &spec]);
    let moved = host
        .wait_for("its place moved to the opening", |r| {
            r.queued_at.is_some_and(|q| q >= opens * 1000)
        })
        .await;
    assert_eq!(moved.state, NodeState::Queued);
    assert!(moved.queued_at > queued.queued_at);
    while now_s() < opens - 1 {
        let record = host.record().await.expect("record");
        assert_eq!(record.slot, None, "no slot outside the window: {record:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(host.count("drain"), 0);
    assert!(entries(&host, HistoryEvent::Started).await.is_empty());
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    let started = entries(&host, HistoryEvent::Started).await;
    assert!(started[0].at >= opens * 1000, "{started:?}");
}

#[tokio::test]
async fn a_window_closing_during_the_drain_postpones_the_reboot_to_the_next_window() {
    let host = Host::new();
    let now = now_s();
    // The first window closes while the first drain still runs; the next one opens later.
    let first_closes = now + 4;
    let next_opens = now + 13;
    let first = window(now - 60, first_closes);
    let next = window(next_opens, next_opens + 3600);
    let log = host.path("actions.log");
    let once = host.path("slow-drain-done");
    let drain = format!(
        "echo drain >> {log}; if [ ! -e {once} ]; then touch {once}; sleep 7; fi",
        log = log.display(),
        once = once.display()
    );
    let flags = [
        "--window",
        &first,
        "--window",
        &next,
        "--drain-command",
        &drain,
    ];
    let agent = host.agent(&flags);
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the drain", || host.count("drain") == 1)
        .await;
    let record = host
        .wait_for("postponed", |r| {
            r.last_result
                .as_deref()
                .is_some_and(|l| l.starts_with("postponed"))
        })
        .await;
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None, "the slot went back");
    assert!(!record.cordoned_by_rota);
    assert_eq!(
        host.log(),
        ["drain", "uncordon"],
        "no reboot after the close"
    );
    let store = host.store().await;
    assert!(store.slot_holders().await.expect("holders").is_empty());
    assert!(
        store
            .backoffs(&host.node)
            .await
            .expect("backoffs")
            .is_empty(),
        "a postponement is no failure"
    );
    assert!(entries(&host, HistoryEvent::Failed).await.is_empty());
    let postponed = entries(&host, HistoryEvent::Postponed).await;
    assert_eq!(postponed.len(), 1, "{postponed:?}");
    assert_eq!(postponed[0].process, Process::Reboot);
    assert!(postponed[0].released);
    let cause = postponed[0].cause.as_deref().unwrap_or_default();
    assert!(
        cause.contains("maintenance window closed before the reboot"),
        "{cause}"
    );
    let open = store.open_requests(&host.node).await.expect("open");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].state, rota_store::RequestState::Pending);

    // The next window: drained again (quickly this time) and rebooted, once.
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    let started = entries(&host, HistoryEvent::Started).await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert!(started[1].at >= next_opens * 1000, "{started:?}");
    agent.kill();
    host.reboot_host("boot-2");
    let _agent = host.agent(&flags);
    host.wait_for("finished", |r| {
        r.state == NodeState::Idle && r.slot.is_none()
    })
    .await;
    assert_eq!(
        host.history().await,
        [
            (Process::Reboot, HistoryEvent::Started),
            (Process::Reboot, HistoryEvent::Postponed),
            (Process::Reboot, HistoryEvent::Started),
            (Process::Reboot, HistoryEvent::Finished),
        ]
    );
    assert_eq!(
        host.log(),
        ["drain", "uncordon", "drain", "reboot", "health", "uncordon"]
    );
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
        assert!(start.elapsed() < common::PATIENCE, "the fleet never paused");
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
fn bad_windows_and_budgets_are_refused_at_start() {
    let host = Host::new();
    let store = host.store_url();
    let cases = [
        ("--window", "mon-fry 22:00-04:00", "unknown day \"fry\""),
        ("--window", "mon 25:00-04:00", "HH:MM-HH:MM"),
        (
            "--window",
            "mon 22:00-04:00 Mars/Olympus",
            "unknown time zone",
        ),
        ("--failure-budget", "0", "≥ 1"),
        ("--failure-budget", "many", "≥ 1"),
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

/// `rota mop submit` of `script` as procedure `name` with `priority`.
fn submit(host: &Host, name: &str, priority: &str, script: &str) {
    let file = host.path(&format!("{name}.sh"));
    std::fs::write(&file, script).expect("script file");
    let file = file.display().to_string();
    rota(
        host,
        &[
            "mop",
            "submit",
            "--name",
            name,
            "--priority",
            priority,
            "--script",
            &file,
        ],
    );
}

fn script_log(host: &Host) -> Vec<String> {
    std::fs::read_to_string(host.path("scripts.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_running_procedure_finishes_after_the_close_and_the_next_one_waits() {
    let host = Host::new();
    host.store().await;
    let log = host.path("scripts.log");
    let release = host.path("release-first");
    submit(
        &host,
        "first",
        "10",
        &format!(
            "echo start first >> {log}\nwhile [ ! -e {release} ]; do sleep 0.05; done\necho end first >> {log}\n",
            log = log.display(),
            release = release.display()
        ),
    );
    submit(
        &host,
        "second",
        "20",
        &format!("echo start second >> {}\n", log.display()),
    );
    let now = now_s();
    let closes = now + 4;
    let next_opens = now + 12;
    let first = window(now - 60, closes);
    let next = window(next_opens, next_opens + 3600);
    let _agent = host.agent(&[
        "--window",
        &first,
        "--window",
        &next,
        "--procedure-poll",
        "100ms",
    ]);
    host.wait_until("the first procedure", || {
        script_log(&host).contains(&"start first".to_string())
    })
    .await;
    while now_s() <= closes {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The window closed while it ran: it is not stopped, and ends when its script says so.
    std::fs::write(&release, b"").expect("release");
    let record = host
        .wait_for("postponed", |r| {
            r.last_result
                .as_deref()
                .is_some_and(|l| l.starts_with("postponed"))
        })
        .await;
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None);
    assert_eq!(script_log(&host), ["start first", "end first"]);
    assert_eq!(host.log(), ["drain", "uncordon"]);
    let finished = entries(&host, HistoryEvent::Finished).await;
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0].process, Process::mop("first").expect("process"));
    let postponed = entries(&host, HistoryEvent::Postponed).await;
    assert_eq!(postponed.len(), 1, "{postponed:?}");
    assert_eq!(
        postponed[0].process,
        Process::mop("second").expect("process")
    );
    let cause = postponed[0].cause.as_deref().unwrap_or_default();
    assert!(cause.contains("before procedure second"), "{cause}");

    // The next window runs the rest, and only the rest.
    host.wait_for("idle after the next window", |r| {
        r.state == NodeState::Idle && r.slot.is_none()
    })
    .await;
    assert_eq!(
        script_log(&host),
        ["start first", "end first", "start second"]
    );
    let started = entries(&host, HistoryEvent::Started).await;
    assert!(
        started.iter().any(|e| e.at >= next_opens * 1000),
        "{started:?}"
    );
    assert!(entries(&host, HistoryEvent::Failed).await.is_empty());
}
