//! Slots: never more holders than the concurrency, granted in queue order, kept across an
//! agent's restart, and the change counter that wakes the waiters.

use std::sync::Arc;
use std::time::Duration;

use rota_core::NodeState;

use super::{TTL, enqueue, finish_window, node, open_window, session};
use crate::model::{Acquire, Session, Transition, now_millis};
use crate::store::{Store, StoreExt};

pub async fn slot_limit_is_never_exceeded(store: Arc<dyn Store>) {
    store.set_concurrency(2).await.expect("set concurrency");
    let now = now_millis();
    let mut granted = Vec::new();
    for i in 0..5 {
        let s = session(&*store, &format!("node-{i}")).await;
        enqueue(&*store, &s, now - 1000).await;
        if let Some(slot) = store.try_acquire_slot(&s).await.expect("acquire").slot() {
            granted.push(slot);
        }
    }
    granted.sort_unstable();
    assert_eq!(granted, vec![0, 1], "exactly two distinct slots granted");
    assert_eq!(store.slot_holders().await.expect("holders").len(), 2);
}

pub async fn holder_readopts_its_slot_after_restart(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let first = session(&*store, "a").await;
    enqueue(&*store, &first, now_millis() - 1000).await;
    let slot = store
        .try_acquire_slot(&first)
        .await
        .expect("acquire")
        .slot();
    assert_eq!(slot, Some(0));
    open_window(&*store, &first).await;

    let restarted = session(&*store, "a").await;
    assert_eq!(
        store
            .try_acquire_slot(&restarted)
            .await
            .expect("re-adopt")
            .slot(),
        Some(0),
        "the restarted agent gets its own slot back"
    );
    let record = store.node(&node("a")).await.expect("read").expect("exists");
    assert_eq!(record.state, NodeState::Draining, "state survives restart");
    assert_eq!(record.slot, Some(0));

    let other = session(&*store, "b").await;
    enqueue(&*store, &other, now_millis() - 500).await;
    assert_eq!(
        store
            .try_acquire_slot(&other)
            .await
            .expect("acquire")
            .slot(),
        None
    );
}

pub async fn slots_are_granted_in_queue_order(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let now = now_millis();
    let a = session(&*store, "a").await;
    let b = session(&*store, "b").await;
    let c = session(&*store, "c").await;
    enqueue(&*store, &c, now - 1000).await;
    enqueue(&*store, &a, now - 3000).await;
    enqueue(&*store, &b, now - 2000).await;
    assert_eq!(store.try_acquire_slot(&c).await.expect("c").slot(), None);
    assert_eq!(store.try_acquire_slot(&b).await.expect("b").slot(), None);
    assert_eq!(
        store.try_acquire_slot(&a).await.expect("a"),
        Acquire::Granted(0)
    );
    open_window(&*store, &a).await;
    finish_window(&*store, &a).await;
    assert_eq!(
        store.try_acquire_slot(&c).await.expect("c").slot(),
        None,
        "b first"
    );
    assert_eq!(store.try_acquire_slot(&b).await.expect("b").slot(), Some(0));

    let future = session(&*store, "d").await;
    enqueue(&*store, &future, now + 3_600_000).await;
    open_window(&*store, &b).await;
    finish_window(&*store, &b).await;
    assert_eq!(
        store.try_acquire_slot(&future).await.expect("d").slot(),
        None,
        "a node still in backoff does not take a slot"
    );
    assert_eq!(store.try_acquire_slot(&c).await.expect("c").slot(), Some(0));
}

/// A store that decides grants when asked tells each waiter how many handoffs must pass before
/// its turn, so that it sleeps through the others.
pub async fn a_waiter_is_told_how_many_handoffs_to_wait_for(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let now = now_millis();
    let a = session(&*store, "a").await;
    let b = session(&*store, "b").await;
    let c = session(&*store, "c").await;
    enqueue(&*store, &c, now - 1000).await;
    enqueue(&*store, &a, now - 3000).await;
    enqueue(&*store, &b, now - 2000).await;
    // c is two places back: two handoffs (a's, then b's release) must pass before its turn.
    assert_eq!(
        store.try_acquire_slot(&c).await.expect("c"),
        Acquire::Wait { changes: 2 }
    );
    assert_eq!(
        store.try_acquire_slot(&b).await.expect("b"),
        Acquire::Wait { changes: 1 }
    );
    assert_eq!(
        store.try_acquire_slot(&a).await.expect("a"),
        Acquire::Granted(0)
    );
}

