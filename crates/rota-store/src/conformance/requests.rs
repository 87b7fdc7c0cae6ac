//! Requests: one open request per process and node, also under a race, recorded with a
//! transition only when it is written, an operator's request and cancel, and the fleet's
//! overview of them.

use std::sync::Arc;

use rota_core::{NodeState, Process};

use super::{TTL, enqueue, finish_window, node, open_window, policy, session};
use crate::error::Error;
use crate::model::{NodeOverview, RequestState, Transition, WindowChange, now_millis};
use crate::store::{Store, StoreExt};

pub async fn open_request_is_unique_per_process(store: Arc<dyn Store>) {
    let s = session(&*store, "a").await;
    let (first, created) = store
        .add_request(&s, &Process::Reboot, "/run/reboot-needed")
        .await
        .expect("add");
    assert!(created);
    let (again, created) = store
        .add_request(&s, &Process::Reboot, "/var/run/reboot-required")
        .await
        .expect("add again");
    assert!(!created, "a second reboot request joins the open one");
    assert_eq!(first.id, again.id);
    let (maintenance, created) = store
        .add_request(&s, &Process::Maintenance, "/var/maintenance-required")
        .await
        .expect("add maintenance");
    assert!(created, "another process gets its own request");
    assert_ne!(maintenance.id, first.id);
    assert_eq!(
        store.open_requests(&node("a")).await.expect("open").len(),
        2
    );
    assert!(
        store
            .cancel_request(&s, &Process::Maintenance)
            .await
            .expect("cancel")
    );
    assert_eq!(
        store.open_requests(&node("a")).await.expect("open").len(),
        1
    );
}

/// Queueing with the request in the same write (an agent that finds a new sentinel): the
/// requests are recorded with the transition, an open one is kept, and a refused transition
/// records none.
pub async fn a_transition_records_its_requests_only_when_written(store: Arc<dyn Store>) {
    let s = session(&*store, "a").await;
    let (maintenance, _) = store
        .add_request(&s, &Process::Maintenance, "/var/maintenance-required")
        .await
        .expect("add maintenance");
    let queue = || {
        Transition::new(NodeState::Idle, NodeState::Queued)
            .window(WindowChange::Queue {
                queued_at: Some(now_millis()),
            })
            .request(Process::Reboot, "/run/reboot-needed")
            .request(Process::Maintenance, "/var/maintenance-required")
    };
    let queued = store.transition(&s, queue()).await.expect("queued");
    assert_eq!(queued.state, NodeState::Queued);
    let open = store.open_requests(&node("a")).await.expect("open");
    assert_eq!(open.len(), 2, "{open:?}");
    assert!(
        open.iter()
            .any(|r| r.process == Process::Reboot && r.source == "/run/reboot-needed")
    );
    assert!(
        open.iter().any(|r| r.id == maintenance.id),
        "the open maintenance request is kept: {open:?}"
    );

    // From the wrong state, nothing is recorded.
    let other = session(&*store, "b").await;
    let refused = store
        .transition(
            &other,
            Transition::new(NodeState::Queued, NodeState::Idle)
                .request(Process::Reboot, "/run/reboot-needed"),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::Refused(rota_core::RecordError::Conflict { .. }))
        ),
        "{refused:?}"
    );
    assert!(
        store
            .open_requests(&node("b"))
            .await
            .expect("open")
            .is_empty(),
        "a refused transition records no request"
    );

    // A superseded session records nothing either.
    let newer = store
        .open_session(&node("a"), TTL)
        .await
        .expect("a newer session");
    let fenced = store
        .transition(
            &s,
            Transition::new(NodeState::Queued, NodeState::Queued)
                .request(Process::Mop("kernel".into()), "procedure"),
        )
        .await;
    assert!(matches!(fenced, Err(Error::Fenced { .. })), "{fenced:?}");
    assert_eq!(
        store.open_requests(&node("a")).await.expect("open").len(),
        2,
        "a fenced transition records no request"
    );
    store.close_session(&newer).await.expect("closed");
}

