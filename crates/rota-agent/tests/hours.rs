//! Maintenance hours in-process, on a real SQLite store and a real sentinel watcher, with hours
//! that start or end a few seconds from now (UTC, seconds precision) and node actions that log
//! what they do.

mod common;

use rota_store::StoreExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::host::Host;
use rota_agent::AgentConfig;
use rota_core::{HistoryEvent, MaintenanceHours, NodeState, Priority, ProcedureSpec, Process};
use rota_e2e::host::touch;

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

/// Daily hours from second `from` to second `to` since the epoch (less than a day apart).
fn daily(from: i64, to: i64) -> String {
    format!("{}-{} UTC", clock(from), clock(to))
}

/// Configures the agent with `hours`, as `--hours` does for each.
fn with_hours(hours: &[&str]) -> impl Fn(&mut AgentConfig) + use<> {
    let hours = MaintenanceHours::parse(hours.iter().copied()).expect("hours");
    move |config| config.hours = Some(hours.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_its_hours_the_node_stays_queued_until_they_start() {
    let host = Host::new().await;
    let starts = now_s() + 6;
    let spec = daily(starts, starts + 3600);
    let _agent = host.agent_with(with_hours(&[&spec])).await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_for("queued", |r| r.state == NodeState::Queued)
        .await;
    // Watch it outside its hours for a while: the node waits in the queue and takes nothing.
    while now_s() < starts - 2 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let record = host.record().await.expect("record");
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None, "no slot outside the maintenance hours");
    assert!(
        host.store()
            .slot_holders()
            .await
            .expect("holders")
            .is_empty()
    );
    assert_eq!(host.count("drain"), 0);
    assert!(
        host.entries(HistoryEvent::Started).await.is_empty(),
        "no started before the maintenance hours start"
    );

    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    let started = host.entries(HistoryEvent::Started).await;
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(
        started[0].at >= starts * 1000,
        "started at {} ms, the maintenance hours started at {} ms",
        started[0].at,
        starts * 1000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_already_in_the_queue_waits_for_its_hours_without_a_slot() {
    let host = Host::new().await;
    // Queued while the fleet was paused, without maintenance hours: its place in the queue is now.
    host.store().pause("queue first").await.expect("pause");
    let agent = host.agent().await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    let queued = host
        .wait_for("queued", |r| {
            r.state == NodeState::Queued && r.queued_at.is_some()
        })
        .await;
    agent.stop().await.expect("the agent stops cleanly");
    host.store().resume().await.expect("resume");

    let starts = now_s() + 5;
    let spec = daily(starts, starts + 3600);
    let _agent = host.agent_with(with_hours(&[&spec])).await;
    let moved = host
        .wait_for("its place moved to the start of the hours", |r| {
            r.queued_at.is_some_and(|q| q >= starts * 1000)
        })
        .await;
    assert_eq!(moved.state, NodeState::Queued);
    assert!(moved.queued_at > queued.queued_at);
    while now_s() < starts - 1 {
        let record = host.record().await.expect("record");
        assert_eq!(record.slot, None, "no slot outside the hours: {record:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(host.count("drain"), 0);
    assert!(host.entries(HistoryEvent::Started).await.is_empty());
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    let started = host.entries(HistoryEvent::Started).await;
    assert!(started[0].at >= starts * 1000, "{started:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hours_ending_during_the_drain_postpone_the_reboot_to_the_next_window() {
    let host = Host::new().await;
    let now = now_s();
    // The first hours end while the first drain still runs; the next ones start later.
    let first_ends = now + 4;
    let next_starts = now + 13;
    let first = daily(now - 60, first_ends);
    let next = daily(next_starts, next_starts + 3600);
    let hours = with_hours(&[&first, &next]);
    host.actions.hold_next_drain(Duration::from_secs(7));
    let agent = host.agent_with(&hours).await;
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
        "no reboot after the hours ended"
    );
    let store = host.store();
    assert!(store.slot_holders().await.expect("holders").is_empty());
    assert!(
        store
            .backoffs(&host.node)
            .await
            .expect("backoffs")
            .is_empty(),
        "a postponement is no failure"
    );
    assert!(host.entries(HistoryEvent::Failed).await.is_empty());
    let postponed = host.entries(HistoryEvent::Postponed).await;
    assert_eq!(postponed.len(), 1, "{postponed:?}");
    assert_eq!(postponed[0].process, Process::Reboot);
    assert!(postponed[0].released);
    let cause = postponed[0].cause.as_deref().unwrap_or_default();
    assert!(
        cause.contains("maintenance hours ended before the reboot"),
        "{cause}"
    );
    let open = store.open_requests(&host.node).await.expect("open");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].state, rota_store::RequestState::Pending);

    // The next window, when the next hours start: drained again (quickly this time) and
    // rebooted, once.
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    let started = host.entries(HistoryEvent::Started).await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert!(started[1].at >= next_starts * 1000, "{started:?}");
    agent.stop().await.expect("the agent stops cleanly");
    host.reboot_host("boot-2");
    let _agent = host.agent_with(&hours).await;
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

/// A procedure `name` of `priority` with `script`, as `rota mop submit` makes it.
fn procedure(name: &str, priority: u8, script: String) -> ProcedureSpec {
    let mut spec = ProcedureSpec::new(name, script);
    spec.priority = Priority::new(priority).expect("a priority");
    spec
}

fn script_log(host: &Host) -> Vec<String> {
    std::fs::read_to_string(host.path("scripts.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_procedure_finishes_after_the_hours_end_and_the_next_one_waits() {
    let host = Host::new().await;
    let log = host.path("scripts.log");
    let release = host.path("release-first");
    host.submit(&procedure(
        "first",
        10,
        format!(
            "echo start first >> {log}\nwhile [ ! -e {release} ]; do sleep 0.05; done\necho end first >> {log}\n",
            log = log.display(),
            release = release.display()
        ),
    ))
    .await;
    host.submit(&procedure(
        "second",
        20,
        format!("echo start second >> {}\n", log.display()),
    ))
    .await;
    let now = now_s();
    let ends = now + 4;
    let next_starts = now + 12;
    let first = daily(now - 60, ends);
    let next = daily(next_starts, next_starts + 3600);
    let hours = with_hours(&[&first, &next]);
    let _agent = host
        .agent_with(|c| {
            hours(c);
            c.procedure_poll = Duration::from_millis(100);
        })
        .await;
    host.wait_until("the first procedure", || {
        script_log(&host).contains(&"start first".to_string())
    })
    .await;
    while now_s() <= ends {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The hours ended while it ran: it is not stopped, and ends when its script says so.
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
    let finished = host.entries(HistoryEvent::Finished).await;
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0].process, Process::mop("first").expect("process"));
    let postponed = host.entries(HistoryEvent::Postponed).await;
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
    let started = host.entries(HistoryEvent::Started).await;
    assert!(
        started.iter().any(|e| e.at >= next_starts * 1000),
        "{started:?}"
    );
    assert!(host.entries(HistoryEvent::Failed).await.is_empty());
}
