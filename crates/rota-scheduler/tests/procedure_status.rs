//! The Procedures' status on the real control plane of `testenv/`, written by the leading
//! scheduler alone from the RotaNodes its agents write: each node's entry, the counts and the
//! condition `Complete`; many nodes changing at once all end up in it; and a status that lost
//! an entry while no scheduler ran is written again by the next one.

use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use rota_core::{NodeName, NodeState, ProcedureSpec, Process, Transition, WindowChange};
use rota_e2e::fleet::install_crd;
use rota_e2e::testenv::{Scope, TestEnv};
use rota_kube_api::procedure::NodeProcedureState;
use rota_kube_api::{Procedure, ProcedureStatus};
use rota_scheduler::SchedulerConfig;
use rota_store::{Outcome, Session, Store, StoreExt};
use rota_store_kube::{KubeStore, KubeStoreConfig};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_secs(600);
const TAKE_UP: Duration = Duration::from_secs(600);

/// A scope with rota's CRDs and a store of its own, or `None` when `ROTA_E2E_SKIP=1`.
async fn installation(name: &str) -> Option<(Scope, KubeStore)> {
    let env = match TestEnv::get() {
        Ok(env) => env?,
        Err(e) => panic!("{e:#}"),
    };
    let scope = env.scope(name).await.expect("a test scope");
    install_crd(scope.client()).await.expect("the CRDs");
    let store = KubeStore::connect(scope.client(), store_config(&scope))
        .await
        .expect("the store");
    Some((scope, store))
}

fn store_config(scope: &Scope) -> KubeStoreConfig {
    KubeStoreConfig {
        namespace: scope.namespace().into(),
        name_prefix: format!("{}-", scope.id()),
        ..KubeStoreConfig::default()
    }
}

/// A scheduler of `store`'s installation, running in this process until `stop`.
fn scheduler(scope: &Scope, store: &KubeStore, stop: &CancellationToken) -> JoinHandle<()> {
    let config = SchedulerConfig {
        lease_duration: Duration::from_secs(3),
        take_up: TAKE_UP,
        name_prefix: store.config().name_prefix.clone(),
        ..SchedulerConfig::new(scope.namespace(), "scheduler")
    };
    tokio::spawn(rota_scheduler::run(scope.client(), config, stop.clone()))
}

fn name(n: &str) -> NodeName {
    NodeName::new(n).expect("valid node name")
}

fn procedures(scope: &Scope) -> Api<Procedure> {
    Api::all(scope.client())
}

