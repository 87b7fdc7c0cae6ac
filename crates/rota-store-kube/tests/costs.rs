//! What an agent's handle costs the API server, counted on the wire.
//!
//! Idle: once its watches have listed, the reads an idle agent makes at every look (its node,
//! requests and backoffs, the procedures, the pause and the concurrency, a heartbeat, the
//! periodic re-read) send no request at all, and it holds two watches (the ConfigMaps, its own
//! RotaNode), queued or not. A procedure applied without rota reaches it through the
//! fingerprint the scheduler publishes in `rota-config`.
//!
//! Waiting: a queued node without a grant writes nothing, heartbeats included, and its looks
//! ask nothing; the scheduler's grant reaches it through its RotaNode's watch, and the write
//! that opens its window takes the grant up.
//!
//! Status: `rota status` reads the whole fleet in two lists, whatever its size.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use rota_core::{Event, Lifecycle, NodeName, NodeState, ProcedureSpec, Process};
use rota_kube_api::{Procedure, ProcedureBody};
use rota_store::{
    Acquire, Session, Store, StoreExt, Transition, WAKE_ALL, WindowChange, now_millis,
};
use rota_store_kube::KubeStore;

const TTL: Duration = Duration::from_secs(30);

/// The requests a client sent, each as `METHOD path` with `?watch` for a watch, and
/// ` (cache)` for a list the API server may answer from its cache as it is (not consistent).
#[derive(Clone, Default)]
struct Sent(Arc<Mutex<Vec<String>>>);

impl Sent {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("the log"))
    }

    fn log(&self, request: &http::Request<kube::client::Body>) {
        let has = |param: &str| {
            request
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == param))
        };
        let line = format!(
            "{} {}{}{}",
            request.method(),
            request.uri().path(),
            if has("watch=true") { "?watch" } else { "" },
            if has("resourceVersionMatch=NotOlderThan") {
                " (cache)"
            } else {
                ""
            }
        );
        self.0.lock().expect("the log").push(line);
    }
}

/// A store on a client whose every request is logged, in a scope of its own.
async fn counted_store(name: &str) -> Option<(rota_e2e::testenv::Scope, KubeStore, Sent)> {
    let env = common::env()?;
    let scope = env.scope(name).await.expect("a test scope");
    common::install_crd(scope.client()).await;
    let (store, sent) = counted_handle(env, &scope).await;
    Some((scope, store, sent))
}

/// Another handle on `scope`'s store, as another agent's process has, its requests logged.
async fn counted_handle(
    env: &rota_e2e::testenv::TestEnv,
    scope: &rota_e2e::testenv::Scope,
) -> (KubeStore, Sent) {
    let sent = Sent::default();
    let log = sent.clone();
    let layer =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            log.log(&request);
            request
        });
    let config = env.config().await.expect("the test kubeconfig");
    let client = kube::client::ClientBuilder::try_from(config)
        .expect("a client")
        .with_layer(&layer)
        .build();
    let store = KubeStore::connect(client, common::store_config(scope))
        .await
        .expect("connect the store");
    (store, sent)
}

/// What an idle agent asks its store at each look, its periodic re-read and heartbeat included.
async fn idle_look(store: &KubeStore, session: &Session) {
    let node = &session.node;
    let record = store.node(node).await.expect("node").expect("a record");
    assert_eq!(record.state, NodeState::Idle);
    store.open_requests(node).await.expect("requests");
    store.backoffs(node).await.expect("backoffs");
    store.procedures().await.expect("procedures");
    store.paused().await.expect("pause");
    store.concurrency().await.expect("concurrency");
    store.heartbeat(session, TTL).await.expect("heartbeat");
}

