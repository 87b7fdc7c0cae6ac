//! The Kubernetes store's own behaviour on the real control plane of `testenv/`, with the
//! scheduler's rounds (rota-scheduler's own code): what the conformance suite cannot see (grants
//! written by hand, withdrawals, ended windows as RotaWindows, the watches across processes, the
//! CRD's validation, RBAC errors, Events, idle writes, nonsense written by hand).

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use rota_e2e::fleet::request_reboot_by_hand;
use rota_kube_api::crd::{GrantSpec, Timestamp};
use rota_kube_api::{RotaNode, RotaWindow};
use rota_store::{
    Acquire, HistoryFilter, Store, StoreExt, Transition, WAKE_ALL, WindowChange, now_millis,
};
use rota_store_kube::{KubeStore, KubeStoreConfig};

const TTL: Duration = Duration::from_secs(60);

fn name(n: &str) -> NodeName {
    NodeName::new(n).expect("valid node name")
}

/// Waits until the change counter has jumped by [`WAKE_ALL`] since `seen`: the agent's handle
/// was woken by an edit of its RotaNode.
async fn woken_by_the_edit(changes: &mut tokio::sync::watch::Receiver<u64>, seen: u64) {
    tokio::time::timeout(
        Duration::from_secs(30),
        changes.wait_for(|n| *n >= seen.saturating_add(WAKE_ALL)),
    )
    .await
    .expect("the edit wakes the agent")
    .expect("the store is alive");
}

async fn enqueue(store: &KubeStore, s: &rota_store::Session) {
    store
        .add_request(s, &Process::Reboot, "test")
        .await
        .expect("request");
    rota_e2e::turn::queue(store, s).await;
}

/// Polls `check` every 200 ms until it is true; fails after `timeout`.
async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let give_up = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(tokio::time::Instant::now() < give_up, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An operator's `rota pause`, `rota resume` and new concurrency run in a process of their own:
/// the agents hear of them through their watch of `rota-config` at once, not at their next
/// periodic re-read, and a waiter that a higher concurrency lets go takes a slot.
#[tokio::test]
async fn another_processs_pause_resume_and_concurrency_wake_the_agents() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "settings").await;
    let operator = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("second handle");
    store.set_concurrency(1).await.expect("concurrency");
    let holder = store
        .open_session(&name("holder"), TTL)
        .await
        .expect("open");
    enqueue(&store, &holder).await;
    assert_eq!(common::take_turn(&scope, &store, &holder).await, 0);
    let waiter = store
        .open_session(&name("waiter"), TTL)
        .await
        .expect("open");
    enqueue(&store, &waiter).await;
    common::round(&scope).await;
    let mut changes = store.changes();
    let Acquire::Wait { changes: wait } = store.try_acquire_slot(&waiter).await.expect("wait")
    else {
        panic!("the one slot is taken");
    };
    let woken = |seen: u64| move |n: &u64| *n >= seen.saturating_add(wait);
    let within = Duration::from_secs(10);

    let seen = *changes.borrow_and_update();
    operator.pause("change freeze").await.expect("pause");
    tokio::time::timeout(within, changes.wait_for(woken(seen)))
        .await
        .expect("a pause elsewhere wakes the agents")
        .expect("the store is alive");
    let pause = store.paused().await.expect("read the pause");
    assert_eq!(pause.map(|p| p.reason).as_deref(), Some("change freeze"));

    // A resume is two writes (the new rollout, then the pause lifted), and each wakes the
    // agents: as an agent does, look after each wake until the pause is gone.
    let mut seen = *changes.borrow_and_update();
    operator.resume().await.expect("resume");
    loop {
        tokio::time::timeout(within, changes.wait_for(woken(seen)))
            .await
            .expect("a resume elsewhere wakes the agents until they see it")
            .expect("the store is alive");
        seen = *changes.borrow_and_update();
        if store.paused().await.expect("read the pause").is_none() {
            break;
        }
    }

    let seen = *changes.borrow_and_update();
    operator.set_concurrency(2).await.expect("concurrency");
    tokio::time::timeout(within, changes.wait_for(woken(seen)))
        .await
        .expect("a new concurrency elsewhere wakes the waiter")
        .expect("the store is alive");
    assert_eq!(store.concurrency().await.expect("read"), Some(2));
    assert_eq!(
        common::take_turn(&scope, &store, &waiter).await,
        1,
        "the scheduler grants the new slot and the waiter takes it up"
    );
}

