//! What an agent's handle costs the API server, counted on the wire.
//!
//! Idle: once its watches have listed, the reads an idle agent makes at every look (its node,
//! requests and backoffs, the procedures, the pause and the concurrency, a heartbeat, the
//! periodic re-read) send no request at all, and it holds three watches; the slot Leases'
//! watch runs only while its node is queued or in its window. A procedure applied without rota
//! reaches it through its watch.
//!
//! Waiting: a node far from the front of the queue renews its session sparsely (a few writes
//! an hour); near the front it renews as usual, and one that died far back is passed over as
//! soon as it comes near, not when its long deadline runs out. A look at the queue that tells
//! a node to wait reads the API server's cache; only one that may grant reads consistently.
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
use rota_store::{
    Acquire, Session, Store, StoreExt, Transition, WAKE_ALL, WindowChange, now_millis,
};
use rota_store_kube::{KubeStore, Procedure, ProcedureBody, RotaNode};

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
async fn an_idle_agent_sends_nothing_but_its_three_watches() {
    let Some((scope, store, sent)) = counted_store("idle").await else {
        return;
    };
    // Another node's procedure, so that the agent's look has one to read.
    let mut spec = ProcedureSpec::new(format!("{}-other", scope.id()), "true\n".to_string());
    spec.nodes = vec![NodeName::new("someone-else").expect("a name")];
    store.submit_procedure(&spec).await.expect("submit");
    let node = NodeName::new("idle").expect("a name");
    let session = store.open_session(&node, TTL).await.expect("open");

    // The first looks ask while the watches list; then the looks are answered from them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        sent.take();
        idle_look(&store, &session).await;
        let look = sent.take();
        if asked(&look).is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "an idle look still asks after a minute: {:?}",
            asked(&look)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..20 {
        idle_look(&store, &session).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let quiet = sent.take();
    assert_eq!(asked(&quiet), Vec::<&String>::new(), "requests while idle");
    assert_eq!(store.watches(), 3, "watches of an idle agent");

    // Queued, it watches the slot Leases too; idle again, it stops.
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
    assert_eq!(store.watches(), 4, "watches of a queued agent");
    // The watch lists the Leases before it watches them; leaving the queue at once could end
    // it between the two, so wait until the watch request went out.
    let mut queued_sent = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !watched(&queued_sent).contains("leases") && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        queued_sent.extend(sent.take());
    }
    assert!(
        watched(&queued_sent).contains("leases"),
        "the queued agent watched the Leases: {queued_sent:?}"
    );
    let canceled = Lifecycle::idle()
        .apply(&Event::Requested { eligible_at: 0 })
        .and_then(|queued| queued.next.apply(&Event::Canceled { granted: false }))
        .expect("a queued node may leave the queue");
    store
        .cancel_request(&session, &Process::Reboot)
        .await
        .expect("cancel");
    store
        .transition(&session, Transition::of(canceled))
        .await
        .expect("leave the queue");
    assert_eq!(store.watches(), 3, "watches of an idle agent again");
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
/// idle agent through the Procedures' watch: it is woken, and its next look lists it.
#[tokio::test]
async fn a_procedure_applied_without_rota_wakes_the_idle_agent() {
    let Some((scope, store, _)) = counted_store("applied").await else {
        return;
    };
    let node = NodeName::new("idle").expect("a name");
    let session = store.open_session(&node, TTL).await.expect("open");
    idle_look(&store, &session).await;
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

/// With one slot, a node with nine or more places ahead of it waits far back: its heartbeats
/// write its RotaNode once (a long, sparse deadline) and then stay in memory, where a node near
/// the front writes at every heartbeat.
#[tokio::test]
async fn a_waiter_far_back_renews_its_session_sparsely() {
    let Some((scope, store, sent)) = counted_store("sparse").await else {
        return;
    };
    store.set_concurrency(1).await.expect("concurrency");
    let waiters = queue_up(&store, "w", now_millis() - 60_000, 12).await;
    for waiter in &waiters {
        assert!(
            matches!(
                store.try_acquire_slot(waiter).await.expect("look"),
                Acquire::Granted(_) | Acquire::Wait { .. }
            ),
            "a look"
        );
    }
    let (front, far) = (&waiters[1], &waiters[11]);
    sent.take();
    for _ in 0..5 {
        store.heartbeat(front, TTL).await.expect("heartbeat");
        store.heartbeat(far, TTL).await.expect("heartbeat");
    }
    let heartbeats = sent.take();
    assert_eq!(writes_of(&store, front, &heartbeats), 5, "near the front");
    assert_eq!(writes_of(&store, far, &heartbeats), 1, "far back");
    scope.cleanup().await.expect("clean up");
}

/// A node whose agent died far back (its sparse deadline twenty minutes away) holds nobody up
/// once it nears the front: the node behind it takes the slot. A live one that comes near
/// renews as usual at its next look, and then keeps its place.
#[tokio::test]
async fn a_waiter_that_died_far_back_holds_nobody_up_near_the_front() {
    let Some((scope, store, _)) = counted_store("died").await else {
        return;
    };
    store.set_concurrency(1).await.expect("concurrency");
    let mut line = queue_up(&store, "a", now_millis() - 60_000, 11).await;
    let behind = line.pop().expect("the last");
    let far = line.pop().expect("the one before");
    assert!(
        matches!(
            store.try_acquire_slot(&far).await.expect("look"),
            Acquire::Wait { .. }
        ),
        "nine ahead"
    );
    store.heartbeat(&far, TTL).await.expect("a sparse renewal");
    for ahead in &line {
        leave_queue(&store, ahead).await;
    }
    // `far`'s agent is dead: it looks no more. The node behind it does.
    assert_eq!(
        store.try_acquire_slot(&behind).await.expect("look"),
        Acquire::Granted(0),
        "the dead sparse waiter at the front holds the node behind it up"
    );
    scope.cleanup().await.expect("clean up");
}

/// The same line with `far` alive: its look near the front renews its session as usual, and
/// the node behind it waits its turn.
#[tokio::test]
async fn a_sparse_waiter_that_comes_near_renews_as_usual_and_keeps_its_place() {
    let Some((scope, store, _)) = counted_store("near").await else {
        return;
    };
    store.set_concurrency(1).await.expect("concurrency");
    let mut line = queue_up(&store, "b", now_millis() - 60_000, 11).await;
    let behind = line.pop().expect("the last");
    let far = line.pop().expect("the one before");
    store.try_acquire_slot(&far).await.expect("look");
    store.heartbeat(&far, TTL).await.expect("a sparse renewal");
    for ahead in &line {
        leave_queue(&store, ahead).await;
    }
    // Its look comes near the front and takes the slot, its session renewed as usual first.
    assert_eq!(
        store.try_acquire_slot(&far).await.expect("look"),
        Acquire::Granted(0)
    );
    let object = Api::<RotaNode>::all(scope.client())
        .get(&store.object_name(&far.node))
        .await
        .expect("the RotaNode");
    let renewed = object.status.and_then(|s| s.session).expect("a session");
    assert!(!renewed.sparse, "{renewed:?}");
    assert!(
        renewed.deadline.0 <= now_millis() + 31_000,
        "the long deadline gave way to the short one: {renewed:?}"
    );
    assert!(
        matches!(
            store.try_acquire_slot(&behind).await.expect("look"),
            Acquire::Wait { .. }
        ),
        "the slot is taken"
    );
    scope.cleanup().await.expect("clean up");
}

/// The lists of RotaNodes among `sent`.
fn node_lists(sent: &[String]) -> Vec<&String> {
    sent.iter()
        .filter(|r| {
            r.starts_with("GET /apis/rota.dev/v1alpha1/rotanodes") && !r.ends_with("?watch")
        })
        .filter(|r| !r.contains("/rotanodes/"))
        .collect()
}

/// A consistent list waits for the API server's cache to catch up with etcd: a waiter's look
/// that ends in "wait" reads the cache as it is (an agent's own handle) or the handle's watch
/// of every RotaNode (a handle with several agents), and only a look that may grant the slot
/// reads the queue again, consistently, so that the grant follows the queue as written.
#[tokio::test]
async fn a_look_that_ends_in_wait_reads_the_cache_and_a_grant_reads_consistently() {
    let Some((scope, store, sent)) = counted_store("looks").await else {
        return;
    };
    let env = common::env().expect("the test environment");
    store.set_concurrency(1).await.expect("concurrency");
    let first = now_millis() - 60_000;
    let waiters = queue_up(&store, "l", first, 3).await;
    let (own, own_sent) = counted_handle(env, &scope).await;
    let alone = queue_up(&own, "m", first + 10, 1).await;

    own_sent.take();
    assert!(
        matches!(
            own.try_acquire_slot(&alone[0]).await.expect("look"),
            Acquire::Wait { .. }
        ),
        "three ahead"
    );
    let waiting = own_sent.take();
    let lists = node_lists(&waiting);
    assert!(!lists.is_empty(), "the look lists the queue: {waiting:?}");
    assert!(
        lists.iter().all(|l| l.ends_with(" (cache)")),
        "an agent's own look that ends in wait: {lists:?}"
    );

    // The handle of three agents looks at its watch once it has listed the RotaNodes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        // Past the last answer's five seconds, so that the call looks again.
        tokio::time::sleep(Duration::from_secs(6)).await;
        sent.take();
        let answer = store.try_acquire_slot(&waiters[2]).await.expect("look");
        assert!(matches!(answer, Acquire::Wait { .. }), "two ahead");
        if node_lists(&sent.take()).is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the look still lists after a minute"
        );
    }
    assert!(
        matches!(
            store.try_acquire_slot(&waiters[0]).await.expect("look"),
            Acquire::Granted(_)
        ),
        "the front takes the slot"
    );
    let granted = sent.take();
    let lists = node_lists(&granted);
    assert!(
        lists.last().is_some_and(|l| !l.ends_with(" (cache)")),
        "a grant's last list is consistent: {lists:?}"
    );
    scope.cleanup().await.expect("clean up");
}

