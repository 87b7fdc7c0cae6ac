//! The Kubernetes store's own behaviour on the real control plane of `testenv/`: what the
//! conformance suite cannot see (garbage collection, the watch across processes, the CRD's
//! validation, RBAC errors, Events, idle writes).

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use rota_core::{NodeName, NodeState, Process};
use rota_e2e::fleet::request_reboot_by_hand;
use rota_store::{Acquire, Store, StoreExt, Transition, WAKE_ALL, WindowChange, now_millis};
use rota_store_kube::ids::{CLAIMED_TAGS, tag_candidates};
use rota_store_kube::{KubeStore, KubeStoreConfig, RotaNode};

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
    store
        .transition(
            s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("enqueue");
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

#[tokio::test]
async fn a_deleted_nodes_slot_is_freed_and_waiters_hear_of_it_through_the_watch() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "gc").await;
    let doomed = scope.create_node("doomed").await.expect("create node");
    // The waiter's agent runs in another process: a handle of its own, with its own watch.
    let other = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("second handle");
    store.set_concurrency(1).await.expect("concurrency");

    let holder = store.open_session(&name(&doomed), TTL).await.expect("open");
    enqueue(&store, &holder).await;
    assert_eq!(
        store.try_acquire_slot(&holder).await.expect("acquire"),
        Acquire::Granted(0)
    );
    store
        .transition(
            &holder,
            Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
        )
        .await
        .expect("open the window");
    let lease = scope
        .api::<Lease>()
        .get("rota-slot-0")
        .await
        .expect("the slot Lease");
    let owner = &lease.metadata.owner_references.expect("an owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", doomed.as_str())
    );
    assert_eq!(lease.spec.and_then(|s| s.lease_duration_seconds), None);

    let waiter = other
        .open_session(&name("waiter"), TTL)
        .await
        .expect("open");
    enqueue(&other, &waiter).await;
    let mut changes = other.changes();
    let seen = *changes.borrow_and_update();
    let Acquire::Wait { changes: wait } = other.try_acquire_slot(&waiter).await.expect("wait")
    else {
        panic!("the slot is taken");
    };
    assert_eq!(wait, 1);

    scope
        .nodes()
        .delete(&doomed, &DeleteParams::default())
        .await
        .expect("delete the node");
    tokio::time::timeout(
        Duration::from_secs(120),
        changes.wait_for(|n| *n >= seen + wait),
    )
    .await
    .expect("the watch reports the release within two minutes")
    .expect("the store is alive");
    assert_eq!(
        other.try_acquire_slot(&waiter).await.expect("acquire"),
        Acquire::Granted(0),
        "the waiter takes the freed slot"
    );
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
    assert_eq!(
        store.try_acquire_slot(&holder).await.expect("acquire"),
        Acquire::Granted(0)
    );
    let waiter = store
        .open_session(&name("waiter"), TTL)
        .await
        .expect("open");
    enqueue(&store, &waiter).await;
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
        store.try_acquire_slot(&waiter).await.expect("acquire"),
        Acquire::Granted(1),
        "the waiter takes the new slot"
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
    let api: Api<rota_store_kube::Procedure> = Api::all(scope.client());
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
    assert_eq!(
        store.try_acquire_slot(&s).await.expect("acquire"),
        Acquire::Granted(0)
    );
    store
        .transition(
            &s,
            Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
        )
        .await
        .expect("open the window");

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

/// A fleet's first start: every new node claims a tag of its own at once, each with a Lease of
/// its own instead of a compare-and-swap of one shared counter (which ran most agents of a
/// 1,000-node first start out of attempts); a node started again after it claimed its tag and
/// before it made its RotaNode finds its own claim.
#[tokio::test]
async fn new_nodes_claim_distinct_tags_at_once_and_keep_their_own() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "tags").await;
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
    for session in &opened {
        session.as_ref().expect("every first start opens a session");
    }
    let api: Api<RotaNode> = Api::all(scope.client());
    let tag_of = |node: &NodeName| {
        let (api, object) = (api.clone(), store.object_name(node));
        async move {
            api.get(&object)
                .await
                .expect("the RotaNode")
                .status
                .expect("a status")
                .tag
        }
    };
    let mut tags = Vec::new();
    for node in &nodes {
        tags.push(tag_of(node).await);
    }
    let distinct: std::collections::BTreeSet<u32> = tags.iter().copied().collect();
    assert_eq!(distinct.len(), nodes.len(), "shared tags: {tags:?}");
    assert!(tags.iter().all(|t| CLAIMED_TAGS.contains(t)), "{tags:?}");
    let config = scope
        .api::<ConfigMap>()
        .get_opt("rota-config")
        .await
        .expect("read rota-config");
    let counter = config.and_then(|c| c.data?.get("nextNodeTag").cloned());
    assert_eq!(counter, None, "the shared counter was not written");

    // An agent that stopped after its claim and before its RotaNode left the claim alone.
    let late = name("late");
    let object = store.object_name(&late);
    let first = tag_candidates(&object).next().expect("a candidate");
    let claim = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("rota-node-tag-{first}")),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(object.clone()),
            ..Default::default()
        }),
    };
    scope
        .api::<Lease>()
        .create(&PostParams::default(), &claim)
        .await
        .expect("the claim of an agent that stopped");
    store.open_session(&late, TTL).await.expect("start again");
    assert_eq!(tag_of(&late).await, first, "the node's own claim");
}