/// An operator's command from another process that an idle agent must act on (a request for
/// its node, a new procedure) wakes that agent's process through `rota-config`, which its
/// watch delivers: by a jump of the change counter that an idle agent waits for. A request
/// for another node wakes nobody.
#[tokio::test]
async fn an_operators_request_or_procedure_wakes_the_idle_agent_it_concerns() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "wake").await;
    let operator = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("second handle");
    let idle = store.open_session(&name("idle"), TTL).await.expect("open");
    let other = operator
        .open_session(&name("other"), TTL)
        .await
        .expect("open");
    let mut changes = store.changes();
    let within = Duration::from_secs(10);
    let jumped = |seen: u64| move |n: &u64| *n >= seen.saturating_add(WAKE_ALL);

    let seen = *changes.borrow_and_update();
    operator
        .request(&other.node, &Process::Reboot, "operator")
        .await
        .expect("request for the other node");
    operator
        .request(&idle.node, &Process::Reboot, "operator")
        .await
        .expect("request");
    tokio::time::timeout(within, changes.wait_for(jumped(seen)))
        .await
        .expect("a request elsewhere wakes the node's agent")
        .expect("the store is alive");
    // The node's request wakes it twice at most: by the operator's wake and by its RotaNode's
    // watch, whichever comes first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        *changes.borrow_and_update() <= seen.saturating_add(2 * WAKE_ALL),
        "the other node's request woke this process too"
    );

    let seen = *changes.borrow_and_update();
    let mut spec =
        rota_core::ProcedureSpec::new(format!("{}-wake", scope.id()), "true\n".to_string());
    spec.nodes = vec![idle.node.clone()];
    let (_, created) = operator.submit_procedure(&spec).await.expect("submit");
    assert!(created);
    tokio::time::timeout(within, changes.wait_for(jumped(seen)))
        .await
        .expect("a new procedure elsewhere wakes every agent")
        .expect("the store is alive");
    let names: Vec<String> = store
        .procedures()
        .await
        .expect("procedures")
        .into_iter()
        .map(|p| p.spec.name)
        .collect();
    assert!(names.contains(&spec.name), "{names:?}");
    let api: Api<rota_kube_api::Procedure> = Api::all(scope.client());
    let prefix = &store.config().name_prefix;
    api.delete(&format!("{prefix}{}", spec.name), &DeleteParams::default())
        .await
        .expect("delete the procedure");
}

/// An agent's handle answers its reads of its own node from its last write for a moment; an
/// operator's unlock from another process in that moment must still stop the agent's next
/// write, and be what the agent reads after it.
#[tokio::test]
async fn an_unlock_elsewhere_stops_the_agents_next_write_and_then_shows() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "unlocked").await;
    let operator = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("second handle");
    store.set_concurrency(1).await.expect("concurrency");
    let node = name("agent");
    let s = store.open_session(&node, TTL).await.expect("open");
    enqueue(&store, &s).await;
    assert_eq!(common::take_turn(&scope, &store, &s).await, 0);
    common::open_window(&store, &s).await;

    operator.unlock(&node, "test").await.expect("unlock");
    let next = store
        .transition(
            &s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await;
    assert!(
        matches!(
            next,
            Err(rota_store::Error::Refused(
                rota_core::RecordError::Conflict { .. }
            ))
        ),
        "the transition after the unlock is refused: {next:?}"
    );
    let record = store.node(&node).await.expect("read").expect("the node");
    assert_eq!((record.state, record.slot), (NodeState::Idle, None));
    assert!(
        matches!(
            store.fence(&s, TTL).await,
            Err(rota_store::Error::Fenced { .. })
        ),
        "no slot, no fence"
    );
}

