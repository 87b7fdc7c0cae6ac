//! The store conformance suite against a real PostgreSQL, plus PostgreSQL-only cases. Every
//! test gets a database of its own on the server named by `ROTA_TEST_POSTGRES_URL` (see
//! [`rota_e2e::postgres`]).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use rota_core::{NodeName, NodeState, ProcedureSpec, Process};
use rota_e2e::postgres::{end_connections, fresh_database};
use rota_store::conformance::{Stress, stress};
use rota_store::{
    PostgresStore, Session, Store, StoreExt, StoreUrl, Transition, WAKE_ALL, WindowChange,
    now_millis,
};

async fn make() -> Option<Arc<dyn Store>> {
    let url = fresh_database().await?;
    Some(Arc::new(
        PostgresStore::open(&url).await.expect("open store"),
    ))
}

rota_store::conformance_tests!(skippable make);

/// Several handles on one database, as agents on several hosts have.
async fn handles(url: &str, count: usize) -> Vec<Arc<dyn Store>> {
    let url = StoreUrl::from_str(url).expect("url");
    let mut stores = Vec::new();
    for _ in 0..count {
        stores.push(url.open().await.expect("open"));
    }
    stores
}

/// Node `a` of `store` with a reboot request, queued and granted slot 0.
async fn holding_slot_0(store: &dyn Store, ttl: Duration) -> Session {
    let node = NodeName::new("a").expect("name");
    let s = store.open_session(&node, ttl).await.expect("session");
    store
        .add_request(&s, &Process::Reboot, "test")
        .await
        .expect("request");
    store
        .transition(
            &s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("enqueue");
    assert_eq!(
        store.try_acquire_slot(&s).await.expect("acquire").slot(),
        Some(0)
    );
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_sessions_over_four_handles_never_double_grant() {
    let Some(url) = fresh_database().await else {
        return;
    };
    stress(handles(&url, 4).await, Stress::SIXTY_FOUR).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_reaches_every_handle_through_notify() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let stores = handles(&url, 3).await;
    let (writer, watchers) = (&stores[0], &stores[1..]);
    writer.set_concurrency(1).await.expect("set concurrency");
    // The new concurrency reaches the watchers through NOTIFY as well, whenever the server
    // delivers it: wait until it has, so that the counts below see the release alone.
    for watcher in watchers {
        let mut changes = watcher.changes();
        tokio::time::timeout(Duration::from_secs(30), changes.wait_for(|n| *n > 0))
            .await
            .expect("the new concurrency is notified")
            .map(drop)
            .expect("store alive");
    }
    let s = holding_slot_0(&**writer, Duration::from_secs(30)).await;
    let mut receivers: Vec<_> = watchers.iter().map(|w| w.changes()).collect();
    let before: Vec<u64> = receivers
        .iter_mut()
        .map(|r| *r.borrow_and_update())
        .collect();
    writer
        .transition(
            &s,
            Transition::new(NodeState::Queued, NodeState::Idle).window(WindowChange::Cancel {
                reason: "test".into(),
            }),
        )
        .await
        .expect("release");
    for (receiver, before) in receivers.iter_mut().zip(before) {
        // Generous: this checks that the change arrives at all, not how fast.
        tokio::time::timeout(Duration::from_secs(30), receiver.changed())
            .await
            .expect("the release is notified")
            .expect("store alive");
        assert_eq!(
            *receiver.borrow(),
            before + 1,
            "a release moves every handle's counter by exactly one"
        );
    }
}

/// An agent's handle holds one connection to the server, its listener's, however many calls
/// it makes at once, and the listener still hears every other handle's change in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agents_handle_holds_one_connection_listen_included() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let agent_url = format!("{url}?application_name=one-agent");
    let agent = PostgresStore::open(&agent_url).await.expect("open");
    let operator = PostgresStore::open(&url).await.expect("open");
    let admin = sqlx::PgPool::connect(&url).await.expect("admin");
    let connections = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'one-agent'",
        )
        .fetch_one(&admin)
        .await
        .expect("count the agent's connections")
    };
    let mut changes = agent.changes();
    let mut most = 0;
    for round in 0..20 {
        let before = *changes.borrow_and_update();
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..8 {
            let agent = agent.clone();
            calls.spawn(async move {
                let node = NodeName::new(format!("n{round}-{i}")).expect("name");
                let s = agent
                    .open_session(&node, Duration::from_secs(30))
                    .await
                    .expect("session");
                agent
                    .heartbeat(&s, Duration::from_secs(30))
                    .await
                    .expect("heartbeat");
                agent.nodes().await.expect("nodes");
            });
        }
        let node = NodeName::new(format!("op{round}")).expect("name");
        let s = operator
            .open_session(&node, Duration::from_secs(30))
            .await
            .expect("session");
        operator
            .request(&node, &Process::Reboot, "test")
            .await
            .expect("request");
        operator.close_session(&s).await.expect("close");
        while calls
            .join_next()
            .await
            .transpose()
            .expect("a call")
            .is_some()
        {
            most = most.max(connections().await);
        }
        most = most.max(connections().await);
        tokio::time::timeout(
            Duration::from_secs(30),
            changes.wait_for(|n| *n >= before + WAKE_ALL),
        )
        .await
        .expect("the operator's request is heard between the calls")
        .map(drop)
        .expect("store alive");
    }
    assert_eq!(most, 1, "the agent's connections, listener included");
}

