//! kured's `--drain-delay` and `--reboot-delay`: the node waits, cordoned, before its pods are
//! evicted, and, drained, before its reboot starts. Both waits end at once on shutdown, and the
//! eviction after the drain delay is fenced again: a session superseded meanwhile evicts
//! nothing. In-process on a real SQLite store; the node actions log what they do and when (the
//! store's clock), and the tests order those times, they time nothing.

mod common;

use std::time::Duration;

use common::host::Host;
use rota_core::NodeState;
use rota_e2e::host::touch;
use rota_store::Store;

const DELAY_MS: i64 = 2000;
/// A delay no test waits out: only shutdown or a lost session ends it.
const FOREVER: Duration = Duration::from_secs(3600);
/// A bound on how long a stopping agent may take, far below [`FOREVER`].
const PATIENCE: Duration = Duration::from_secs(30);

fn at(stamped: &[(String, i64)], action: &str) -> i64 {
    stamped
        .iter()
        .find(|(a, _)| a == action)
        .map(|(_, at)| *at)
        .unwrap_or_else(|| panic!("no {action} in {stamped:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_waits_the_drain_delay_after_the_cordon_and_the_reboot_the_reboot_delay() {
    let host = Host::new().await;
    let _agent = host
        .agent_with(|c| {
            c.drain_delay = Duration::from_millis(2000);
            c.reboot_delay = Duration::from_millis(2000);
        })
        .await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the reboot command", || host.count("reboot") == 1)
        .await;
    assert_eq!(host.log(), ["cordon", "drain", "reboot"]);
    let stamped = host.actions.stamped();
    let (cordon, drain, reboot) = (
        at(&stamped, "cordon"),
        at(&stamped, "drain"),
        at(&stamped, "reboot"),
    );
    assert!(
        drain >= cordon + DELAY_MS,
        "cordoned at {cordon}, drained at {drain}: less than the drain delay of {DELAY_MS} ms"
    );
    assert!(
        reboot >= drain + DELAY_MS,
        "drained at {drain}, rebooted at {reboot}: less than the reboot delay of {DELAY_MS} ms"
    );
}

/// Without delays there is no separate cordon: the drain cordons, as before.
#[tokio::test]
async fn without_a_drain_delay_the_drain_alone_cordons() {
    let host = Host::new().await;
    let _agent = host.agent().await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the reboot command", || host.count("reboot") == 1)
        .await;
    assert_eq!(host.log(), ["drain", "reboot"]);
}

#[tokio::test]
async fn a_shutdown_ends_the_drain_delay_at_once_and_evicts_nothing() {
    let host = Host::new().await;
    let agent = host.agent_with(|c| c.drain_delay = FOREVER).await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the cordon", || host.count("cordon") == 1)
        .await;
    tokio::time::timeout(PATIENCE, agent.stop())
        .await
        .expect("the agent stopped during its drain delay")
        .expect("a clean shutdown");
    assert_eq!(host.log(), ["cordon"]);
    let record = host.record().await.expect("record");
    assert_eq!(record.state, NodeState::Draining, "{record:?}");
}

#[tokio::test]
async fn a_shutdown_ends_the_reboot_delay_at_once_and_reboots_nothing() {
    let host = Host::new().await;
    let agent = host.agent_with(|c| c.reboot_delay = FOREVER).await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_for("drained", |r| r.state == NodeState::Maintaining)
        .await;
    tokio::time::timeout(PATIENCE, agent.stop())
        .await
        .expect("the agent stopped during its reboot delay")
        .expect("a clean shutdown");
    assert_eq!(host.log(), ["drain"]);
}

/// Another session took the node over while it waited, cordoned: the eviction that the delay's
/// end would start is fenced, and never happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_superseded_during_the_drain_delay_evicts_nothing() {
    let host = Host::new().await;
    let agent = host
        .agent_with(|c| c.drain_delay = Duration::from_millis(2000))
        .await;
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the cordon", || host.count("cordon") == 1)
        .await;
    host.store()
        .open_session(&host.node, Duration::from_secs(600))
        .await
        .expect("a newer session");
    tokio::time::sleep(Duration::from_millis(4000)).await;
    assert_eq!(host.log(), ["cordon"], "evicted without the slot's session");
    let _ = tokio::time::timeout(PATIENCE, agent.stop())
        .await
        .expect("the agent stopped");
}