/// A fleet's first start: every new node opens its session at once, each making its own
/// RotaNode, with nothing shared to contend for (ids are per node: no tag claimed, no counter in
/// `rota-config`, which ran most agents of a 1,000-node first start out of attempts).
#[tokio::test]
async fn new_nodes_open_their_sessions_at_once_with_nothing_shared() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "first-start").await;
    let mut handles = vec![store.clone()];
    for _ in 0..3 {
        let handle = KubeStore::connect(scope.client(), store.config().clone())
            .await
            .expect("another handle");
        handles.push(handle);
    }
    let nodes: Vec<NodeName> = (0..60).map(|i| name(&format!("t{i:02}"))).collect();
    let opened = futures::future::join_all(nodes.iter().enumerate().map(|(i, node)| {
        let handle = handles[i % handles.len()].clone();
        async move { handle.open_session(node, TTL).await }
    }))
    .await;
    for (node, session) in nodes.iter().zip(&opened) {
        let session = session.as_ref().expect("every first start opens a session");
        let object = common::rota_node(&scope, &store, node).await;
        let recorded = object.status.and_then(|s| s.session).expect("a session");
        assert_eq!(recorded.id, session.id, "{node}");
    }
    let config = scope
        .api::<ConfigMap>()
        .get_opt("rota-config")
        .await
        .expect("read rota-config");
    let counter = config.and_then(|c| c.data?.get("nextNodeTag").cloned());
    assert_eq!(counter, None, "no shared counter was written");
    let leases: Vec<String> = scope
        .api::<Lease>()
        .list(&ListParams::default())
        .await
        .expect("list the Leases")
        .items
        .into_iter()
        .filter_map(|l| l.metadata.name)
        .collect();
    assert_eq!(
        leases,
        Vec::<String>::new(),
        "a session opened claims no Lease"
    );
}

/// An agent's handle answers the agent's reads of its own node from what it last wrote or read
/// there, without a request, and a change nobody announced (a `kubectl edit` of the RotaNode,
/// with no wake) reaches it through the watch of its own RotaNode: the agent is woken, and its
/// next read sees the edit without a re-read (`refresh` asks nothing while the watch is synced).
#[tokio::test]
async fn an_unannounced_edit_reaches_the_agent_through_its_nodes_watch() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "edited").await;
    let node = name("edited");
    let _session = store.open_session(&node, TTL).await.expect("open");
    assert!(store.open_requests(&node).await.expect("read").is_empty());
    let mut changes = store.changes();
    let seen = *changes.borrow_and_update();

    request_reboot_by_hand(scope.client(), &store.object_name(&node))
        .await
        .expect("edit the RotaNode by hand");

    woken_by_the_edit(&mut changes, seen).await;
    let open: Vec<Process> = store
        .open_requests(&node)
        .await
        .expect("read")
        .into_iter()
        .map(|r| r.process)
        .collect();
    assert_eq!(
        open,
        vec![Process::Reboot],
        "the agent's next read has the edit"
    );
}

/// The agent's handle keeps the Lease it last wrote, so that its calls need not list the Leases
/// again; a slot taken away by another process must still stop its next fence, even when the
/// node's RotaNode did not change.
#[tokio::test]
async fn a_slot_lost_elsewhere_fences_the_holder_that_remembers_it() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "lost").await;
    store.set_concurrency(1).await.expect("concurrency");
    let node = name("holder");
    let s = store.open_session(&node, TTL).await.expect("open");
    enqueue(&store, &s).await;
    assert_eq!(common::take_turn(&scope, &store, &s).await, 0);
    common::open_window(&store, &s).await;
    assert_eq!(store.fence(&s, TTL).await.expect("fence"), 0);

    // Taken behind the agent's back, with its RotaNode untouched: only the Lease can tell.
    let leases = scope.api::<Lease>();
    let mut lease = leases.get("rota-slot-0").await.expect("the slot Lease");
    lease
        .spec
        .get_or_insert_with(Default::default)
        .holder_identity = Some("other".into());
    leases
        .replace("rota-slot-0", &PostParams::default(), &lease)
        .await
        .expect("another node takes the slot");

    let refused = store.fence(&s, TTL).await;
    assert!(
        matches!(refused, Err(rota_store::Error::Fenced { .. })),
        "the fence refuses a slot lost elsewhere: {refused:?}"
    );
    let after = leases.get("rota-slot-0").await.expect("the slot Lease");
    assert_eq!(
        after.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("other"),
        "the refused fence left the new holder's Lease alone"
    );
}

