//! A node's record that does not read (edited by hand, or written by a newer rota) is refused
//! with the node, the field and the value, and holds no other node back: the queue goes on
//! without it. On SQLite always, on PostgreSQL when `ROTA_TEST_POSTGRES_URL` names a server.

use std::sync::Arc;
use std::time::Duration;

use rota_core::{Event, Lifecycle, NodeName, Process, Transition};
use rota_e2e::postgres::fresh_database;
use rota_store::{Acquire, PostgresStore, Session, SqliteStore, Store, StoreExt, now_millis};

const TTL: Duration = Duration::from_secs(60);

/// A node of `store` with a reboot request, queued from `eligible_at`.
async fn queued(store: &dyn Store, name: &str, eligible_at: i64) -> Session {
    let node = NodeName::new(name).expect("a node name");
    let session = store.open_session(&node, TTL).await.expect("a session");
    let decision = Lifecycle::idle()
        .apply(&Event::Requested { eligible_at })
        .expect("idle queues");
    store
        .transition(
            &session,
            Transition::of(decision).request(Process::Reboot, "sentinel"),
        )
        .await
        .expect("queued");
    session
}

/// Runs `sql` on the store's database, as someone editing it by hand.
type Edit = Box<dyn Fn(&'static str) -> futures::future::BoxFuture<'static, ()>>;

async fn a_queued_node_that_does_not_read_holds_nobody_back(store: Arc<dyn Store>, edit: Edit) {
    store.set_concurrency(1).await.expect("concurrency");
    let now = now_millis();
    queued(&*store, "a", now - 2000).await;
    let b = queued(&*store, "b", now - 1000).await;
    edit("UPDATE nodes SET node = 'A B!' WHERE node = 'a'").await;
    assert_eq!(
        store.try_acquire_slot(&b).await.expect("b asks"),
        Acquire::Granted(0),
        "the node behind the one that does not read takes the free slot"
    );
}

async fn a_record_that_does_not_read_names_the_node_the_field_and_the_value(
    store: Arc<dyn Store>,
    edit: Edit,
) {
    let now = now_millis();
    let c = queued(&*store, "c", now).await;
    let d = queued(&*store, "d", now).await;
    edit("UPDATE requests SET process = 'mop/Not_A_Name' WHERE node = 'c'").await;
    let refused = store
        .set_blocked(&c, None)
        .await
        .expect_err("a request that does not read is refused")
        .to_string();
    for part in ["node c", "requests.process", "mop/Not_A_Name"] {
        assert!(refused.contains(part), "{part:?} not in {refused:?}");
    }
    edit("UPDATE nodes SET state = 'hibernating' WHERE node = 'd'").await;
    let refused = store
        .node(&d.node)
        .await
        .expect_err("a state of a newer rota is refused")
        .to_string();
    for part in ["node d", "nodes.state", "hibernating"] {
        assert!(refused.contains(part), "{part:?} not in {refused:?}");
    }
    let e = queued(&*store, "e", now).await;
    assert!(
        store.node(&e.node).await.expect("e reads").is_some(),
        "the other nodes go on"
    );
}

async fn sqlite() -> (Arc<dyn Store>, Edit) {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let path = dir.join("rota.db");
    let store = SqliteStore::open(&path).await.expect("open");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("a second connection");
    let edit: Edit = Box::new(move |sql| {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::query(sql).execute(&pool).await.expect("edit");
        })
    });
    (Arc::new(store), edit)
}

async fn postgres() -> Option<(Arc<dyn Store>, Edit)> {
    let url = fresh_database().await?;
    let store = PostgresStore::open(&url).await.expect("open");
    let pool = sqlx::PgPool::connect(&url)
        .await
        .expect("a second connection");
    let edit: Edit = Box::new(move |sql| {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::query(sql).execute(&pool).await.expect("edit");
        })
    });
    Some((Arc::new(store), edit))
}

#[tokio::test]
async fn sqlite_a_queued_node_that_does_not_read_holds_nobody_back() {
    let (store, edit) = sqlite().await;
    a_queued_node_that_does_not_read_holds_nobody_back(store, edit).await;
}

#[tokio::test]
async fn sqlite_a_record_that_does_not_read_names_the_node_the_field_and_the_value() {
    let (store, edit) = sqlite().await;
    a_record_that_does_not_read_names_the_node_the_field_and_the_value(store, edit).await;
}

#[tokio::test]
async fn postgres_a_queued_node_that_does_not_read_holds_nobody_back() {
    let Some((store, edit)) = postgres().await else {
        return;
    };
    a_queued_node_that_does_not_read_holds_nobody_back(store, edit).await;
}

#[tokio::test]
async fn postgres_a_record_that_does_not_read_names_the_node_the_field_and_the_value() {
    let Some((store, edit)) = postgres().await else {
        return;
    };
    a_record_that_does_not_read_names_the_node_the_field_and_the_value(store, edit).await;
}
