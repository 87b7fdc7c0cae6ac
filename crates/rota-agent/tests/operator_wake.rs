//! An idle agent on a real PostgreSQL (the server of `ROTA_TEST_POSTGRES_URL`, which
//! `scripts/test` starts) reacts to an operator's request from another process at once, not at
//! its next store poll.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{CountingActions, host_config};
use rota_agent::Agent;
use rota_core::{NodeName, NodeState, Process};
use rota_e2e::postgres::fresh_database;
use rota_store::{OperatorStore, PostgresStore, ReadStore, Store};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_request_wakes_an_idle_agent_with_a_slow_poll() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let node = NodeName::new("idle").expect("a node name");
    let mut config = host_config(dir.path(), &node);
    config.concurrency = Some(1);
    // Far longer than the test waits: only a wake can bring the request in time.
    config.store_poll = Duration::from_secs(300);
    config.procedure_poll = Duration::from_secs(300);
    let cancel = CancellationToken::new();
    let store: Arc<dyn Store> = Arc::new(PostgresStore::open(&url).await.expect("open"));
    let agent = tokio::spawn(
        Agent::new(
            config,
            store,
            Arc::new(CountingActions::default()),
            cancel.clone(),
        )
        .run(),
    );
    let operator = PostgresStore::open(&url).await.expect("open");
    let wait_for = async |what: &str, ok: &dyn Fn(NodeState) -> bool| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(record)) = operator.node(&node).await
                && ok(record.state)
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the agent never became {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    wait_for("idle", &|state| state == NodeState::Idle).await;
    // Past the agent's first look: it now waits for a change or its poll.
    tokio::time::sleep(Duration::from_secs(1)).await;

    operator
        .request(&node, &Process::Reboot, "operator")
        .await
        .expect("an operator's request");
    wait_for("busy with the request", &|state| state != NodeState::Idle).await;
    cancel.cancel();
    agent
        .await
        .expect("the agent task")
        .expect("the agent stops cleanly");
}