/// Looks until one asks nothing, and what was sent until then: the first looks ask while the
/// watches list and until the scheduler published the procedures' fingerprint; then the looks
/// are answered from the watches.
async fn quiet_looks(store: &KubeStore, session: &Session, sent: &Sent) -> Vec<String> {
    let mut everything = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        everything.extend(sent.take());
        idle_look(store, session).await;
        let look = sent.take();
        everything.extend(look.iter().cloned());
        if asked(&look).is_empty() {
            return everything;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "an idle look still asks after a minute: {:?}",
            asked(&look)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The requests that are not watches.
fn asked(sent: &[String]) -> Vec<&String> {
    sent.iter().filter(|r| !r.ends_with("?watch")).collect()
}

/// The resources watched, by the last part of their path.
fn watched(sent: &[String]) -> BTreeSet<String> {
    sent.iter()
        .filter(|r| r.ends_with("?watch"))
        .filter_map(|r| r.trim_end_matches("?watch").rsplit('/').next())
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn an_idle_agent_sends_nothing_but_its_two_watches() {
    let Some((scope, store, sent)) = counted_store("idle").await else {
        return;
    };
    let _scheduler = common::scheduler(&scope, &store);
    // Another node's procedure, so that the agent's look has one to read.
    let mut spec = ProcedureSpec::new(format!("{}-other", scope.id()), "true\n".to_string());
    spec.nodes = vec![NodeName::new("someone-else").expect("a name")];
    store.submit_procedure(&spec).await.expect("submit");
    let node = NodeName::new("idle").expect("a name");
    let session = store.open_session(&node, TTL).await.expect("open");

    let mut everything = quiet_looks(&store, &session, &sent).await;
    for _ in 0..20 {
        idle_look(&store, &session).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let quiet = sent.take();
    assert_eq!(asked(&quiet), Vec::<&String>::new(), "requests while idle");
    assert_eq!(store.watches(), 2, "watches of an idle agent");
    everything.extend(quiet);
    assert_eq!(
        watched(&everything),
        BTreeSet::from(["configmaps".into(), "rotanodes".into()]),
        "what an idle agent watches: {everything:?}"
    );

    // Queued, it watches nothing more: the scheduler, not the agent, follows the slot Leases.
    store
        .add_request(&session, &Process::Reboot, "test")
        .await
        .expect("request");
    store
        .transition(
            &session,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis()),
            }),
        )
        .await
        .expect("enqueue");
    assert_eq!(
        store.try_acquire_slot(&session).await.expect("look"),
        Acquire::Wait { changes: 1 }
    );
    assert_eq!(store.watches(), 2, "watches of a queued agent");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let queued_sent = sent.take();
    assert!(
        !watched(&queued_sent).contains("leases"),
        "the queued agent watched the Leases: {queued_sent:?}"
    );
    leave_queue(&store, &session).await;
    assert_eq!(store.watches(), 2, "watches of an idle agent again");
    scope.cleanup().await.expect("clean up");
}

/// The overview `rota status` reads at every refresh is two lists (the RotaNodes and the slot
/// Leases), for two nodes as for eight: no request per node.
#[tokio::test]
async fn the_fleet_overview_costs_two_lists_whatever_its_size() {
    let Some((scope, store, _)) = counted_store("overview").await else {
        return;
    };
    let env = common::env().expect("the test environment");
    let (operator, sent) = counted_handle(env, &scope).await;
    let mut costs = Vec::new();
    for count in [2, 8] {
        while operator.overview().await.expect("overview").len() < count {
            let name = format!("n{}", operator.nodes().await.expect("nodes").len());
            let node = NodeName::new(name).expect("a name");
            let session = store.open_session(&node, TTL).await.expect("open");
            store
                .add_request(&session, &Process::Reboot, "test")
                .await
                .expect("request");
        }
        sent.take();
        let overview = operator.overview().await.expect("overview");
        assert_eq!(overview.len(), count);
        assert!(overview.iter().all(|o| o.open_requests.len() == 1));
        costs.push(sent.take());
    }
    for cost in &costs {
        let mut cost = cost.clone();
        cost.sort();
        assert_eq!(
            cost,
            vec![
                format!(
                    "GET /apis/coordination.k8s.io/v1/namespaces/{}/leases",
                    scope.namespace()
                ),
                "GET /apis/rota.dev/v1alpha1/rotanodes".to_string(),
            ],
            "the requests of one overview"
        );
    }
    scope.cleanup().await.expect("clean up");
}

/// A Procedure created without rota (as by `kubectl apply`, which writes no wake) reaches an
/// idle agent through the fingerprint the scheduler publishes in `rota-config`: it is woken,
/// and its next look lists it.
#[tokio::test]
async fn a_procedure_applied_without_rota_wakes_the_idle_agent() {
    let Some((scope, store, sent)) = counted_store("applied").await else {
        return;
    };
    let _scheduler = common::scheduler(&scope, &store);
    let node = NodeName::new("idle").expect("a name");
    let session = store.open_session(&node, TTL).await.expect("open");
    quiet_looks(&store, &session, &sent).await;
    let mut changes = store.changes();
    let seen = *changes.borrow_and_update();

    let name = format!("{}-applied", scope.id());
    let mut spec = ProcedureSpec::new(name.clone(), "true\n".to_string());
    spec.nodes = vec![node.clone()];
    let object = Procedure {
        metadata: ObjectMeta {
            name: Some(format!("{}-{name}", scope.id())),
            ..ObjectMeta::default()
        },
        spec: ProcedureBody::of(&spec),
        status: None,
    };
    let procedures: Api<Procedure> = Api::all(scope.client());
    procedures
        .create(&PostParams::default(), &object)
        .await
        .expect("apply the procedure");
    tokio::time::timeout(
        Duration::from_secs(30),
        changes.wait_for(|n| *n >= seen.saturating_add(WAKE_ALL)),
    )
    .await
    .expect("the new procedure wakes the idle agent")
    .expect("the store is alive");
    let names: Vec<String> = store
        .procedures()
        .await
        .expect("procedures")
        .into_iter()
        .map(|p| p.spec.name)
        .collect();
    assert!(names.contains(&name), "{names:?}");
    procedures
        .delete(&format!("{}-{name}", scope.id()), &Default::default())
        .await
        .expect("delete the procedure");
    scope.cleanup().await.expect("clean up");
}

/// Queues `count` sessions of `store` one millisecond apart from `first`, named `<prefix>-<i>`.
async fn queue_up(store: &KubeStore, prefix: &str, first: i64, count: usize) -> Vec<Session> {
    let mut sessions = Vec::new();
    for i in 0..count {
        let node = NodeName::new(format!("{prefix}-{i:02}")).expect("a name");
        let session = store.open_session(&node, TTL).await.expect("open");
        store
            .add_request(&session, &Process::Reboot, "test")
            .await
            .expect("request");
        let at = first + i64::try_from(i).expect("a few");
        store
            .transition(
                &session,
                Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                    queued_at: Some(at),
                }),
            )
            .await
            .expect("enqueue");
        sessions.push(session);
    }
    sessions
}