/// Waits until the procedure's status shows `expected` for every node given.
async fn eventually_states(
    store: &KubeStore,
    scope: &Scope,
    procedure: &str,
    expected: &[(&str, NodeProcedureState)],
) -> ProcedureStatus {
    let object = format!("{}{procedure}", store.config().name_prefix);
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = procedures(scope)
            .get(&object)
            .await
            .expect("read the Procedure")
            .status
            .unwrap_or_default();
        let matches = expected.iter().all(|(node, state)| {
            status
                .nodes
                .get(*node)
                .is_some_and(|entry| entry.state == *state)
        });
        if matches {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "timed out waiting for {expected:?}; status: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Queues the node, waits for the running scheduler's grant, takes it up and opens the window.
async fn open_window(store: &KubeStore, s: &Session) {
    rota_e2e::turn::queue(store, s).await;
    rota_e2e::turn::granted(store, s, Duration::from_secs(30)).await;
    store
        .transition(
            s,
            Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
        )
        .await
        .expect("open the window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_follows_each_node_and_completes_when_every_matching_node_succeeded() {
    let Some((scope, store)) = installation("mop-status").await else {
        return;
    };
    let stop = CancellationToken::new();
    let running = scheduler(&scope, &store, &stop);
    store.set_concurrency(2).await.expect("concurrency");
    let nodes = [
        scope.create_node("a").await.expect("node"),
        scope.create_node("b").await.expect("node"),
    ];
    let mut spec = ProcedureSpec::new("kernel", "true");
    spec.node_selector = scope.labels();
    store.submit_procedure(&spec).await.expect("submit");
    let mop = Process::mop("kernel").expect("process");
    // Each node's agent in a process of its own.
    let other = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("second handle");
    let a = store.open_session(&name(&nodes[0]), TTL).await.expect("a");
    let b = other.open_session(&name(&nodes[1]), TTL).await.expect("b");
    store.add_request(&a, &mop, "procedure").await.expect("add");
    other.add_request(&b, &mop, "procedure").await.expect("add");
    let status = eventually_states(
        &store,
        &scope,
        "kernel",
        &[
            (&nodes[0], NodeProcedureState::Pending),
            (&nodes[1], NodeProcedureState::Pending),
        ],
    )
    .await;
    assert_eq!((status.matching, status.pending), (2, 2));

    open_window(&store, &a).await;
    open_window(&other, &b).await;
    eventually_states(
        &store,
        &scope,
        "kernel",
        &[
            (&nodes[0], NodeProcedureState::Running),
            (&nodes[1], NodeProcedureState::Running),
        ],
    )
    .await;
    let failed = Outcome::Failed {
        cause: "exit 3".into(),
        policy: rota_core::BackoffPolicy {
            initial: Duration::from_secs(1),
            maximum: Duration::from_secs(5),
            exponent: 2.0,
        },
    };
    other
        .transition(
            &b,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("b drained");
    other
        .complete_request(&b, &mop, &failed)
        .await
        .expect("b fails");
    store
        .complete_request(&a, &mop, &Outcome::Succeeded { detail: None })
        .await
        .expect("a succeeds");
    let status = eventually_states(
        &store,
        &scope,
        "kernel",
        &[
            (&nodes[0], NodeProcedureState::Succeeded),
            (&nodes[1], NodeProcedureState::Failed),
        ],
    )
    .await;
    assert_eq!(status.nodes[&nodes[1]].cause.as_deref(), Some("exit 3"));
    let complete = &status.conditions[0];
    assert_eq!(
        (complete.status.as_str(), complete.reason.as_str()),
        ("False", "Failed")
    );

    other
        .complete_request(&b, &mop, &Outcome::Succeeded { detail: None })
        .await
        .expect("b succeeds on retry");
    let status = eventually_states(
        &store,
        &scope,
        "kernel",
        &[(&nodes[1], NodeProcedureState::Succeeded)],
    )
    .await;
    assert_eq!(
        (
            status.succeeded,
            status.failed,
            status.pending,
            status.running
        ),
        (2, 0, 0, 0)
    );
    assert_eq!(status.conditions[0].status, "True", "{status:?}");
    stop.cancel();
    running.await.expect("the scheduler stops");
}

/// Many nodes whose entries change at once all end up in the status, each once, with the
/// counts: the one writer puts every change it reads into one compare-and-swap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_nodes_changing_at_once_all_end_up_in_the_status() {
    let Some((scope, store)) = installation("mop-race").await else {
        return;
    };
    let stop = CancellationToken::new();
    let running = scheduler(&scope, &store, &stop);
    let mut spec = ProcedureSpec::new("firmware", "true");
    spec.node_selector = scope.labels();
    store.submit_procedure(&spec).await.expect("submit");
    let mop = Process::mop("firmware").expect("process");
    let count = 8;
    let mut agents = Vec::new();
    for i in 0..count {
        let node = scope.create_node(&format!("n{i}")).await.expect("node");
        let handle = KubeStore::connect(scope.client(), store.config().clone())
            .await
            .expect("a handle per agent");
        let session = handle.open_session(&name(&node), TTL).await.expect("open");
        agents.push((Arc::new(handle), session, node));
    }
    let adds = agents.iter().map(|(handle, session, _)| {
        let handle = handle.clone();
        let mop = mop.clone();
        async move { handle.add_request(session, &mop, "procedure").await }
    });
    for added in futures::future::join_all(adds).await {
        assert!(added.expect("add").1);
    }
    let expected: Vec<(&str, NodeProcedureState)> = agents
        .iter()
        .map(|(_, _, node)| (node.as_str(), NodeProcedureState::Pending))
        .collect();
    let status = eventually_states(&store, &scope, "firmware", &expected).await;
    assert_eq!((status.pending, status.matching), (count, count));
    assert_eq!(status.nodes.len(), agents.len(), "{status:?}");
    stop.cancel();
    running.await.expect("the scheduler stops");
}

/// A status that lost an entry while no scheduler ran (here: the older entry put back by hand)
/// keeps it until a scheduler leads again; the next one writes the entry from the RotaNode,
/// with no change of the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_next_scheduler_writes_an_entry_the_status_lost() {
    let Some((scope, store)) = installation("mop-restart").await else {
        return;
    };
    let stop = CancellationToken::new();
    let first = scheduler(&scope, &store, &stop);
    let node = scope.create_node("a").await.expect("node");
    let mut spec = ProcedureSpec::new("bios", "true");
    spec.node_selector = scope.labels();
    store.submit_procedure(&spec).await.expect("submit");
    let mop = Process::mop("bios").expect("process");
    let session = store.open_session(&name(&node), TTL).await.expect("open");
    store
        .add_request(&session, &mop, "procedure")
        .await
        .expect("add");
    let pending = eventually_states(
        &store,
        &scope,
        "bios",
        &[(&node, NodeProcedureState::Pending)],
    )
    .await;
    let pending = serde_json::to_value(&pending.nodes[&node]).expect("the pending entry");
    open_window(&store, &session).await;
    eventually_states(
        &store,
        &scope,
        "bios",
        &[(&node, NodeProcedureState::Running)],
    )
    .await;
    stop.cancel();
    first.await.expect("the first scheduler stops");

    let object = format!("{}bios", store.config().name_prefix);
    procedures(&scope)
        .patch_status(
            &object,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "nodes": { &node: pending } } })),
        )
        .await
        .expect("put the older entry back");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let status = procedures(&scope).get(&object).await.expect("read").status;
    assert_eq!(
        status.map(|s| s.nodes[&node].state),
        Some(NodeProcedureState::Pending),
        "no scheduler runs: the status keeps the entry from before"
    );

    let stop = CancellationToken::new();
    let next = scheduler(&scope, &store, &stop);
    let status = eventually_states(
        &store,
        &scope,
        "bios",
        &[(&node, NodeProcedureState::Running)],
    )
    .await;
    assert_eq!((status.running, status.pending), (1, 0), "{status:?}");
    stop.cancel();
    next.await.expect("the next scheduler stops");
}
