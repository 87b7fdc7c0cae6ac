//! The scheduler on the real control plane of `testenv/`: a failover grants again within the
//! leader Lease's duration, schedulers that all think they lead never grant more than the
//! concurrency, and an operation decided on a stale read does nothing.

use std::time::Duration;

use kube::Api;
use rota_core::{NodeName, NodeState, Transition, WindowChange};
use rota_e2e::fleet::install_crd;
use rota_e2e::testenv::{Scope, TestEnv};
use rota_kube_api::{RotaNode, slots};
use rota_scheduler::{Fleet, SchedulerConfig};
use rota_store::{Session, Store, StoreExt, now_millis};
use rota_store_kube::{KubeStore, KubeStoreConfig};
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
    let config = KubeStoreConfig {
        namespace: scope.namespace().into(),
        name_prefix: format!("{}-", scope.id()),
        ..KubeStoreConfig::default()
    };
    let store = KubeStore::connect(scope.client(), config)
        .await
        .expect("the store");
    Some((scope, store))
}

fn node(name: &str) -> NodeName {
    NodeName::new(name).expect("a node name")
}

/// `name`'s agent queues it, as it does at a request.
async fn queue(store: &KubeStore, name: &str) -> Session {
    let session = store.open_session(&node(name), TTL).await.expect("session");
    rota_e2e::turn::queue(store, &session).await;
    session
}

/// The slot `name`'s RotaNode is granted, read now.
async fn grant_of(scope: &Scope, store: &KubeStore, name: &str) -> Option<u32> {
    let api: Api<RotaNode> = Api::all(scope.client());
    let object = api
        .get(&store.object_name(&node(name)))
        .await
        .expect("read");
    object.spec.grant.map(|g| g.slot)
}