/// An operator's request, cancel and new procedure change nothing an agent waits on, so each
/// wakes every agent (a jump of `WAKE_ALL` on every other handle's counter), and an idle agent
/// finds the change at once instead of at its next `--store-poll`. What changes nothing (the
/// same procedure again, a cancel with nothing pending) wakes nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operators_request_cancel_and_procedure_wake_every_agent() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let stores = handles(&url, 2).await;
    let (operator, agent) = (&stores[0], &stores[1]);
    let node = NodeName::new("a").expect("name");
    agent
        .open_session(&node, Duration::from_secs(30))
        .await
        .expect("session");
    let changes = agent.changes();
    let woken = async |what: &str, before: u64| {
        let mut changes = changes.clone();
        tokio::time::timeout(
            Duration::from_secs(30),
            changes.wait_for(|n| *n >= before + WAKE_ALL),
        )
        .await
        .unwrap_or_else(|_| panic!("{what} woke nobody"))
        .map(drop)
        .expect("store alive");
    };
    let before = *changes.borrow();
    let (_, created) = operator
        .request(&node, &Process::Reboot, "operator")
        .await
        .expect("request");
    assert!(created);
    woken("a request", before).await;
    let before = *changes.borrow();
    assert!(
        operator
            .cancel(&node, &Process::Reboot)
            .await
            .expect("cancel")
    );
    woken("a cancel", before).await;
    let spec = ProcedureSpec::new("firmware", "true");
    let before = *changes.borrow();
    assert!(operator.submit_procedure(&spec).await.expect("submit").1);
    woken("a new procedure", before).await;

    let before = *agent.changes().borrow();
    assert!(!operator.submit_procedure(&spec).await.expect("submit").1);
    assert!(
        !operator
            .cancel(&node, &Process::Reboot)
            .await
            .expect("cancel")
    );
    // A release would be +1; the wakes above came within milliseconds.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        *agent.changes().borrow(),
        before,
        "nothing changed, nobody woken"
    );
}

/// A write of a node that waited for another write's lock of the node's row reads the record
/// that write left, not its statement's snapshot from before the wait: here a transition that
/// opens the window while an operator's cancel of the node's pending request holds the lock
/// does not make the canceled request active again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_waited_for_the_nodes_lock_reads_what_the_other_wrote() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = PostgresStore::open(&url).await.expect("open");
    let s = holding_slot_0(&store, Duration::from_secs(60)).await;
    // An operator's cancel as the store writes it: under the node's row lock, with a new
    // version of the row.
    let admin = sqlx::PgPool::connect(&url).await.expect("admin");
    let mut cancel = admin.begin().await.expect("begin");
    for sql in [
        "SELECT 1 FROM nodes WHERE node = 'a' FOR UPDATE",
        "UPDATE requests SET state = 'canceled', finished_at = rota_now_ms() WHERE node = 'a'",
        "UPDATE nodes SET node = node WHERE node = 'a'",
    ] {
        sqlx::query(sql).execute(&mut *cancel).await.expect(sql);
    }
    let opening = tokio::spawn({
        let store = store.clone();
        let s = s.clone();
        async move {
            store
                .transition(
                    &s,
                    Transition::new(NodeState::Queued, NodeState::Draining)
                        .window(WindowChange::Open),
                )
                .await
        }
    });
    let waiting = async {
        loop {
            let blocked: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&admin)
            .await
            .expect("count the waiting writes");
            if blocked > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the transition waits for the node's lock");
    cancel.commit().await.expect("cancel");
    admin.close().await;
    let record = opening.await.expect("task").expect("the window opens");
    assert_eq!(record.state, NodeState::Draining);
    let requests = store.all_requests().await.expect("requests");
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(
        requests[0].state,
        rota_store::RequestState::Canceled,
        "{requests:?}"
    );
}