/// A larger concurrency lets waiters on at once, each on a slot of its own below it; a smaller
/// one takes no slot away, and no new grant comes until the holders are fewer than it.
pub async fn a_new_concurrency_is_obeyed_at_once(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let now = now_millis();
    let mut nodes = Vec::new();
    for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let s = session(&*store, name).await;
        enqueue(
            &*store,
            &s,
            now - 4000 + i64::try_from(i).expect("small") * 1000,
        )
        .await;
        nodes.push(s);
    }
    let [a, b, c, d] = &nodes[..] else {
        unreachable!("four sessions")
    };
    assert_eq!(
        store.try_acquire_slot(a).await.expect("a"),
        Acquire::Granted(0)
    );
    assert_eq!(store.try_acquire_slot(b).await.expect("b").slot(), None);

    store.set_concurrency(3).await.expect("raise");
    let mut granted = vec![0];
    for s in [b, c] {
        let slot = store.try_acquire_slot(s).await.expect("grant").slot();
        granted.push(slot.expect("a raised concurrency lets the next waiters on"));
    }
    granted.sort_unstable();
    assert_eq!(
        granted,
        vec![0, 1, 2],
        "a slot of its own each, below the concurrency"
    );
    assert_eq!(
        store.try_acquire_slot(d).await.expect("d").slot(),
        None,
        "three slots, three holders"
    );

    store.set_concurrency(1).await.expect("lower");
    assert_eq!(
        store.slot_holders().await.expect("holders").len(),
        3,
        "a smaller concurrency takes no slot away"
    );
    for s in [a, b] {
        open_window(&*store, s).await;
        finish_window(&*store, s).await;
        assert_eq!(
            store.try_acquire_slot(d).await.expect("d").slot(),
            None,
            "no grant while the holders are as many as the concurrency"
        );
    }
    open_window(&*store, c).await;
    finish_window(&*store, c).await;
    assert_eq!(
        store.try_acquire_slot(d).await.expect("d"),
        Acquire::Granted(0)
    );
    let holders = store.slot_holders().await.expect("holders");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].node, d.node);
}

/// Asks for `s` until the answer is `expected`, for up to 15 s: a store may keep a "wait"
/// answer until the changes it named happen or a few seconds pass, and a session that ran out
/// moves no change counter.
async fn eventually_answers(store: &dyn Store, s: &Session, expected: Acquire, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let answer = store.try_acquire_slot(s).await.expect("ask");
        if answer == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: still {answer:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A queued node whose agent is gone (its session closed or run out) does not hold the queue
/// up; a new session, or a heartbeat in time, keeps it in its place.
pub async fn a_queued_node_without_a_live_session_does_not_hold_the_queue_up(
    store: Arc<dyn Store>,
) {
    store.set_concurrency(1).await.expect("set concurrency");
    let now = now_millis();
    let holder = session(&*store, "h").await;
    enqueue(&*store, &holder, now - 3000).await;
    assert_eq!(
        store.try_acquire_slot(&holder).await.expect("h"),
        Acquire::Granted(0)
    );
    let a = session(&*store, "a").await;
    enqueue(&*store, &a, now - 2000).await;
    let b = session(&*store, "b").await;
    enqueue(&*store, &b, now - 1000).await;
    let behind_a = Acquire::Wait { changes: 2 };
    let alone = Acquire::Wait { changes: 1 };
    assert_eq!(store.try_acquire_slot(&b).await.expect("b"), behind_a);

    store.close_session(&a).await.expect("close");
    eventually_answers(
        &*store,
        &b,
        alone,
        "a closed session still holds the queue up",
    )
    .await;
    let a = session(&*store, "a").await;
    eventually_answers(&*store, &b, behind_a, "a new session does not put a back").await;

    let short = Duration::from_millis(1500);
    let a = store.open_session(&a.node, short).await.expect("short");
    store.heartbeat(&a, TTL).await.expect("heartbeat");
    tokio::time::sleep(short + Duration::from_millis(500)).await;
    assert_eq!(
        store.try_acquire_slot(&b).await.expect("b"),
        behind_a,
        "a heartbeat keeps a in its place"
    );
    store.open_session(&a.node, short).await.expect("short");
    tokio::time::sleep(short + Duration::from_millis(500)).await;
    eventually_answers(
        &*store,
        &b,
        alone,
        "a session that ran out still holds the queue up",
    )
    .await;
}

pub async fn a_release_moves_changes_by_one_and_a_grant_not_at_all(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(&*store, "a").await;
    let changes = store.changes();
    let before = *changes.borrow();
    enqueue(&*store, &s, now_millis() - 1000).await;
    store.try_acquire_slot(&s).await.expect("acquire");
    open_window(&*store, &s).await;
    assert_eq!(
        *changes.borrow(),
        before,
        "taking a slot lets no other waiter on"
    );
    finish_window(&*store, &s).await;
    assert_eq!(*changes.borrow(), before + 1, "a release is one change");
}

/// A queued node that gives back a slot granted just before a restart (its requests withdrawn
/// since) both frees the slot and leaves the queue: one change, as for any release, so that a
/// waiter told to sleep through n changes is not woken early.
pub async fn giving_back_an_unused_grant_is_one_change(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(&*store, "a").await;
    enqueue(&*store, &s, now_millis() - 1000).await;
    let granted = store.try_acquire_slot(&s).await.expect("acquire");
    assert!(matches!(granted, Acquire::Granted(_)), "{granted:?}");
    let changes = store.changes();
    let before = *changes.borrow();
    let decision = rota_core::Lifecycle::idle()
        .apply(&rota_core::Event::Requested { eligible_at: 0 })
        .and_then(|queued| {
            queued
                .next
                .apply(&rota_core::Event::Canceled { granted: true })
        })
        .expect("a queued node may cancel");
    let idle = store
        .transition(&s, Transition::of(decision))
        .await
        .expect("give the grant back");
    assert_eq!(idle.state, NodeState::Idle);
    assert_eq!(idle.slot, None, "the slot went back");
    assert_eq!(*changes.borrow(), before + 1, "one change");
}
