//! An agent against a real PostgreSQL (the server of `ROTA_TEST_POSTGRES_URL`, which
//! `scripts/test` starts) whose connections are all ended as the agent starts, as a restart
//! of the server ends them.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{CountingActions, host_config};
use rota_agent::Agent;
use rota_core::{NodeName, NodeState};
use rota_e2e::postgres::{end_connections, fresh_database};
use rota_store::{PostgresStore, Store};
use tokio_util::sync::CancellationToken;

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
    let node = NodeName::new("starting").expect("a node name");
    let config = host_config(dir.path(), &node);
    let cancel = CancellationToken::new();
    let agent = tokio::spawn(
        Agent::new(
            config,
            agents,
            Arc::new(CountingActions::default()),
            cancel.clone(),
        )
        .run(),
    );

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
