//! The verification after a reboot, on a real SQLite store and a real sentinel watcher: how the
//! agent that starts with a new boot id proves its slot before it uncordons.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::{WriteLog, host_config};
use rota_actions::{ActionError, NodeActions, RebootHandle};
use rota_agent::Agent;
use rota_core::{HistoryEvent, NodeName, NodeState};
use rota_store::{HistoryFilter, SqliteStore, Store, StoreExt};
use tokio_util::sync::CancellationToken;

fn name(node: &str) -> NodeName {
    NodeName::new(node).expect("a valid node name")
}

/// A node whose reboot command exits at once (the test then starts the agent again with a new
/// boot id), and whose first `unhealthy` health checks fail.
#[derive(Default)]
struct RebootingActions {
    unhealthy: AtomicUsize,
    health_checks: AtomicUsize,
    uncordons: AtomicUsize,
}

#[async_trait]
impl NodeActions for RebootingActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        Ok(false)
    }

    async fn drain(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        self.uncordons.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        let (done, handle) = tokio::sync::oneshot::channel();
        let _ = done.send(Ok(()));
        Ok(handle)
    }

    async fn health(&self) -> Result<(), ActionError> {
        let check = self.health_checks.fetch_add(1, Ordering::SeqCst);
        if check < self.unhealthy.load(Ordering::SeqCst) {
            return Err(ActionError {
                action: "health",
                detail: "not ready yet".into(),
            });
        }
        Ok(())
    }
}

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs one node through a reboot: its agent until the node is rebooting, then a new agent
/// (as after the reboot) with a new boot id until the window is finished. Returns the writes the
/// second agent made, and its actions.
async fn reboot_once(dir: &Path, unhealthy: usize) -> (Vec<String>, Arc<RebootingActions>) {
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.join("rota.db"))
            .await
            .expect("the store opens"),
    );
    store.set_concurrency(1).await.expect("concurrency set");
    let node = name("node-1");
    let mut config = host_config(dir, &node);
    let root = config.host_root.clone();
    std::fs::write(root.join("run/reboot-needed"), b"").expect("a sentinel");
    config.state_dir = std::path::PathBuf::from("/state");
    config.health_interval = Duration::from_millis(20);

    let before = Arc::new(RebootingActions::default());
    let cancel = CancellationToken::new();
    let first =
        tokio::spawn(Agent::new(config.clone(), store.clone(), before, cancel.clone()).run());
    wait_until("the node is rebooting", async || {
        store
            .node(&node)
            .await
            .expect("the store reads")
            .is_some_and(|r| r.state == NodeState::Rebooting)
    })
    .await;
    cancel.cancel();
    first
        .await
        .expect("the first agent did not panic")
        .expect("the first agent ends cleanly");

    std::fs::write(root.join("boot_id"), "boot-2\n").expect("a new boot id");
    let log = Arc::new(WriteLog::default());
    let after = Arc::new(RebootingActions::default());
    after.unhealthy.store(unhealthy, Ordering::SeqCst);
    let cancel = CancellationToken::new();
    let second = tokio::spawn(
        Agent::new(config, store.clone(), after.clone(), cancel.clone())
            .observe(log.clone())
            .run(),
    );
    wait_until("the window is finished", async || {
        !store
            .history(&HistoryFilter {
                node: Some(node.clone()),
                event: Some(HistoryEvent::Finished),
                ..HistoryFilter::default()
            })
            .await
            .expect("the store reads")
            .is_empty()
    })
    .await;
    cancel.cancel();
    second
        .await
        .expect("the second agent did not panic")
        .expect("the second agent ends cleanly");
    (log.writes(), after)
}

/// The writes between the boot change and the window's end.
fn between_boot_change_and_finish(calls: &[String]) -> &[String] {
    let start = calls
        .iter()
        .position(|c| c.ends_with("rebooting->verifying"))
        .unwrap_or_else(|| panic!("no boot change in {calls:?}"));
    let end = calls
        .iter()
        .position(|c| c == "transition verifying->idle")
        .unwrap_or_else(|| panic!("no finish in {calls:?}"));
    &calls[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_healthy_at_once_uncordons_on_the_proof_of_its_boot_change() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (calls, actions) = reboot_once(dir.path(), 0).await;
    assert_eq!(
        between_boot_change_and_finish(&calls),
        ["fenced_transition rebooting->verifying"],
        "the boot change proves the slot and nothing else is written before the finish: {calls:?}"
    );
    assert_eq!(
        actions.health_checks.load(Ordering::SeqCst),
        1,
        "the check made with the boot change is the verification's"
    );
    assert_eq!(actions.uncordons.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_waited_to_be_healthy_proves_its_slot_again_before_it_uncordons() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (calls, actions) = reboot_once(dir.path(), 2).await;
    assert_eq!(
        between_boot_change_and_finish(&calls),
        ["fenced_transition rebooting->verifying", "fence"],
        "after a wait the boot change's proof is stale: {calls:?}"
    );
    assert_eq!(actions.health_checks.load(Ordering::SeqCst), 3);
    assert_eq!(actions.uncordons.load(Ordering::SeqCst), 1);
}
