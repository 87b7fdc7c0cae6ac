//! Agents against a real PostgreSQL (the server of `ROTA_TEST_POSTGRES_URL`, which
//! `scripts/test` starts) whose connections are all ended, as a restart of the server ends
//! them: in the middle of a simulated rollout, and as an agent starts.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rota_agent::{ActionError, Agent, AgentConfig, NodeActions, RebootHandle};
use rota_core::{HistoryEvent, NodeName, NodeState};
use rota_e2e::postgres::{end_connections, fresh_database};
use rota_simulate::{Options, StoreChoice, run};
use rota_store::{HistoryFilter, PostgresStore, Store, StoreUrl};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Two database restarts during a rollout (once the first node finished, and once half had):
/// the agents and the harness ride them out, every node reboots exactly once, and never more
/// than `concurrency` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_rides_out_database_restarts_and_reboots_every_node_once() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let nodes = 8;
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let restarts = tokio::spawn({
        let url = url.clone();
        async move {
            let mut ended = Vec::new();
            for threshold in [1, nodes / 2] {
                while let Some(completed) = done.recv().await {
                    if completed >= threshold {
                        ended.push((completed, end_connections(&url).await));
                        break;
                    }
                }
            }
            ended
        }
    });
    let summary = run(
        Options {
            nodes,
            concurrency: 2,
            maintenance_time: Duration::from_millis(300),
            store: StoreChoice::Url(StoreUrl::from_str(&url).expect("the database's URL")),
        },
        move |completed, _| {
            let _ = done_tx.send(completed);
        },
    )
    .await
    .expect("the rollout completes");
    let ended = restarts.await.expect("the restarts");
    assert_eq!(ended.len(), 2, "both restarts happened: {ended:?}");
    assert!(
        ended
            .iter()
            .all(|&(completed, n)| completed < nodes && n > 0),
        "each restart ended connections mid-rollout: {ended:?}"
    );
    assert_eq!(
        (summary.completed, summary.failed),
        (nodes, 0),
        "{summary:?}"
    );
    assert!(summary.max_concurrent <= 2, "{summary:?}");

    let store = PostgresStore::open(&url).await.expect("open");
    let history = store
        .history(&HistoryFilter::default())
        .await
        .expect("history");
    for node in store.nodes().await.expect("nodes") {
        let count = |event| {
            history
                .iter()
                .filter(|e| e.node == node.node && e.event == event)
                .count()
        };
        assert_eq!(
            (count(HistoryEvent::Started), count(HistoryEvent::Finished)),
            (1, 1),
            "node {}: {history:?}",
            node.node
        );
    }
}

/// A node with nothing to do: the agent below only starts.
struct Quiet;

#[async_trait]
impl NodeActions for Quiet {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        Ok(false)
    }

    async fn drain(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        Err(ActionError {
            action: "reboot",
            detail: "not in this test".into(),
        })
    }

    async fn health(&self) -> Result<(), ActionError> {
        Ok(())
    }
}

/// An agent whose first call meets a connection the restarted server has ended waits for the
/// store and starts, instead of stopping with the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_starts_during_a_database_restart_waits_for_it() {
    let Some(url) = fresh_database().await else {
        return;
    };
    // The agent's own handle, with a connection idle from before the restart.
    let agents: Arc<dyn Store> = Arc::new(PostgresStore::open(&url).await.expect("open"));
    agents.nodes().await.expect("a first read");
    let observer = PostgresStore::open(&url).await.expect("open");
    assert!(end_connections(&url).await >= 2, "the handles' connections");

    let dir = tempfile::tempdir().expect("a temporary directory");
    let root = dir.path().join("host");
    std::fs::create_dir_all(root.join("run")).expect("/run");
    std::fs::write(root.join("boot_id"), "boot-1\n").expect("a boot id");
    let node = NodeName::new("starting").expect("a node name");
    let mut config = AgentConfig::new(node.clone());
    config.host_root = root.clone();
    config.boot_id_file = root.join("boot_id");
    let cancel = CancellationToken::new();
    let agent = tokio::spawn(Agent::new(config, agents, Arc::new(Quiet), cancel.clone()).run());

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // The observer's own first read after the restart fails too: it reads again.
        if let Ok(Some(record)) = observer.node(&node).await {
            assert_eq!(record.state, NodeState::Idle);
            break;
        }
        assert!(!agent.is_finished(), "the agent stopped: {:?}", agent.await);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent never opened its session"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    agent
        .await
        .expect("the agent task")
        .expect("the agent stops cleanly");
}
