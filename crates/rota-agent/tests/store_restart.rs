//! An agent against a real PostgreSQL (the server of `ROTA_TEST_POSTGRES_URL`, which
//! `scripts/test` starts) whose connections are all ended as the agent starts, as a restart
//! of the server ends them, or that refuses the agent's connections for a while.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{CountingActions, host_config};
use rota_agent::Agent;
use rota_core::{NodeName, NodeState};
use rota_e2e::postgres::{
    admit_role, database_with_own_role, end_connections, fresh_database, refuse_role,
};
use rota_observer::AgentObserver;
use rota_store::{FIRST_RETRY_PAUSE, LONGEST_RETRY_PAUSE, PostgresStore, Store, StoreExt};
use tokio::task::JoinHandle;
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

    // The observer's own first read after the restart fails too: it reads again.
    wait_until_started(&observer, &node, &agent, Duration::from_secs(10)).await;
    cancel.cancel();
    agent
        .await
        .expect("the agent task")
        .expect("the agent stops cleanly");
}

/// Waits until `observer` reads `node` idle, as the agent's session makes it; fails if the agent
/// stops first or `patience` runs out.
async fn wait_until_started(
    observer: &PostgresStore,
    node: &NodeName,
    agent: &JoinHandle<rota_agent::Result<()>>,
    patience: Duration,
) {
    let deadline = Instant::now() + patience;
    while !matches!(observer.node(node).await, Ok(Some(record)) if record.state == NodeState::Idle)
    {
        assert!(!agent.is_finished(), "the agent stopped");
        assert!(
            Instant::now() < deadline,
            "the agent did not open its session within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// When each refusal of the store came, as the agent reports them.
#[derive(Default)]
struct Refusals(Mutex<Vec<Instant>>);

impl AgentObserver for Refusals {
    fn store_access(&self, ok: bool) {
        if !ok {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Instant::now());
        }
    }
}

impl Refusals {
    fn times(&self) -> Vec<Instant> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A database that refuses the agent's connections (its role's connection limit reached, as a
/// fleet can exhaust `max_connections`) is asked again after longer and longer pauses, not
/// every second, and the agent starts as soon as the database takes it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_asks_a_database_that_refuses_it_less_and_less_often() {
    let Some((admin_url, url, role)) = database_with_own_role().await else {
        return;
    };
    let agents: Arc<dyn Store> = Arc::new(PostgresStore::open(&url).await.expect("open"));
    refuse_role(&admin_url, &role).await;

    let dir = tempfile::tempdir().expect("a temporary directory");
    let node = NodeName::new("refused").expect("a node name");
    let refusals = Arc::new(Refusals::default());
    let cancel = CancellationToken::new();
    let agent = tokio::spawn(
        Agent::new(
            host_config(dir.path(), &node),
            agents,
            Arc::new(CountingActions::default()),
            cancel.clone(),
        )
        .observe(refusals.clone())
        .run(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while refusals.times().len() < 4 {
        assert!(!agent.is_finished(), "the agent stopped: {:?}", agent.await);
        assert!(Instant::now() < deadline, "{:?}", refusals.times());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let times = refusals.times();
    for (n, pair) in times.windows(2).enumerate() {
        let pause = pair[1] - pair[0];
        let shortest = FIRST_RETRY_PAUSE * 2u32.pow(u32::try_from(n).expect("a few"));
        assert!(
            pause >= shortest,
            "refusal {} came {pause:?} after the one before, not at least {shortest:?}",
            n + 1
        );
    }

    admit_role(&admin_url, &role).await;
    let observer = PostgresStore::open(&admin_url).await.expect("open");
    // The longest pause with its random part, and time to start.
    let patience = LONGEST_RETRY_PAUSE * 2 + Duration::from_secs(10);
    wait_until_started(&observer, &node, &agent, patience).await;
    cancel.cancel();
    agent
        .await
        .expect("the agent task")
        .expect("the agent stops cleanly");
}