/// Waits up to `within` for `name` to be granted a slot.
async fn granted_within(scope: &Scope, store: &KubeStore, name: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if grant_of(scope, store, name).await.is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn scheduler(scope: &Scope, identity: &str, lease: Duration) -> SchedulerConfig {
    SchedulerConfig {
        lease_duration: lease,
        take_up: TAKE_UP,
        name_prefix: format!("{}-", scope.id()),
        ..SchedulerConfig::new(scope.namespace(), identity)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_grants_again_within_the_leader_leases_duration() {
    let Some((scope, store)) = installation("failover").await else {
        return;
    };
    store.set_concurrency(2).await.expect("concurrency");
    let lease = Duration::from_secs(3);
    let stop = CancellationToken::new();
    let a = tokio::spawn(rota_scheduler::run(
        scope.client(),
        scheduler(&scope, "scheduler-a", lease),
        stop.clone(),
    ));
    // a leads before b starts.
    queue(&store, "first").await;
    assert!(
        granted_within(&scope, &store, "first", Duration::from_secs(30)).await,
        "the first scheduler grants"
    );
    let b = tokio::spawn(rota_scheduler::run(
        scope.client(),
        scheduler(&scope, "scheduler-b", lease),
        stop.clone(),
    ));
    // SIGKILL: the leader stops at once, without giving the lead up.
    a.abort();
    let killed = tokio::time::Instant::now();
    queue(&store, "second").await;
    assert!(
        granted_within(&scope, &store, "second", lease * 3).await,
        "the standby did not grant within three lease durations"
    );
    // The lead passes only once the dead leader's Lease has run out.
    assert!(killed.elapsed() >= lease / 2, "{:?}", killed.elapsed());
    stop.cancel();
    b.await.expect("the standby stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schedulers_that_all_think_they_lead_never_grant_more_than_the_concurrency() {
    let Some((scope, store)) = installation("partitioned").await else {
        return;
    };
    store.set_concurrency(2).await.expect("concurrency");
    let names: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
    let mut sessions = Vec::new();
    for name in &names {
        sessions.push(queue(&store, name).await);
    }
    // Four rounds at once, again and again, while the nodes take their grants up and end
    // their windows: each is a scheduler that believes it leads.
    let rounds = (0..4).map(|_| {
        let (client, namespace) = (scope.client(), scope.namespace().to_string());
        tokio::spawn(async move {
            for _ in 0..30 {
                rota_scheduler::round(client.clone(), &namespace, TAKE_UP)
                    .await
                    .expect("a round");
            }
        })
    });
    let rounds: Vec<_> = rounds.collect();
    let mut peak = 0;
    let mut done = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while done.len() < names.len() && tokio::time::Instant::now() < deadline {
        let fleet = store.fleet().await.expect("fleet");
        let held = fleet.slots.len();
        peak = peak.max(held);
        assert!(held <= 2, "{held} Leases held: {:?}", fleet.slots);
        for holder in &fleet.slots {
            let record = fleet.nodes.iter().find(|n| n.record.node == holder.node);
            if let Some(record) = record
                && let Some(slot) = record.record.slot
            {
                assert_eq!(
                    slot, holder.slot,
                    "{} took up a slot its Lease does not name",
                    holder.node
                );
            }
        }
        for session in &sessions {
            if done.contains(&session.node) {
                continue;
            }
            if store
                .try_acquire_slot(session)
                .await
                .expect("ask")
                .slot()
                .is_some()
            {
                store
                    .fence(session, TTL)
                    .await
                    .expect("the fence of a grant taken up");
                // Read while this node holds its slot: the peak counts it, whatever the reads
                // of the loop's start happened to see.
                let held = store.fleet().await.expect("fleet").slots.len();
                assert!(held <= 2, "{held} Leases held");
                peak = peak.max(held);
                let finished = Transition::new(NodeState::Queued, NodeState::Idle).window(
                    WindowChange::Cancel {
                        reason: "done".into(),
                    },
                );
                store.transition(session, finished).await.expect("end");
                done.insert(session.node.clone());
            }
        }
        if rounds.iter().all(|r| r.is_finished()) {
            rota_scheduler::round(scope.client(), scope.namespace(), TAKE_UP)
                .await
                .expect("a round");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for round in rounds {
        round.await.expect("rounds end");
    }
    assert_eq!(done.len(), names.len(), "every node had its turn");
    assert!(peak >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_withdrawal_decided_on_a_stale_read_takes_nothing_from_a_grant_written_since() {
    let Some((scope, store)) = installation("stale-read").await else {
        return;
    };
    store.set_concurrency(1).await.expect("concurrency");
    let session = queue(&store, "a").await;
    // The read: a Lease names a while its RotaNode holds no grant (a scheduler stopped between
    // its two writes), so the read calls for the Lease back.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(scope.client(), scope.namespace());
    // Taken an hour ago: a Lease just taken may be a grant whose RotaNode write is not read yet.
    let taken = slots::taken(0, None, "a", None, now_millis() - 3_600_000);
    leases
        .create(&Default::default(), &taken)
        .await
        .expect("the Lease");
    // A scheduler's view, kept current by its watches.
    let changed = std::sync::Arc::new(tokio::sync::Notify::new());
    let fleet = Fleet::follow(scope.client(), scope.namespace(), changed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (decided, read) = loop {
        // No take-up time: the Lease goes back as soon as a read shows it not in use.
        let (decided, read) = fleet.decide(Duration::ZERO).expect("decide");
        if fleet.ready() && !decided.is_empty() {
            break (decided, read);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the view shows the Lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(decided.len(), 1, "{decided:?}");
    // Then the grant is written, and the agent takes it up.
    let api: Api<RotaNode> = Api::all(scope.client());
    let name = store.object_name(&node("a"));
    let mut object = api.get(&name).await.expect("read");
    object.spec.grant = Some(rota_kube_api::crd::GrantSpec {
        slot: 0,
        at: rota_kube_api::crd::Timestamp(now_millis()),
    });
    api.replace(&name, &Default::default(), &object)
        .await
        .expect("grant");
    rota_e2e::turn::granted(&store, &session, Duration::from_secs(10)).await;
    // The view has caught up with the take-up: nothing to decide any more.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !fleet.decide(TAKE_UP).expect("decide").0.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the view shows the take-up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The withdrawal decided on the read before is carried out now: it must do nothing.
    let done =
        rota_scheduler::carry_out(scope.client(), scope.namespace(), &read, &decided[0]).await;
    assert!(!done, "a withdrawal decided on a stale read went through");
    assert_eq!(store.fence(&session, TTL).await.expect("the fence"), 0);
}
