//! The agent's whole lifecycle in-process, on a real SQLite store, real files and a real
//! sentinel watcher: restarts in every waiting state, the reboot never repeated, kustodian's
//! file protocol, drain failure, the release delay, the reboot sentinel command. Node actions
//! log what they do, so each test can count them.

mod common;

use std::time::Duration;

use common::host::{Host, RunningAgent};
use rota_agent::{AgentConfig, SentinelCommand};
use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use rota_e2e::host::{take_the_only_slot, touch};
use rota_store::{NodeRecord, StoreExt};

/// Once `agent` has started its node's reboot, the machine does not go down at once: the agent
/// is stopped and started again on the same boot, and must not reboot again. Then the reboot
/// happens, and the agent started after it finishes the window.
async fn reboot_once_across_a_restart(
    host: &Host,
    agent: RunningAgent,
) -> (RunningAgent, NodeRecord) {
    host.wait_until("the reboot command", || host.count("reboot") == 1)
        .await;
    agent.stop().await.expect("the agent stops cleanly");
    let agent = host.agent().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        host.count("reboot"),
        1,
        "a restarted agent never reboots again"
    );
    assert_eq!(
        host.record().await.map(|r| r.state),
        Some(NodeState::Rebooting)
    );
    agent.stop().await.expect("the agent stops cleanly");

    host.reboot_host("boot-2");
    let agent = host.agent().await;
    let record = wait_finished(host).await;
    (agent, record)
}

/// Waits until the node is idle again with its window finished.
async fn wait_finished(host: &Host) -> NodeRecord {
    host.wait_for("idle after the reboot", |r| {
        r.state == NodeState::Idle && r.last_result.as_deref() == Some("finished")
    })
    .await
}

/// Waits for `agent`'s reboot command, then stops it, reboots the host and starts an agent
/// configured by `configure` on the new boot.
async fn reboot_and_restart(
    host: &Host,
    agent: RunningAgent,
    configure: impl FnOnce(&mut AgentConfig),
) -> RunningAgent {
    host.wait_until("the reboot command", || host.count("reboot") == 1)
        .await;
    agent.stop().await.expect("the agent stops cleanly");
    host.reboot_host("boot-2");
    host.agent_with(configure).await
}

/// Asks for kustodian's maintenance and waits until the agent lets the host script start.
async fn start_maintenance(host: &Host) {
    std::fs::create_dir_all(host.root("var")).expect("mkdir");
    touch(&host.root("var/maintenance-required"));
    host.wait_until("maintenance in progress", || {
        host.root("var/maintenance-in-progress").exists()
    })
    .await;
}

