//! A blocked node: its reason written once per change and fenced, its place in the queue kept
//! without holding the queue up.

use std::sync::Arc;

use rota_core::NodeState;

use super::{enqueue, node, session};
use crate::error::Error;
use crate::model::{Acquire, Blocked, Transition, now_millis};
use crate::store::{Store, StoreExt};

pub async fn a_blocked_reason_is_written_once_per_change_and_fenced(store: Arc<dyn Store>) {
    let s = session(&*store, "a").await;
    let read = || async { store.node(&node("a")).await.expect("node").expect("record") };
    assert_eq!(read().await.blocked, None, "a new node is not blocked");
    assert!(
        !store.set_blocked(&s, None).await.expect("clear"),
        "clearing a reason that is not there writes nothing"
    );
    let pod = Blocked {
        reason: "pod kube-system/backup-0 matches app=backup".into(),
        since: 1_000,
    };
    assert!(store.set_blocked(&s, Some(&pod)).await.expect("block"));
    assert_eq!(read().await.blocked, Some(pod.clone()));
    let later = Blocked {
        since: 9_000,
        ..pod.clone()
    };
    assert!(
        !store
            .set_blocked(&s, Some(&later))
            .await
            .expect("same reason"),
        "the same reason again writes nothing"
    );
    assert_eq!(
        read().await.blocked,
        Some(pod.clone()),
        "and keeps its since"
    );
    let alert = Blocked {
        reason: "alerts firing: Watchdog".into(),
        since: 10_000,
    };
    assert!(
        store
            .set_blocked(&s, Some(&alert))
            .await
            .expect("new reason")
    );
    assert_eq!(read().await.blocked, Some(alert.clone()));
    assert!(
        store
            .nodes()
            .await
            .expect("nodes")
            .iter()
            .any(|n| n.blocked == Some(alert.clone())),
        "every node listing shows it"
    );
    let queued = store
        .transition(&s, Transition::new(NodeState::Idle, NodeState::Queued))
        .await
        .expect("a transition of the blocked node");
    assert_eq!(
        queued.blocked,
        Some(alert.clone()),
        "a transition's record shows it"
    );
    let new = session(&*store, "a").await;
    let refused = store.set_blocked(&s, None).await;
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    assert_eq!(
        read().await.blocked,
        Some(alert),
        "the refused write left it"
    );
    assert!(store.set_blocked(&new, None).await.expect("unblock"));
    assert_eq!(read().await.blocked, None);
}

pub async fn a_blocked_node_keeps_its_place_without_holding_the_queue_up(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let a = session(&*store, "a").await;
    let b = session(&*store, "b").await;
    let now = now_millis();
    enqueue(&*store, &a, now - 2000).await;
    enqueue(&*store, &b, now - 1000).await;
    assert!(
        matches!(
            store.try_acquire_slot(&b).await.expect("acquire"),
            Acquire::Wait { .. }
        ),
        "b waits behind a"
    );
    let blocked = Blocked {
        reason: "alerts firing: Watchdog".into(),
        since: now,
    };
    assert!(
        store
            .set_blocked(&a, Some(&blocked))
            .await
            .expect("block a")
    );
    assert_eq!(
        store.try_acquire_slot(&b).await.expect("acquire").slot(),
        Some(0),
        "a blocked node does not hold the queue up"
    );
    assert_eq!(
        store
            .node(&node("a"))
            .await
            .expect("node")
            .expect("a")
            .queued_at,
        Some(now - 2000),
        "a keeps its place"
    );
}

/// In a store that decides grants when asked, a node that becomes blocked wakes the waiters
/// behind it: one of them may take its turn.
pub async fn blocking_a_node_wakes_the_waiters_behind_it(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let a = session(&*store, "a").await;
    let b = session(&*store, "b").await;
    let now = now_millis();
    enqueue(&*store, &a, now - 2000).await;
    enqueue(&*store, &b, now - 1000).await;
    assert_eq!(
        store.try_acquire_slot(&b).await.expect("acquire").slot(),
        None
    );
    let changes = *store.changes().borrow();
    let blocked = Blocked {
        reason: "alerts firing: Watchdog".into(),
        since: now,
    };
    assert!(
        store
            .set_blocked(&a, Some(&blocked))
            .await
            .expect("block a")
    );
    assert!(
        *store.changes().borrow() > changes,
        "blocking a wakes the waiters behind it"
    );
}