/// A node's tag claim belongs to its RotaNode: deleting the RotaNode (the record of a node gone
/// for good, `kubectl delete rotanode`) lets the garbage collector delete the claim too, so the
/// tag can serve another node instead of staying taken for ever.
#[tokio::test]
async fn a_nodes_tag_claim_goes_with_its_rota_node() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "tagowner").await;
    let node = name("owned");
    store.open_session(&node, TTL).await.expect("open");
    let rota_nodes: Api<RotaNode> = Api::all(scope.client());
    let object = rota_nodes
        .get(&store.object_name(&node))
        .await
        .expect("the RotaNode");
    let tag = object.status.as_ref().expect("a status").tag;
    let claim_name = format!("rota-node-tag-{tag}");
    let leases = scope.api::<Lease>();
    let claim = leases.get(&claim_name).await.expect("the claim");
    let owners: Vec<(&str, &str)> = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| (o.kind.as_str(), o.uid.as_str()))
        .collect();
    let uid = object.metadata.uid.as_deref().expect("a uid");
    assert_eq!(owners, [("RotaNode", uid)]);

    rota_nodes
        .delete(&store.object_name(&node), &DeleteParams::default())
        .await
        .expect("delete the RotaNode");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while leases
        .get_opt(&claim_name)
        .await
        .expect("read the claim")
        .is_some()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the claim outlived its RotaNode"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    assert_eq!(
        store.try_acquire_slot(&s).await.expect("acquire"),
        Acquire::Granted(0)
    );
    store
        .transition(
            &s,
            Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
        )
        .await
        .expect("open the window");
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

/// A look lists only the nodes queued no later than the place the agent's handle last saw its
/// node take; a node moved further back behind the agent's back (an operator's edit) must
/// still see the nodes queued in between, and wait for them.
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
    let later = now - 1000;
    let status = object.status.as_mut().expect("a status");
    status.queued_at = Some(rota_store_kube::crd::Timestamp(later));
    object
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("rota.dev/queued-at".into(), later.to_string());
    let mut changes = agent.changes();
    let seen = *changes.borrow_and_update();
    rota_nodes
        .replace(&object_name, &PostParams::default(), &object)
        .await
        .expect("an operator moves the node back");
    // An edit by hand announces nothing: the watch of the agent's own RotaNode finds it.
    woken_by_the_edit(&mut changes, seen).await;

    assert_eq!(
        agent.try_acquire_slot(&m).await.expect("look"),
        Acquire::Wait { changes: 1 },
        "the node queued in between is ahead"
    );
    assert_eq!(
        others.try_acquire_slot(&a).await.expect("look"),
        Acquire::Granted(0)
    );
}

#[tokio::test]
async fn the_store_itself_frees_a_slot_whose_node_is_gone() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "orphan").await;
    store.set_concurrency(1).await.expect("concurrency");
    // A Lease held by a Node that no longer exists, as the garbage collector may leave it for
    // a while (it is not fast when busy).
    let lease = rota_store_kube::slots::taken(
        0,
        None,
        "gone",
        Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: "gone".into(),
                uid: "00000000-0000-0000-0000-000000000000".into(),
                ..Default::default()
            },
        ),
        now_millis(),
    );
    scope
        .api::<Lease>()
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the orphaned Lease");
    let s = store.open_session(&name("next"), TTL).await.expect("open");
    enqueue(&store, &s).await;
    eventually(
        "the orphaned slot is taken over",
        Duration::from_secs(60),
        || async { store.try_acquire_slot(&s).await.expect("acquire") == Acquire::Granted(0) },
    )
    .await;
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
        text.contains("cannot list rotanodes.rota.dev") && text.contains("forbidden"),
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

#[tokio::test]
async fn a_transition_is_recorded_as_an_event_on_the_node() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "events").await;
    let node = scope.node_name("ev");
    let s = store.open_session(&name(&node), TTL).await.expect("open");
    enqueue(&store, &s).await;
    let events: Api<Event> = Api::namespaced(scope.client(), "default");
    let selector = format!("regarding.name={node}");
    eventually(
        "a Queued event on the node",
        Duration::from_secs(30),
        || async {
            events
                .list(&ListParams::default().fields(&selector))
                .await
                .expect("list events")
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("Queued"))
        },
    )
    .await;
}

/// A RotaNode edited by hand into nonsense the CRD lets through (a slot beyond any slot
/// number) is left out of every list, and the other nodes are still read: the rest of the
/// fleet goes on. Read on its own, it is an error that names the object and the field.
#[tokio::test]
async fn a_rota_node_edited_into_nonsense_leaves_the_other_nodes_readable() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "nonsense").await;
    store.open_session(&name("a"), TTL).await.expect("open a");
    store.open_session(&name("b"), TTL).await.expect("open b");
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
}