/// The host script's last move, and what the agent does after it: checks, uncordons and
/// releases, without a reboot.
async fn finish_maintenance(host: &Host) {
    std::fs::remove_file(host.root("var/maintenance-required")).expect("rm");
    host.wait_for("idle", |r| r.state == NodeState::Idle && r.slot.is_none())
        .await;
    assert_eq!(host.log(), ["drain", "health", "uncordon"], "no reboot");
    assert_eq!(
        host.history().await,
        [
            (Process::Maintenance, HistoryEvent::Started),
            (Process::Maintenance, HistoryEvent::Finished)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_request_runs_the_lifecycle_once_across_kills() {
    let host = Host::new().await;
    let agent = host.agent().await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    let record = host
        .wait_for("rebooting", |r| r.state == NodeState::Rebooting)
        .await;
    assert_eq!(
        record.boot_id.as_deref(),
        Some("boot-1"),
        "boot id persisted"
    );
    let (agent, record) = reboot_once_across_a_restart(&host, agent).await;
    assert_eq!(record.slot, None, "the slot was released");
    assert_eq!(host.log(), ["drain", "reboot", "health", "uncordon"]);
    assert_eq!(
        host.history().await,
        [
            (Process::Reboot, HistoryEvent::Started),
            (Process::Reboot, HistoryEvent::Finished)
        ]
    );
    assert!(agent.stop().await.is_ok(), "a shutdown is clean");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_recorded_but_never_started_is_started_once() {
    let host = Host::new().await;
    touch(&host.root("run/reboot-needed"));
    // What an agent leaves behind when it stops between recording its reboot and starting the
    // command (killed, or its store call failed after the write had landed): `rebooting`,
    // with this boot's id, and no reboot under way.
    let store = host.store();
    let session = take_the_only_slot(store, &host.node, "/run/reboot-needed").await;
    let transitions = [
        rota_store::Transition::new(NodeState::Queued, NodeState::Draining)
            .process(Some(Process::Reboot))
            .window(rota_store::WindowChange::Open)
            .fields(rota_store::NodeFields {
                cordoned_by_rota: Some(true),
                ..rota_store::NodeFields::default()
            }),
        rota_store::Transition::new(NodeState::Draining, NodeState::Maintaining),
        rota_store::Transition::new(NodeState::Maintaining, NodeState::Rebooting).fields(
            rota_store::NodeFields {
                boot_id: Some(Some("boot-1".into())),
                reboot_started_at: Some(Some(rota_store::now_millis())),
                reboot_deadline: Some(Some(rota_store::now_millis() + 600_000)),
                ..rota_store::NodeFields::default()
            },
        ),
    ];
    for transition in transitions {
        store
            .transition(&session, transition)
            .await
            .expect("transition");
    }

    let agent = host.agent().await;
    reboot_once_across_a_restart(&host, agent).await;
    assert_eq!(host.log(), ["reboot", "health", "uncordon"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_boot_id_after_the_reboot_timeout_fails_closed() {
    let host = Host::new().await;
    let _agent = host
        .agent_with(|c| c.reboot_timeout = Duration::from_secs(1))
        .await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    let record = host
        .wait_for("failed", |r| r.state == NodeState::Failed)
        .await;
    assert_eq!(record.slot, Some(0), "a failed node keeps its slot");
    assert!(record.cordoned_by_rota, "and stays cordoned");
    assert_eq!(host.count("uncordon"), 0);
    assert!(
        record
            .last_result
            .as_deref()
            .is_some_and(|r| r.contains("boot id boot-1 unchanged")),
        "{record:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustodians_file_protocol_works_with_an_unchanged_host_script() {
    let host = Host::new().await;
    let _agent = host.agent().await;
    host.wait_for("registered", |_| true).await;
    start_maintenance(&host).await;
    assert_eq!(host.log(), ["drain"], "drained before the script may start");
    let record = host.record().await.expect("record");
    assert_eq!(record.state, NodeState::Maintaining);

    finish_maintenance(&host).await;
    assert!(!host.root("var/maintenance-in-progress").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_drain_uncordons_releases_and_backs_off() {
    let host = Host::new().await;
    host.actions.fail_drains("pdb says no");
    let _agent = host.agent().await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    let record = host
        .wait_for("queued again", |r| {
            r.state == NodeState::Queued && r.last_result.is_some()
        })
        .await;
    assert_eq!(record.slot, None, "the slot went back");
    assert!(!record.cordoned_by_rota);
    assert_eq!(host.log(), ["drain", "uncordon"]);
    let backoffs = host.store().backoffs(&host.node).await.expect("backoffs");
    assert_eq!(backoffs.len(), 1);
    assert_eq!(backoffs[0].last_interval, Duration::from_secs(60));
    assert!(backoffs[0].cause.contains("pdb says no"), "{backoffs:?}");
    assert_eq!(
        host.history().await,
        [
            (Process::Reboot, HistoryEvent::Started),
            (Process::Reboot, HistoryEvent::Failed)
        ]
    );
}

/// kured's `--reboot-sentinel-command`, run under the exec prefix: its "needed" asks for one
/// reboot. After that reboot the same verdict asks for nothing (it is older than the reboot),
/// so a command that goes on saying "needed" cannot reboot the node in a loop; a "not needed"
/// and then a new "needed" asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_command_asks_for_one_reboot_per_need() {
    let host = Host::new().await;
    let flag = host.path("needs-reboot");
    // Under the exec prefix, as in the chart (where it enters the host's namespaces).
    let command = format!(
        "test \"$ROTA_TEST_PREFIX\" = applied && test -e {}",
        flag.display()
    );
    let configure = |c: &mut AgentConfig| {
        c.reboot_sentinel_command = Some(SentinelCommand {
            command: command.clone(),
            interval: Duration::from_millis(200),
        });
        c.exec_prefix = vec!["env".into(), "ROTA_TEST_PREFIX=applied".into()];
    };
    let verdict = host.root("var/lib/rota/reboot-required-by-command");
    let agent = host.agent_with(configure).await;
    host.wait_for("registered", |_| true).await;
    touch(&flag);
    let agent = reboot_and_restart(&host, agent, configure).await;
    wait_finished(&host).await;
    // The command still says "needed": several runs later, no second reboot.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(host.count("reboot"), 1, "{:?}", host.log());
    assert!(
        verdict.exists(),
        "the verdict is kept while the command says so"
    );

    std::fs::remove_file(&flag).expect("rm");
    host.wait_until("the verdict withdrawn", || !verdict.exists())
        .await;
    touch(&flag);
    host.wait_until("the second reboot", || host.count("reboot") == 2)
        .await;
    agent.stop().await.expect("the agent stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_during_kustodian_maintenance_keeps_the_window_open() {
    let host = Host::new().await;
    let agent = host.agent().await;
    host.wait_for("registered", |_| true).await;
    start_maintenance(&host).await;
    agent.stop().await.expect("the agent stops cleanly");

    // The host script is still working when the agent comes back.
    let _agent = host.agent().await;
    let record = host
        .wait_for("maintaining after restart", |r| {
            r.state == NodeState::Maintaining
        })
        .await;
    assert_eq!(record.slot, Some(0), "the window keeps its slot");
    assert!(host.root("var/maintenance-in-progress").exists());
    assert_eq!(host.log(), ["drain"], "no second drain, no uncordon yet");

    finish_maintenance(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_survives_a_killed_agent_exactly_once() {
    let host = Host::new().await;
    // Another node holds the only slot, so this one stays queued.
    let store = host.store();
    let other = take_the_only_slot(store, &NodeName::new("node-b").expect("name"), "test").await;

    let agent = host.agent().await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_for("queued", |r| r.state == NodeState::Queued)
        .await;
    let before = store.open_requests(&host.node).await.expect("requests");
    assert_eq!(before.len(), 1);
    agent.stop().await.expect("the agent stops cleanly");

    let _agent = host.agent().await;
    host.wait_for("queued again", |r| r.state == NodeState::Queued)
        .await;
    let after = store.open_requests(&host.node).await.expect("requests");
    assert_eq!(
        after.iter().map(|r| r.id).collect::<Vec<_>>(),
        before.iter().map(|r| r.id).collect::<Vec<_>>(),
        "the restarted agent serves the recorded request, not a new one"
    );
    store
        .unlock(&other.node, "test done")
        .await
        .expect("unlock");
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_granted_for_a_withdrawn_request_is_given_back_without_a_drain() {
    let host = Host::new().await;
    // What a crash right after the slot was granted leaves behind: queued, holding the slot,
    // and the sentinel removed while the agent was down.
    let store = host.store();
    take_the_only_slot(store, &host.node, "/run/reboot-needed").await;

    let _agent = host.agent().await;
    let record = host
        .wait_for("idle", |r| r.state == NodeState::Idle && r.slot.is_none())
        .await;
    assert!(!record.cordoned_by_rota);
    assert!(
        host.log().is_empty(),
        "nothing was drained: {:?}",
        host.log()
    );
    assert!(store.slot_holders().await.expect("holders").is_empty());
}

/// The release delay: the node keeps its slot for the delay after its health check first
/// passed, and checks go on meanwhile. The store's clock, at the health checks and in the
/// history, not the test's, shows the order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_goes_back_no_earlier_than_the_release_delay_after_the_node_is_healthy() {
    const DELAY_MS: i64 = 3000;
    let host = Host::new().await;
    let delayed = |c: &mut AgentConfig| {
        c.release_delay = Duration::from_secs(3);
    };
    let agent = host.agent_with(delayed).await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    let _agent = reboot_and_restart(&host, agent, delayed).await;
    let record = wait_finished(&host).await;
    assert_eq!(record.slot, None, "the slot was released");

    let passes = host.actions.health_checks();
    let first_pass = *passes.first().expect("a passed health check");
    let entries = host
        .store()
        .history(&rota_store::HistoryFilter::default())
        .await
        .expect("history");
    let released = entries
        .iter()
        .find(|e| e.event == HistoryEvent::Finished && e.released)
        .expect("a finished entry that released the slot");
    assert!(
        released.at >= first_pass + DELAY_MS,
        "released at {} but healthy since {first_pass}: less than the delay of {DELAY_MS} ms",
        released.at
    );
    assert!(
        passes.len() >= 2,
        "the health checks went on during the delay: {passes:?}"
    );
}