/// An operator moves a queued node back in the queue behind the agent's back (an edit by hand
/// of its `status.queuedAt`): its agent hears of the edit through its RotaNode's watch, and the
/// scheduler's next round grants the node now ahead of it, not the moved one.
#[tokio::test]
async fn a_node_moved_back_in_the_queue_waits_for_the_nodes_now_ahead_of_it() {
    let Some(env) = common::env() else { return };
    let (scope, agent) = common::scoped_store(env, "moved").await;
    let others = KubeStore::connect(scope.client(), agent.config().clone())
        .await
        .expect("second handle");
    agent.set_concurrency(1).await.expect("concurrency");
    let now = now_millis();
    let queue = |store: &KubeStore, s: &rota_store::Session, at: i64| {
        let (store, s) = (store.clone(), s.clone());
        async move {
            store
                .add_request(&s, &Process::Reboot, "test")
                .await
                .expect("request");
            store
                .transition(
                    &s,
                    Transition::new(NodeState::Idle, NodeState::Queued).window(
                        WindowChange::Queue {
                            queued_at: Some(at),
                        },
                    ),
                )
                .await
                .expect("enqueue")
        }
    };
    let moved = name("moved");
    let m = agent.open_session(&moved, TTL).await.expect("open");
    queue(&agent, &m, now - 5000).await;
    let ahead = name("ahead");
    let a = others.open_session(&ahead, TTL).await.expect("open");
    queue(&others, &a, now - 3000).await;

    let rota_nodes: Api<RotaNode> = Api::all(scope.client());
    let object_name = agent.object_name(&moved);
    let mut object = rota_nodes.get(&object_name).await.expect("the RotaNode");
    let status = object.status.as_mut().expect("a status");
    status.queued_at = Some(Timestamp(now - 1000));
    let mut changes = agent.changes();
    let seen = *changes.borrow_and_update();
    rota_nodes
        .replace(&object_name, &PostParams::default(), &object)
        .await
        .expect("an operator moves the node back");
    // An edit by hand announces nothing: the watch of the agent's own RotaNode finds it.
    woken_by_the_edit(&mut changes, seen).await;

    assert_eq!(
        common::take_turn(&scope, &others, &a).await,
        0,
        "the node now ahead is granted the slot"
    );
    assert_eq!(
        agent.try_acquire_slot(&m).await.expect("look"),
        Acquire::Wait { changes: 1 },
        "the node moved back waits"
    );
    let object = common::rota_node(&scope, &agent, &moved).await;
    assert_eq!(object.spec.grant, None, "the node moved back has no grant");
}

#[tokio::test]
async fn the_scheduler_takes_back_a_slot_whose_holder_has_no_rota_node() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "orphan").await;
    store.set_concurrency(1).await.expect("concurrency");
    // Held for an hour: a Lease taken a moment ago may be a grant whose RotaNode write the
    // read does not show yet, and waits the take-up time.
    let lease = rota_kube_api::slots::taken(0, None, "gone", None, now_millis() - 3_600_000);
    scope
        .api::<Lease>()
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the orphaned Lease");
    let waiter_store = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("the waiter's handle");
    let s = waiter_store
        .open_session(&name("next"), TTL)
        .await
        .expect("open");
    enqueue(&waiter_store, &s).await;
    assert_eq!(
        waiter_store.try_acquire_slot(&s).await.expect("look"),
        Acquire::Wait { changes: 1 }
    );
    let mut changes = waiter_store.changes();
    let seen = *changes.borrow_and_update();

    common::round(&scope).await;
    let lease = scope
        .api::<Lease>()
        .get("rota-slot-0")
        .await
        .expect("the slot Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("next"),
        "the orphaned slot went to the queued node"
    );
    tokio::time::timeout(Duration::from_secs(30), changes.wait_for(|n| *n > seen))
        .await
        .expect("the grant reaches the waiter through its watch")
        .expect("the store is alive");
    assert_eq!(
        waiter_store.try_acquire_slot(&s).await.expect("acquire"),
        Acquire::Granted(0),
        "the waiter takes the grant up"
    );
}

#[tokio::test]
async fn the_crd_refuses_an_invalid_state_naming_the_field() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "crd").await;
    store.open_session(&name("a"), TTL).await.expect("open");
    let api: Api<DynamicObject> = Api::all_with(
        scope.client(),
        &kube::api::ApiResource::erase::<RotaNode>(&()),
    );
    let object = format!("{}-a", scope.id());
    let mut value = api.get(&object).await.expect("read the RotaNode");
    value.data["status"]["state"] = "sleeping".into();
    let err = api
        .replace(&object, &PostParams::default(), &value)
        .await
        .expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("status.state") && text.contains("sleeping"),
        "{text}"
    );
}