/// An agent's write is decided on the node's record as it is, not as the agent's handle last
/// wrote it (another handle may have written it since), and a write that changes nothing still
/// checks the session.
#[tokio::test]
async fn a_write_decides_on_the_record_as_it_is_and_always_checks_the_session() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let agent = PostgresStore::open(&url).await.expect("open");
    let operator = PostgresStore::open(&url).await.expect("open");
    let s = holding_slot_0(&agent, Duration::from_secs(60)).await;
    agent
        .transition(
            &s,
            Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
        )
        .await
        .expect("the window opens");
    operator.unlock(&s.node, "test").await.expect("unlock");
    // Draining, as the agent's handle last wrote it, refuses this; idle, as the operator
    // left it, allows it.
    let record = agent
        .transition(
            &s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis()),
            }),
        )
        .await
        .expect("decided on the record as it is, not as the handle last wrote it");
    assert_eq!(record.state, NodeState::Queued);
    assert_eq!(record.slot, None, "the unlock gave the slot back");
    let newer = operator
        .open_session(&s.node, Duration::from_secs(60))
        .await
        .expect("a newer session");
    assert!(
        matches!(
            agent.set_blocked(&s, None).await,
            Err(rota_store::Error::Fenced { .. })
        ),
        "a write that changes nothing still checks the session"
    );
    assert!(agent.set_blocked(&newer, None).await.is_ok());
}

#[tokio::test]
async fn a_newer_schema_is_refused_without_change() {
    let Some(url) = fresh_database().await else {
        return;
    };
    drop(PostgresStore::open(&url).await.expect("create"));
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101000000, 'from the future', TRUE, '\\x00', 0)",
    )
    .execute(&pool)
    .await
    .expect("fake a future migration");
    let tables = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, String>(
            "SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables \
             WHERE table_schema = current_schema()",
        )
        .fetch_one(&pool)
        .await
        .expect("list tables")
    };
    let before = tables(pool.clone()).await;
    let err = PostgresStore::open(&url).await.err().expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("newer than this rota binary") && text.contains("nothing was changed"),
        "{text}"
    );
    assert_eq!(tables(pool.clone()).await, before, "nothing was changed");
    pool.close().await;
}

#[tokio::test]
async fn another_programs_database_is_refused() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    sqlx::query("CREATE TABLE invoices (id BIGINT PRIMARY KEY)")
        .execute(&pool)
        .await
        .expect("create table");
    pool.close().await;
    let err = PostgresStore::open(&url).await.err().expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("not a rota database") && text.contains("invoices"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_named_without_its_password() {
    let err = PostgresStore::open("postgres://rota:secret@127.0.0.1:1/rota")
        .await
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("127.0.0.1:1") && !text.contains("secret"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_opening_a_new_database_at_once_all_succeed() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { PostgresStore::open(&url).await.map(drop) })
        })
        .collect();
    for open in opens {
        open.await
            .expect("task")
            .expect("every concurrent open succeeds");
    }
}

/// A database restart (every connection ended) in the middle of a rollout: the same handle
/// goes on without being reopened, its first call after the restart at most fails (and a
/// retry succeeds), the waiter is woken and granted when the holder's window ends, and
/// nothing written before the restart is lost. A shared handle's extra connections were all in
/// use before the restart.
#[tokio::test]
async fn a_database_restart_costs_at_most_one_failed_call_and_loses_nothing() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = PostgresStore::open_shared(&url).await.expect("open");
    restart_in_a_rollout(store, &url, 3).await;
}

/// The same for an agent's handle, whose one connection is both the listener's and the calls'.
#[tokio::test]
async fn an_agents_one_connection_rides_out_a_database_restart() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = PostgresStore::open(&url).await.expect("open");
    restart_in_a_rollout(store, &url, 1).await;
}

