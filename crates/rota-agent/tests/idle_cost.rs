//! What an idle agent costs a real PostgreSQL (the server of `ROTA_TEST_POSTGRES_URL`, which
//! `scripts/test` starts), as the server itself sees it: nothing between its slow procedure
//! polls, and a session that nobody waits on renewed rarely, yet renewed with the short TTL
//! before the node queues.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{CountingActions, host_config};
use rota_agent::Agent;
use rota_core::{NodeName, NodeState, Process};
use rota_e2e::postgres::fresh_database;
use rota_store::{OperatorStore, PostgresStore, ReadStore, Store};
use sqlx::PgPool;
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
             WHERE application_name = $1",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_is_silent_and_renews_briefly_before_it_queues() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let node = NodeName::new("quiet").expect("a node name");
    let mut config = host_config(dir.path(), &node);
    config.concurrency = Some(1);
    // A node with work would re-read every 100 ms: an idle one must not.
    config.store_poll = Duration::from_millis(100);
    config.procedure_poll = Duration::from_secs(300);
    config.idle_session_ttl = Some(Duration::from_secs(300));
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
    let admin = PgPool::connect(&url).await.expect("connect");
    let wait_for = async |what: &str, ok: &dyn Fn(NodeState) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(record)) = operator.node(&node).await
                && ok(record.state)
            {
                return;
            }
            assert!(Instant::now() < deadline, "the agent never became {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    wait_for("idle", &|state| state == NodeState::Idle).await;
    // Past its first looks and the renewal with the idle TTL.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let statements = statements_during(&admin, Duration::from_secs(3)).await;
    assert!(
        statements.is_empty(),
        "an idle agent sent statements in 3 s (a store poll of 100 ms): {statements:?}"
    );
    let idle_left = session_left(&admin, &node).await;
    assert!(
        idle_left > session_ttl * 2,
        "an idle node's session runs {idle_left:?} more, not the idle TTL"
    );

    // Paused, the node stays queued: no slot's fenced write renews its session for it.
    operator.pause("a test").await.expect("pause");
    operator
        .request(&node, &Process::Reboot, "operator")
        .await
        .expect("an operator's request");
    wait_for("queued", &|state| state == NodeState::Queued).await;
    let busy_left = session_left(&admin, &node).await;
    assert!(
        busy_left <= session_ttl,
        "a queued node has a session of {busy_left:?} more: a waiter behind it would wait \
         that long for a dead agent, not --session-ttl ({session_ttl:?})"
    );
    cancel.cancel();
    agent
        .await
        .expect("the agent task")
        .expect("the agent stops cleanly");
}
