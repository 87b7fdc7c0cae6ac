//! A waiting agent, on a real SQLite store and a real sentinel watcher: what it reads while it
//! is not its turn.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::CountingActions;
use rota_agent::{Agent, AgentConfig};
use rota_core::{NodeName, NodeState, Process};
use rota_store::{Acquire, SqliteStore, Store, StoreExt, Transition, WindowChange, now_millis};
use tokio_util::sync::CancellationToken;

fn name(node: &str) -> NodeName {
    NodeName::new(node).expect("a valid node name")
}

/// The node's state; `None` until its agent opened a session.
async fn state_of(store: &dyn Store, node: &NodeName) -> Option<NodeState> {
    store
        .node(node)
        .await
        .expect("the store reads")
        .map(|record| record.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_woken_by_timers_reads_the_cordon_only_when_its_turn_may_have_come() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("rota.db"))
            .await
            .expect("the store opens"),
    );
    store.set_concurrency(1).await.expect("concurrency set");

    // Another node holds the only slot.
    let holder = store
        .open_session(&name("holder"), Duration::from_secs(60))
        .await
        .expect("a session");
    store
        .add_request(&holder, &Process::Reboot, "test")
        .await
        .expect("a request");
    store
        .transition(
            &holder,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis()),
            }),
        )
        .await
        .expect("queued");
    assert!(matches!(
        store.try_acquire_slot(&holder).await.expect("a look"),
        Acquire::Granted(0)
    ));

    // The waiter's procedure poll wakes it every 20 ms while it waits for the release.
    let root = dir.path().join("waiter");
    std::fs::create_dir_all(root.join("run")).expect("/run");
    std::fs::write(root.join("boot_id"), "boot-1\n").expect("a boot id");
    std::fs::write(root.join("run/reboot-needed"), b"").expect("a sentinel");
    let mut config = AgentConfig::new(name("waiter"));
    config.host_root = root.clone();
    config.boot_id_file = root.join("boot_id");
    config.state_dir = std::path::PathBuf::from("/state");
    config.procedure_poll = Duration::from_millis(20);
    config.store_poll = Duration::from_secs(60);
    let actions = Arc::new(CountingActions::default());
    let cancel = CancellationToken::new();
    let agent =
        tokio::spawn(Agent::new(config, store.clone(), actions.clone(), cancel.clone()).run());

    let waiter = name("waiter");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while state_of(&*store, &waiter).await != Some(NodeState::Queued) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // About 25 wakes, each a look at the queue that says "wait".
    tokio::time::sleep(Duration::from_millis(500)).await;
    let while_waiting = actions.cordon_reads.load(Ordering::SeqCst);
    assert!(
        while_waiting <= 1,
        "the cordon was read {while_waiting} times while the slot was held by another node"
    );

    // The release is the waiter's turn: it reads the cordon and opens its window.
    store
        .transition(
            &holder,
            Transition::new(NodeState::Queued, NodeState::Idle).window(WindowChange::Cancel {
                reason: "test".into(),
            }),
        )
        .await
        .expect("released");
    while state_of(&*store, &waiter).await == Some(NodeState::Queued) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never took the slot"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        actions.cordon_reads.load(Ordering::SeqCst),
        while_waiting + 1,
        "the cordon is read once more, for the grant"
    );
    cancel.cancel();
    let _ = agent.await;
}