#[tokio::test]
async fn a_missing_permission_is_named_by_verb_and_resource() {
    let Some(env) = common::env() else { return };
    let scope = env.scope("rbac").await.expect("scope");
    common::install_crd(scope.client()).await;
    let mut config = env.config().await.expect("config");
    config.auth_info.impersonate = Some("rota-test-nobody".into());
    let nobody = Client::try_from(config).expect("client");
    let err = KubeStore::connect(
        nobody,
        KubeStoreConfig {
            namespace: scope.namespace().into(),
            ..KubeStoreConfig::default()
        },
    )
    .await
    .err()
    .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("forbidden to list rotanodes.rota.dev (all)")
            && text.contains("needs the RBAC verb `list` on `rotanodes.rota.dev`"),
        "{text}"
    );
}

#[tokio::test]
async fn an_idle_agent_sends_no_writes() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "idle").await;
    let s = store.open_session(&name("a"), TTL).await.expect("open");
    let api: Api<RotaNode> = Api::all(scope.client());
    let object = format!("{}-a", scope.id());
    let before = api
        .get(&object)
        .await
        .expect("read")
        .metadata
        .resource_version;
    for _ in 0..20 {
        store.heartbeat(&s, TTL).await.expect("heartbeat");
    }
    let after = api
        .get(&object)
        .await
        .expect("read")
        .metadata
        .resource_version;
    assert_eq!(before, after, "idle heartbeats stay in memory");
    // The renewed deadline is the one the next write carries.
    store
        .add_request(&s, &Process::Reboot, "test")
        .await
        .expect("a write of the live session");
}

/// A window's transitions are Events on the Node; a node's queueing is none (it disrupts
/// nothing, and a procedure for the whole fleet queues every node at once).
#[tokio::test]
async fn a_window_is_recorded_as_events_on_the_node_and_a_queueing_is_not() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "events").await;
    let node = scope.node_name("ev");
    let s = store.open_session(&name(&node), TTL).await.expect("open");
    enqueue(&store, &s).await;
    assert_eq!(common::take_turn(&scope, &store, &s).await, 0);
    common::open_window(&store, &s).await;
    let events: Api<Event> = Api::namespaced(scope.client(), "default");
    let selector = format!("regarding.name={node}");
    let reasons = || async {
        events
            .list(&ListParams::default().fields(&selector))
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect::<Vec<_>>()
    };
    eventually(
        "a SlotAcquired event on the node",
        Duration::from_secs(30),
        || async { reasons().await.iter().any(|r| r == "SlotAcquired") },
    )
    .await;
    let seen = reasons().await;
    assert!(!seen.iter().any(|r| r == "Queued"), "{seen:?}");
}

/// A RotaNode edited by hand into nonsense the CRD lets through (a slot beyond any slot
/// number) is left out of every list, and the other nodes are still read: the rest of the
/// fleet goes on, and the scheduler still grants them. Read on its own, it is an error that
/// names the object and the field.
#[tokio::test]
async fn a_rota_node_edited_into_nonsense_leaves_the_other_nodes_readable() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "nonsense").await;
    let a = store.open_session(&name("a"), TTL).await.expect("open a");
    enqueue(&store, &a).await;
    let b = store.open_session(&name("b"), TTL).await.expect("open b");
    enqueue(&store, &b).await;
    let api: Api<DynamicObject> = Api::all_with(
        scope.client(),
        &kube::api::ApiResource::erase::<RotaNode>(&()),
    );
    let object = format!("{}-a", scope.id());
    let mut value = api.get(&object).await.expect("read the RotaNode");
    value.data["status"]["slot"] = 5_000_000_000u64.into();
    api.replace(&object, &PostParams::default(), &value)
        .await
        .expect("the CRD lets the edit through");

    // Another process, with nothing of `a` in memory.
    let reader = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("connect");
    let nodes: Vec<String> = reader
        .nodes()
        .await
        .expect("the list reads")
        .into_iter()
        .map(|r| r.node.to_string())
        .collect();
    assert_eq!(nodes, ["b"]);
    let text = reader
        .node(&name("a"))
        .await
        .expect_err("the edited node does not read")
        .to_string();
    assert!(
        text.contains(&object) && text.contains("status.slot"),
        "{text}"
    );

    // `a` was queued first; the scheduler passes over it and grants `b`.
    assert_eq!(common::take_turn(&scope, &store, &b).await, 0);
    let lease = scope
        .api::<Lease>()
        .get("rota-slot-0")
        .await
        .expect("the slot Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("b")
    );
}

