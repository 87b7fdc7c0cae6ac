//! Sessions and fencing: a superseded or expired session writes nothing, a fenced write
//! needs the slot, and every transition is a compare-and-swap on the node's state.

use std::sync::Arc;
use std::time::Duration;

use rota_core::{NodeState, Process};

use super::{TTL, enqueue, node, session};
use crate::error::Error;
use crate::model::{Transition, WindowChange, now_millis};
use crate::store::{Store, StoreExt};

pub async fn superseded_session_is_fenced(store: Arc<dyn Store>) {
    let old = session(&*store, "a").await;
    let new = session(&*store, "a").await;
    assert_ne!(old.id, new.id);
    let refused = store
        .transition(&old, Transition::new(NodeState::Idle, NodeState::Queued))
        .await;
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    let refused = store.add_request(&old, &Process::Reboot, "stale").await;
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    let refused = store.heartbeat(&old, TTL).await;
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    store.heartbeat(&new, TTL).await.expect("new session works");
    assert!(
        store
            .open_requests(&node("a"))
            .await
            .expect("requests")
            .is_empty(),
        "the refused write left nothing behind"
    );
}

/// A session that ran out may write nothing. Its renewal says `Expired` while nobody took the
/// node over (its agent may open a new session and carry on), and `Fenced` once someone has.
pub async fn expired_session_is_fenced_and_told_apart_from_a_superseded_one(store: Arc<dyn Store>) {
    let s = store
        .open_session(&node("a"), Duration::from_millis(100))
        .await
        .expect("open");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let refused = store
        .transition(&s, Transition::new(NodeState::Idle, NodeState::Queued))
        .await;
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    let refused = store.heartbeat(&s, TTL).await;
    assert!(matches!(refused, Err(Error::Expired { .. })), "{refused:?}");
    let refused = store.heartbeat(&s, TTL).await;
    assert!(
        matches!(refused, Err(Error::Expired { .. })),
        "a refused renewal renews nothing: {refused:?}"
    );

    let next = session(&*store, "a").await;
    let refused = store.heartbeat(&s, TTL).await;
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    store
        .heartbeat(&next, TTL)
        .await
        .expect("the new session works");
}

pub async fn fence_requires_a_held_slot(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(&*store, "a").await;
    let refused = store.fence(&s, TTL).await;
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    enqueue(&*store, &s, now_millis() - 1000).await;
    store.try_acquire_slot(&s).await.expect("acquire").slot();
    assert_eq!(store.fence(&s, TTL).await.expect("fence"), 0);
    store.unlock(&node("a"), "test").await.expect("unlock");
    let refused = store.fence(&s, TTL).await;
    assert!(
        matches!(refused, Err(Error::Fenced { .. })),
        "after losing the slot the fence refuses: {refused:?}"
    );
}

pub async fn a_fenced_transition_needs_the_slot_and_the_session(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let open = || {
        Transition::new(NodeState::Queued, NodeState::Draining)
            .process(Some(Process::Reboot))
            .window(WindowChange::Open)
    };
    let a = session(&*store, "a").await;
    let b = session(&*store, "b").await;
    enqueue(&*store, &a, now_millis() - 2000).await;
    enqueue(&*store, &b, now_millis() - 1000).await;
    assert_eq!(
        store.try_acquire_slot(&a).await.expect("acquire").slot(),
        Some(0)
    );
    let refused = store.fenced_transition(&b, open(), TTL).await;
    assert!(
        matches!(refused, Err(Error::Fenced { .. })),
        "a node without a slot is refused: {refused:?}"
    );
    let opened = store
        .fenced_transition(&a, open(), TTL)
        .await
        .expect("the holder's fenced transition");
    assert_eq!((opened.state, opened.slot), (NodeState::Draining, Some(0)));
    let superseding = session(&*store, "a").await;
    let refused = store
        .fenced_transition(
            &a,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
            TTL,
        )
        .await;
    assert!(
        matches!(refused, Err(Error::Fenced { .. })),
        "a superseded session is refused: {refused:?}"
    );
    let moved = store
        .fenced_transition(
            &superseding,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
            TTL,
        )
        .await
        .expect("the current session re-adopts the slot and goes on");
    assert_eq!((moved.state, moved.slot), (NodeState::Maintaining, Some(0)));
}

pub async fn transition_is_compare_and_swap(store: Arc<dyn Store>) {
    let s = session(&*store, "a").await;
    let refused = store
        .transition(&s, Transition::new(NodeState::Queued, NodeState::Draining))
        .await;
    match refused {
        Err(Error::Refused(rota_core::RecordError::Conflict {
            expected, actual, ..
        })) => {
            assert_eq!(expected, NodeState::Queued);
            assert_eq!(actual, NodeState::Idle);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
}