/// A waiter far back keeps its answer "wait" for minutes while no change comes, where
/// one near the front looks again after five seconds: the far one's look lists every node
/// ahead of it, and a thousand of them every five seconds overwhelmed the API server. Each
/// agent has a handle of its own, as on a fleet.
#[tokio::test]
async fn a_far_back_waiters_answer_stands_longer_than_a_near_ones() {
    let Some((scope, store, _)) = counted_store("stands").await else {
        return;
    };
    let env = common::env().expect("the test environment");
    store.set_concurrency(1).await.expect("concurrency");
    let first = now_millis() - 60_000;
    queue_up(&store, "a", first, 2).await;
    let (near_store, near_sent) = counted_handle(env, &scope).await;
    let near = queue_up(&near_store, "n", first + 2, 1).await;
    queue_up(&store, "b", first + 3, 10).await;
    let (far_store, far_sent) = counted_handle(env, &scope).await;
    let far = queue_up(&far_store, "f", first + 20, 1).await;
    for (handle, waiter) in [(&near_store, &near[0]), (&far_store, &far[0])] {
        assert!(
            matches!(
                handle.try_acquire_slot(waiter).await.expect("look"),
                Acquire::Wait { .. }
            ),
            "a waiter"
        );
    }
    // Past the near answer's five seconds, short of the far one's 150 at least.
    tokio::time::sleep(Duration::from_secs(6)).await;
    far_sent.take();
    far_store.try_acquire_slot(&far[0]).await.expect("look");
    assert_eq!(
        node_lists(&far_sent.take()),
        Vec::<&String>::new(),
        "the far waiter looked again"
    );
    near_sent.take();
    near_store.try_acquire_slot(&near[0]).await.expect("look");
    assert!(
        !node_lists(&near_sent.take()).is_empty(),
        "the near waiter looks again"
    );
    scope.cleanup().await.expect("clean up");
}