/// A grant written by hand into a RotaNode, without its Lease, gives nothing: the agent may take
/// it up, but its fence reads the Lease, refuses, and the node gives the window up before
/// anything disrupted it.
#[tokio::test]
async fn a_grant_written_by_hand_without_its_lease_is_fenced_and_given_up() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "forged").await;
    let node = name("forged");
    let s = store.open_session(&node, TTL).await.expect("open");
    enqueue(&store, &s).await;
    let rota_nodes: Api<RotaNode> = Api::all(scope.client());
    let mut object = common::rota_node(&scope, &store, &node).await;
    object.spec.grant = Some(GrantSpec {
        slot: 0,
        at: Timestamp(now_millis()),
    });
    rota_nodes
        .replace(&store.object_name(&node), &PostParams::default(), &object)
        .await
        .expect("a grant written by hand");

    // The grant written by hand reaches the agent.
    rota_e2e::turn::granted(&store, &s, Duration::from_secs(10)).await;
    let refused = store.fence(&s, TTL).await;
    assert!(
        matches!(refused, Err(rota_store::Error::Fenced { .. })),
        "the fence refuses a grant without its Lease: {refused:?}"
    );
    let object = common::rota_node(&scope, &store, &node).await;
    let status = object.status.expect("a status");
    assert_eq!(
        (status.state, status.slot, object.spec.grant),
        (NodeState::Queued, None, None),
        "the node gave the window up and waits again"
    );
    let lease = scope
        .api::<Lease>()
        .get_opt("rota-slot-0")
        .await
        .expect("read the Lease");
    assert_eq!(lease.as_ref().and_then(rota_kube_api::slots::holder), None);
}

/// A grant its agent does not take up within the take-up time (its agent is dead, or hangs) is
/// withdrawn by the scheduler: the RotaNode records it and the Lease is free again. The node
/// gets no grant while the mark stands, even first in the queue, so another node takes the
/// slot; its agent's next write clears the mark and it is granted again.
#[tokio::test]
async fn a_grant_not_taken_up_in_time_is_withdrawn_until_the_agent_writes() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "withdrawn").await;
    store.set_concurrency(1).await.expect("concurrency");
    let slow = store.open_session(&name("slow"), TTL).await.expect("open");
    enqueue(&store, &slow).await;
    common::round(&scope).await;
    let object = common::rota_node(&scope, &store, &slow.node).await;
    assert_eq!(object.spec.grant.map(|g| g.slot), Some(0), "granted");

    // The agent does not ask: the grant is not taken up.
    tokio::time::sleep(Duration::from_millis(50)).await;
    common::round_within(&scope, Duration::from_millis(10)).await;
    let object = common::rota_node(&scope, &store, &slow.node).await;
    let withdrawn = object
        .spec
        .withdrawn
        .as_ref()
        .expect("the withdrawal recorded");
    assert_eq!(
        (withdrawn.slot, withdrawn.reason.as_str()),
        (0, "notTakenUp")
    );
    assert_eq!(object.spec.grant, None, "the grant not taken up is removed");
    assert_eq!(object.status.and_then(|s| s.slot), None);
    let leases = scope.api::<Lease>();
    let lease = leases.get("rota-slot-0").await.expect("the slot Lease");
    assert_eq!(
        rota_kube_api::slots::holder(&lease),
        None,
        "the Lease is free"
    );

    common::round(&scope).await;
    let object = common::rota_node(&scope, &store, &slow.node).await;
    assert_eq!(object.spec.grant, None, "no grant while the mark stands");
    let live = store.open_session(&name("live"), TTL).await.expect("open");
    enqueue(&store, &live).await;
    assert_eq!(
        common::take_turn(&scope, &store, &live).await,
        0,
        "the node behind takes the slot"
    );

    // The slow agent is back: its ask (again when its watch brings the withdrawal, as an
    // agent asks when woken) writes, which clears the mark.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(
            store.try_acquire_slot(&slow).await.expect("look"),
            Acquire::Wait { changes: 1 }
        );
        let object = common::rota_node(&scope, &store, &slow.node).await;
        if object.spec.withdrawn.is_none() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent's asks never cleared the mark: {:?}",
            object.spec.withdrawn
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.set_concurrency(2).await.expect("concurrency");
    assert_eq!(
        common::take_turn(&scope, &store, &slow).await,
        1,
        "granted again once its agent wrote"
    );
}