async fn restart_in_a_rollout(store: PostgresStore, url: &str, connections: i64) {
    store.set_concurrency(1).await.expect("concurrency");
    let node = |n: &str| NodeName::new(n).expect("node name");
    let ttl = Duration::from_secs(60);
    let (a, b) = (
        store.open_session(&node("a"), ttl).await.expect("a"),
        store.open_session(&node("b"), ttl).await.expect("b"),
    );
    let queue = || {
        Transition::new(NodeState::Idle, NodeState::Queued)
            .window(WindowChange::Queue {
                queued_at: Some(now_millis()),
            })
            .request(Process::Reboot, "/run/reboot-required")
    };
    store.transition(&a, queue()).await.expect("a queues");
    assert!(
        store
            .try_acquire_slot(&a)
            .await
            .expect("a")
            .slot()
            .is_some()
    );
    store
        .transition(
            &a,
            Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
        )
        .await
        .expect("a opens its window");
    store.transition(&b, queue()).await.expect("b queues");
    assert!(
        store
            .try_acquire_slot(&b)
            .await
            .expect("b")
            .slot()
            .is_none()
    );
    // Several connections idle in the handle, as after a busy moment of a fleet's agents: the
    // reads wait for a lock held here, so that none can hand its connection to the next, until
    // every connection the handle may open is in use.
    let admin = sqlx::PgPool::connect(url).await.expect("admin");
    let mut lock = admin.begin().await.expect("begin");
    sqlx::query("LOCK TABLE nodes IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock the nodes");
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let store = store.clone();
        reads.spawn(async move { store.nodes().await.map(|_| ()) });
    }
    let waiting = async {
        loop {
            let blocked: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&admin)
            .await
            .expect("count the waiting reads");
            if blocked >= connections {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the reads wait on the handle's connections");
    lock.commit().await.expect("unlock");
    admin.close().await;
    while let Some(read) = reads.join_next().await {
        read.expect("a read task").expect("read the nodes");
    }
    let mut changes = store.changes();
    changes.borrow_and_update();

    assert!(
        end_connections(url).await >= connections,
        "the listener and the calls'"
    );

    // The first call after the restart may meet a connection the server has ended.
    let finish =
        || Transition::new(NodeState::Draining, NodeState::Idle).window(WindowChange::Finish);
    let finished = match store.transition(&a, finish()).await {
        Ok(record) => record,
        Err(first) => store
            .transition(&a, finish())
            .await
            .unwrap_or_else(|e| panic!("a retry after {first} failed too: {e}")),
    };
    assert_eq!(finished.state, NodeState::Idle);
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("the waiter is woken")
        .expect("the store is alive");
    let granted = store.try_acquire_slot(&b).await.expect("b asks again");
    assert!(granted.slot().is_some(), "{granted:?}");

    let history = store
        .history(&rota_store::HistoryFilter::default())
        .await
        .expect("history");
    let events: Vec<_> = history
        .iter()
        .map(|e| (e.node.to_string(), e.event.as_str()))
        .collect();
    assert_eq!(
        events,
        [("a".to_string(), "started"), ("a".to_string(), "finished")]
    );
    let requests = store.all_requests().await.expect("requests");
    assert_eq!(requests.len(), 2, "{requests:?}");
}

/// A concurrency no fleet can have, written by hand into rota_meta, is refused by the database
/// naming the constraint; before, the grant functions took a 0 as it was, and no node ever took
/// a slot.
#[tokio::test]
async fn a_concurrency_written_by_hand_is_refused_by_the_database() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = PostgresStore::open(&url).await.expect("open");
    store.set_concurrency(2).await.expect("set concurrency");
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    for value in ["0", "1001", "x", "", "-1", "99999"] {
        let err = sqlx::query("UPDATE rota_meta SET value = $1 WHERE key = 'concurrency'")
            .bind(value)
            .execute(&pool)
            .await
            .expect_err(value)
            .to_string();
        assert!(
            err.contains("rota_meta_concurrency_1_to_1000"),
            "{value}: {err}"
        );
    }
    assert_eq!(store.concurrency().await.expect("read"), Some(2));
    sqlx::query("UPDATE rota_meta SET value = '1000' WHERE key = 'concurrency'")
        .execute(&pool)
        .await
        .expect("a concurrency a fleet can have");
    pool.close().await;
}