/// Work uniqueness under a race: many concurrent claims of the same work create one request.
pub async fn racing_requests_create_one_open_request(store: Arc<dyn Store>) {
    let s = session(&*store, "a").await;
    let claims: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            let s = s.clone();
            tokio::spawn(async move {
                store
                    .add_request(&s, &Process::Reboot, &format!("racer-{i}"))
                    .await
                    .expect("add request")
            })
        })
        .collect();
    let mut ids = Vec::new();
    let mut created = 0;
    for claim in claims {
        let (request, new) = claim.await.expect("task");
        ids.push(request.id);
        created += usize::from(new);
    }
    assert_eq!(created, 1, "exactly one claim created the request");
    ids.dedup();
    assert_eq!(ids.len(), 1, "every claim names the same request: {ids:?}");
    assert_eq!(
        store.open_requests(&node("a")).await.expect("open").len(),
        1
    );
}

pub async fn an_operator_requests_and_cancels_without_a_session(store: Arc<dyn Store>) {
    let unknown = store
        .request(&node("ghost"), &Process::Reboot, "operator")
        .await;
    assert!(
        matches!(unknown, Err(Error::NoSuchNode { .. })),
        "{unknown:?}"
    );
    let s = session(&*store, "a").await;
    let (request, created) = store
        .request(&node("a"), &Process::Reboot, "operator")
        .await
        .expect("request");
    assert!(created);
    assert_eq!(request.source, "operator");
    assert_eq!(request.state, RequestState::Pending);
    let (again, created) = store
        .request(&node("a"), &Process::Reboot, "operator")
        .await
        .expect("again");
    assert!(!created, "an open request is returned as it is");
    assert_eq!(again.id, request.id);
    let (joined, created) = store
        .add_request(&s, &Process::Reboot, "/run/reboot-needed")
        .await
        .expect("the agent's own");
    assert!(!created, "the agent joins the operator's request");
    assert_eq!(joined.id, request.id);
    assert!(
        store
            .cancel(&node("a"), &Process::Reboot)
            .await
            .expect("cancel")
    );
    assert!(
        !store
            .cancel(&node("a"), &Process::Reboot)
            .await
            .expect("again")
    );
    assert!(
        store
            .open_requests(&node("a"))
            .await
            .expect("open")
            .is_empty()
    );
}

/// The overview `rota status` reads at once is what each node's own reads give: its record,
/// its open requests (not its closed ones) and its backoffs.
pub async fn the_overview_is_what_each_node_reads(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let failed = session(&*store, "failed").await;
    enqueue(&*store, &failed, now_millis() - 2000).await;
    store.try_acquire_slot(&failed).await.expect("acquire");
    open_window(&*store, &failed).await;
    store
        .transition(
            &failed,
            Transition::new(NodeState::Draining, NodeState::Queued).window(WindowChange::Fail {
                cause: "drain timed out".into(),
                policy: policy(),
                keep_slot: false,
            }),
        )
        .await
        .expect("drain failed");
    let done = session(&*store, "done").await;
    enqueue(&*store, &done, now_millis() - 1000).await;
    store.try_acquire_slot(&done).await.expect("acquire");
    open_window(&*store, &done).await;
    finish_window(&*store, &done).await;
    let queued = session(&*store, "queued").await;
    enqueue(&*store, &queued, now_millis()).await;
    store
        .add_request(&queued, &Process::Maintenance, "conformance")
        .await
        .expect("a second request");
    session(&*store, "idle").await;

    let mut expected = Vec::new();
    for record in store.nodes().await.expect("nodes") {
        expected.push(NodeOverview {
            open_requests: store.open_requests(&record.node).await.expect("requests"),
            backoffs: store.backoffs(&record.node).await.expect("backoffs"),
            record,
        });
    }
    let overview = store.overview().await.expect("overview");
    assert_eq!(overview, expected);
    let count = |name: &str, what: fn(&NodeOverview) -> usize| {
        overview
            .iter()
            .find(|o| o.record.node == node(name))
            .map(what)
    };
    assert_eq!(count("queued", |o| o.open_requests.len()), Some(2));
    assert_eq!(
        count("done", |o| o.open_requests.len()),
        Some(0),
        "closed requests are left out"
    );
    assert_eq!(count("failed", |o| o.backoffs.len()), Some(1));
    assert_eq!(
        count("idle", |o| o.open_requests.len() + o.backoffs.len()),
        Some(0)
    );
}