/// Walks `s`'s node through one whole window of a reboot: request, queue, grant, take-up,
/// drain, maintain, verify, finish.
async fn one_window(scope: &rota_e2e::testenv::Scope, store: &KubeStore, s: &rota_store::Session) {
    enqueue(store, s).await;
    common::take_turn(scope, store, s).await;
    common::finish_window(store, s).await;
}

/// Each ended window becomes one RotaWindow, owned by its RotaNode and listed in its
/// `status.windows`; a node keeps only the last `kept_windows` of them, and the older objects are
/// deleted. The history read back has each entry of the windows kept exactly once. Deleting the
/// RotaNode (a node gone for good) lets the garbage collector delete its windows.
#[tokio::test]
async fn an_ended_window_becomes_one_rota_window_and_only_the_last_are_kept() {
    let Some(env) = common::env() else { return };
    let scope = env.scope("windows").await.expect("a test scope");
    common::install_crd(scope.client()).await;
    let config = KubeStoreConfig {
        kept_windows: 2,
        ..common::store_config(&scope)
    };
    let store = KubeStore::connect(scope.client(), config)
        .await
        .expect("connect the store");
    let node = name("windowed");
    let s = store.open_session(&node, TTL).await.expect("open");
    let windows: Api<RotaWindow> = Api::all(scope.client());
    let selector = format!("rota.dev/namespace={}", scope.namespace());
    let listed = || {
        let windows = windows.clone();
        let selector = selector.clone();
        async move {
            let mut names: Vec<String> = windows
                .list(&ListParams::default().labels(&selector))
                .await
                .expect("list the RotaWindows")
                .items
                .into_iter()
                .filter_map(|w| w.metadata.name)
                .collect();
            names.sort();
            names
        }
    };

    let mut ended = Vec::new();
    for window in 1..=3usize {
        one_window(&scope, &store, &s).await;
        let object = common::rota_node(&scope, &store, &node).await;
        let status = object.status.expect("a status");
        assert_eq!(status.slot, None, "window {window} ended");
        assert!(
            status.history.is_empty() && status.steps.is_empty(),
            "the window's history moved out of the RotaNode: {status:?}"
        );
        let new: Vec<&String> = status
            .windows
            .iter()
            .filter(|w| !ended.contains(*w))
            .collect();
        assert_eq!(
            new.len(),
            1,
            "one RotaWindow per window: {:?}",
            status.windows
        );
        ended.push(new[0].clone());
        assert_eq!(
            status.windows,
            ended[ended.len().saturating_sub(2)..],
            "the last two windows listed, oldest first"
        );
    }
    let mut kept = ended[1..].to_vec();
    kept.sort();
    assert_eq!(listed().await, kept, "the oldest RotaWindow was deleted");
    let mut entries_kept = 0;
    for name in &ended[1..] {
        let window = windows.get(name).await.expect("a RotaWindow kept");
        assert_eq!(window.spec.node, "windowed");
        let owners: Vec<&str> = window
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| o.kind.as_str())
            .collect();
        assert_eq!(owners, ["RotaNode"]);
        entries_kept += window.spec.history.len();
    }

    let history = store
        .history(&HistoryFilter {
            node: Some(node.clone()),
            ..HistoryFilter::default()
        })
        .await
        .expect("the history");
    let ids: std::collections::BTreeSet<i64> = history.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), history.len(), "an entry read twice: {history:?}");
    assert_eq!(history.len(), entries_kept, "{history:?}");
    let finished = history
        .iter()
        .filter(|e| e.event == HistoryEvent::Finished)
        .count();
    assert_eq!(
        finished, 2,
        "one finished reboot per window kept: {history:?}"
    );
    let every_node = store
        .history(&HistoryFilter::default())
        .await
        .expect("every node's history");
    assert_eq!(
        every_node, history,
        "the fleet's history reads the same windows"
    );

    Api::<RotaNode>::all(scope.client())
        .delete(&store.object_name(&node), &DeleteParams::default())
        .await
        .expect("delete the RotaNode");
    eventually(
        "the windows go with their RotaNode",
        Duration::from_secs(60),
        || async { listed().await.is_empty() },
    )
    .await;
}