/// Takes `session`'s node out of the queue, as a canceled request does.
async fn leave_queue(store: &KubeStore, session: &Session) {
    store
        .cancel_request(session, &Process::Reboot)
        .await
        .expect("cancel");
    let canceled = Lifecycle::idle()
        .apply(&Event::Requested { eligible_at: 0 })
        .and_then(|queued| queued.next.apply(&Event::Canceled { granted: false }))
        .expect("a queued node may leave the queue");
    store
        .transition(session, Transition::of(canceled))
        .await
        .expect("leave the queue");
}

/// The writes of `session`'s RotaNode among `sent`.
fn writes_of(store: &KubeStore, session: &Session, sent: &[String]) -> usize {
    let path = format!(
        "PUT /apis/rota.dev/v1alpha1/rotanodes/{}",
        store.object_name(&session.node)
    );
    sent.iter().filter(|r| **r == path).count()
}

/// The requests among `sent` that write (anything but a read or a watch).
fn writes(sent: &[String]) -> Vec<&String> {
    sent.iter().filter(|r| !r.starts_with("GET ")).collect()
}

/// With one slot, the nodes queued behind the one in its window write nothing while they wait,
/// however many heartbeats and looks they make, and their looks ask nothing; once the window
/// ends, the scheduler's grant reaches the next one through its RotaNode's watch, and it takes
/// the grant up in the write that opens its window (one write of its RotaNode in all), while
/// the one behind it still writes nothing.
#[tokio::test]
async fn a_waiting_node_writes_nothing_and_takes_its_grant_up_once_written() {
    let Some((scope, store, sent)) = counted_store("waiting").await else {
        return;
    };
    store.set_concurrency(1).await.expect("concurrency");
    let line = queue_up(&store, "w", now_millis() - 60_000, 3).await;
    assert_eq!(common::take_turn(&scope, &store, &line[0]).await, 0);
    let waiters = &line[1..];

    sent.take();
    for _ in 0..10 {
        for waiter in waiters {
            assert_eq!(
                store.try_acquire_slot(waiter).await.expect("look"),
                Acquire::Wait { changes: 1 }
            );
            store.heartbeat(waiter, TTL).await.expect("heartbeat");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waiting = sent.take();
    assert_eq!(
        writes(&waiting),
        Vec::<&String>::new(),
        "writes while waiting"
    );
    // Nodes that have waited longer than a failover takes look for a scheduler: one read of
    // the leader Lease per handle every 15 s, and nothing else.
    let (leader, other): (Vec<&String>, Vec<&String>) = asked(&waiting)
        .into_iter()
        .partition(|r| r.contains("leases/rota-scheduler"));
    assert_eq!(other, Vec::<&String>::new(), "requests while waiting");
    assert!(leader.len() <= 1, "{leader:?}");

    let mut changes = store.changes();
    let seen = *changes.borrow_and_update();
    common::finish_window(&store, &line[0]).await;
    common::round(&scope).await;
    tokio::time::timeout(Duration::from_secs(30), changes.wait_for(|n| *n > seen))
        .await
        .expect("the grant reaches the waiter through its watch")
        .expect("the store is alive");
    sent.take();
    rota_e2e::turn::granted(&store, &waiters[0], Duration::from_secs(10)).await;
    let opened = store
        .fenced_transition(
            &waiters[0],
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(Some(Process::Reboot))
                .window(WindowChange::Open),
            TTL,
        )
        .await
        .expect("the window opens on the grant");
    assert_eq!((opened.state, opened.slot), (NodeState::Draining, Some(0)));
    assert_eq!(
        store.try_acquire_slot(&waiters[1]).await.expect("look"),
        Acquire::Wait { changes: 1 }
    );
    store.heartbeat(&waiters[1], TTL).await.expect("heartbeat");
    let taken = sent.take();
    assert_eq!(
        writes_of(&store, &waiters[0], &taken),
        1,
        "the take-up rides on the window's opening: {taken:?}"
    );
    assert_eq!(
        writes_of(&store, &waiters[1], &taken),
        0,
        "still waiting: {taken:?}"
    );
    scope.cleanup().await.expect("clean up");
}
