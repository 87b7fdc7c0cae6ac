//! An idle agent on a real PostgreSQL (the server of `ROTA_TEST_POSTGRES_URL`, which
//! `scripts/test` starts), as the server itself sees it: it reacts to an operator's request
//! from another process at once, not at its next poll; it sends nothing between its slow
//! procedure polls; and its session, which nobody waits on, is renewed rarely, yet renewed with
//! the short TTL before the node queues.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{CountingActions, host_config};
use rota_agent::{Agent, AgentConfig};
use rota_core::{NodeName, NodeState, Process};
use rota_e2e::postgres::fresh_database;
use rota_store::{PostgresStore, Store, StoreExt};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const APPLICATION: &str = "idle-cost-agent";

/// The start of every statement the agent's connection began while `span` ran, as far as a
/// look at `pg_stat_activity` every 20 ms tells them apart.
async fn statements_during(admin: &PgPool, span: Duration) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let end = Instant::now() + span;
    let mut first = None;
    while Instant::now() < end {
        let starts: Vec<String> = sqlx::query_scalar(
            "SELECT coalesce(query_start::text, '') FROM pg_stat_activity \
             WHERE application_name = $1 AND datname = current_database()",
        )
        .bind(APPLICATION)
        .fetch_all(admin)
        .await
        .expect("pg_stat_activity");
        assert_eq!(
            starts.len(),
            1,
            "the agent holds one connection: {starts:?}"
        );
        match &first {
            None => first = Some(starts[0].clone()),
            Some(first) if first == &starts[0] => {}
            Some(_) => {
                seen.insert(starts[0].clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

/// How long the node's session has left, by the database's clock.
async fn session_left(admin: &PgPool, node: &NodeName) -> Duration {
    let left: i64 = sqlx::query_scalar(
        "SELECT s.deadline - rota_now_ms() FROM nodes n JOIN sessions s ON s.id = n.session_id \
         WHERE n.node = $1",
    )
    .bind(node.as_str())
    .fetch_one(admin)
    .await
    .expect("the node's session");
    Duration::from_millis(u64::try_from(left).unwrap_or(0))
}

/// One agent for node `idle` of a fresh database, with concurrency 1 and `tune` applied to its
/// configuration, started once its store is open; `None` without a test server.
struct IdleAgent {
    url: String,
    node: NodeName,
    operator: PostgresStore,
    session_ttl: Duration,
    cancel: CancellationToken,
    agent: JoinHandle<rota_agent::Result<()>>,
    _dir: tempfile::TempDir,
}

impl IdleAgent {
    async fn start(tune: impl FnOnce(&mut AgentConfig)) -> Option<IdleAgent> {
        let url = fresh_database().await?;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let node = NodeName::new("idle").expect("a node name");
        let mut config = host_config(dir.path(), &node);
        config.concurrency = Some(1);
        tune(&mut config);
        let session_ttl = config.session_ttl;
        let cancel = CancellationToken::new();
        let agent_url = format!("{url}?application_name={APPLICATION}");
        let store: Arc<dyn Store> = Arc::new(PostgresStore::open(&agent_url).await.expect("open"));
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
        Some(IdleAgent {
            url,
            node,
            operator,
            session_ttl,
            cancel,
            agent,
            _dir: dir,
        })
    }

    /// Waits until the node's state is `ok`, for 20 s at most.
    async fn wait_for(&self, what: &str, ok: impl Fn(NodeState) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(record)) = self.operator.node(&self.node).await
                && ok(record.state)
            {
                return;
            }
            assert!(Instant::now() < deadline, "the agent never became {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn request(&self) {
        self.operator
            .request(&self.node, &Process::Reboot, "operator")
            .await
            .expect("an operator's request");
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.agent
            .await
            .expect("the agent task")
            .expect("the agent stops cleanly");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_request_wakes_an_idle_agent_with_a_slow_poll() {
    let Some(idle) = IdleAgent::start(|config| {
        // Far longer than the test waits: only a wake can bring the request in time.
        config.store_poll = Duration::from_secs(300);
        config.procedure_poll = Duration::from_secs(300);
    })
    .await
    else {
        return;
    };
    idle.wait_for("idle", |state| state == NodeState::Idle)
        .await;
    // Past the agent's first look: it now waits for a change or its poll.
    tokio::time::sleep(Duration::from_secs(1)).await;
    idle.request().await;
    idle.wait_for("busy with the request", |state| state != NodeState::Idle)
        .await;
    idle.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_is_silent_and_renews_briefly_before_it_queues() {
    let Some(idle) = IdleAgent::start(|config| {
        // A node with work would re-read every 100 ms: an idle one must not.
        config.store_poll = Duration::from_millis(100);
        config.procedure_poll = Duration::from_secs(300);
        config.idle_session_ttl = Some(Duration::from_secs(300));
    })
    .await
    else {
        return;
    };
    let admin = PgPool::connect(&idle.url).await.expect("connect");
    idle.wait_for("idle", |state| state == NodeState::Idle)
        .await;
    // The last thing it does before it waits: the renewal with the idle TTL.
    let session_ttl = idle.session_ttl;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = session_left(&admin, &idle.node).await;
        if left > session_ttl * 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "an idle node's session runs {left:?} more, not the idle TTL"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let statements = statements_during(&admin, Duration::from_secs(3)).await;
    assert!(
        statements.is_empty(),
        "an idle agent sent statements in 3 s (a store poll of 100 ms): {statements:?}"
    );

    // Paused, the node stays queued: no slot's fenced write renews its session for it.
    idle.operator.pause("a test").await.expect("pause");
    idle.request().await;
    idle.wait_for("queued", |state| state == NodeState::Queued)
        .await;
    let busy_left = session_left(&admin, &idle.node).await;
    assert!(
        busy_left <= session_ttl,
        "a queued node has a session of {busy_left:?} more: a waiter behind it would wait \
         that long for a dead agent, not --session-ttl ({session_ttl:?})"
    );
    idle.stop().await;
}
