//! The store conformance suite: one set of tests that every [`Store`] must pass. A store's test
//! file instantiates it with [`conformance_tests!`](crate::conformance_tests), giving a function
//! that returns a fresh, empty store; the same test bodies then run against every substrate.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rota_core::{BackoffPolicy, HistoryEvent, NodeName, NodeState, ProcedureSpec, Process};

use crate::error::Error;
use crate::model::{
    Acquire, Blocked, HistoryFilter, NodeFields, NodeRecord, Outcome, RequestState, Session,
    Transition, WindowChange, now_millis,
};
use crate::store::Store;

const TTL: Duration = Duration::from_secs(30);
const STRESS_TTL: Duration = Duration::from_secs(3600);

/// Runs every conformance case against stores made by `$make` (an async fn returning
/// `Arc<dyn Store>`), one `#[tokio::test]` per case.
///
/// `conformance_tests!(skippable $make)` takes an async fn returning
/// `Option<Arc<dyn Store>>` instead: `None` ends a case at once, for substrates whose server the
/// environment was explicitly told not to provide (the maker decides, and says why).
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@list required $make);
    };
    (skippable $make:path) => {
        $crate::conformance_tests!(@list skippable $make);
    };
    (@list $mode:ident $make:path) => {
        $crate::conformance_tests!(@cases $mode $make;
            slot_limit_is_never_exceeded,
            holder_readopts_its_slot_after_restart,
            superseded_session_is_fenced,
            expired_session_is_fenced_and_told_apart_from_a_superseded_one,
            fence_requires_a_held_slot,
            a_fenced_transition_needs_the_slot_and_the_session,
            transition_is_compare_and_swap,
            open_request_is_unique_per_process,
            a_transition_records_its_requests_only_when_written,
            racing_requests_create_one_open_request,
            backoff_follows_the_policy_and_success_clears_it,
            history_is_ordered_and_filterable,
            slots_are_granted_in_queue_order,
            a_new_concurrency_is_obeyed_at_once,
            a_queued_node_without_a_live_session_does_not_hold_the_queue_up,
            a_release_moves_changes_by_one_and_a_grant_not_at_all,
            unlock_frees_a_failed_node,
            retry_resumes_a_failed_node,
            drain_failure_releases_slot_and_requeues_requests,
            a_postponed_window_requeues_its_work_without_backoff,
            resume_starts_a_new_rollout,
            procedures_are_stored_once_and_immutable,
            a_procedure_is_requested_once_per_node_ever,
            completing_a_request_keeps_the_window_open,
            a_failed_request_stays_active_and_backs_off,
            pause_is_recorded_and_resume_wakes_every_waiter,
            a_blocked_reason_is_written_once_per_change_and_fenced,
            a_blocked_node_keeps_its_place_without_holding_the_queue_up,
            an_operator_requests_and_cancels_without_a_session,
            concurrent_stress_never_double_grants_or_loses_history,
            sixty_four_sessions_never_double_grant_or_lose_history,
        );
    };
    (@cases required $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let store = $make().await;
                $crate::conformance::$case(store).await;
            }
        )*
    };
    (@cases skippable $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let Some(store) = $make().await else {
                    return;
                };
                $crate::conformance::$case(store).await;
            }
        )*
    };
}

fn node(name: &str) -> NodeName {
    NodeName::new(name).expect("valid node name")
}

async fn session(store: &dyn Store, name: &str) -> Session {
    store
        .open_session(&node(name), TTL)
        .await
        .expect("open session")
}

/// Requests a reboot and enters the queue at `queued_at`.
async fn enqueue(store: &dyn Store, s: &Session, queued_at: i64) -> NodeRecord {
    store
        .add_request(s, &Process::Reboot, "conformance")
        .await
        .expect("add request");
    store
        .transition(
            s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(queued_at),
            }),
        )
        .await
        .expect("enqueue")
}

/// Takes the slot the node was granted and opens its window (queued → draining).
async fn open_window(store: &dyn Store, s: &Session) -> NodeRecord {
    store
        .transition(
            s,
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(Some(Process::Reboot))
                .window(WindowChange::Open)
                .fields(NodeFields {
                    cordoned_by_rota: Some(true),
                    ..NodeFields::default()
                }),
        )
        .await
        .expect("open window")
}

/// Walks an open window through maintenance to a successful finish.
async fn finish_window(store: &dyn Store, s: &Session) -> NodeRecord {
    for (from, to) in [
        (NodeState::Draining, NodeState::Maintaining),
        (NodeState::Maintaining, NodeState::Verifying),
    ] {
        store
            .transition(s, Transition::new(from, to))
            .await
            .expect("step");
    }
    store
        .transition(
            s,
            Transition::new(NodeState::Verifying, NodeState::Idle).window(WindowChange::Finish),
        )
        .await
        .expect("finish window")
}

async fn fail_closed(store: &dyn Store, s: &Session) -> NodeRecord {
    store
        .transition(
            s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("drained");
    store
        .transition(
            s,
            Transition::new(NodeState::Maintaining, NodeState::Failed).window(WindowChange::Fail {
                cause: "script exited 3".into(),
                policy: policy(),
                keep_slot: true,
            }),
        )
        .await
        .expect("fail")
}

fn policy() -> BackoffPolicy {
    BackoffPolicy {
        initial: Duration::from_secs(1),
        maximum: Duration::from_secs(5),
        exponent: 2.0,
    }
}

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
        Err(Error::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!(expected, NodeState::Queued);
            assert_eq!(actual, "idle");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
}

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
        matches!(refused, Err(Error::Conflict { .. })),
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

pub async fn backoff_follows_the_policy_and_success_clears_it(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(&*store, "a").await;
    let mut seen = Vec::new();
    for _ in 0..5 {
        enqueue(&*store, &s, now_millis() - 1000).await;
        store.try_acquire_slot(&s).await.expect("acquire").slot();
        open_window(&*store, &s).await;
        let before = now_millis();
        store
            .transition(
                &s,
                Transition::new(NodeState::Draining, NodeState::Queued).window(
                    WindowChange::Fail {
                        cause: "drain timed out".into(),
                        policy: policy(),
                        keep_slot: false,
                    },
                ),
            )
            .await
            .expect("drain failed");
        let backoffs = store.backoffs(&node("a")).await.expect("backoffs");
        assert_eq!(backoffs.len(), 1);
        let b = &backoffs[0];
        assert_eq!(b.cause, "drain timed out");
        let secs = b.last_interval.as_secs();
        assert!(
            b.until >= before + i64::try_from(secs * 1000).expect("small") - 5,
            "until = now + interval"
        );
        seen.push(secs);
        store
            .transition(&s, Transition::new(NodeState::Queued, NodeState::Idle))
            .await
            .expect("leave queue");
    }
    assert_eq!(seen, vec![1, 2, 4, 5, 5]);

    enqueue(&*store, &s, now_millis() - 1000).await;
    store.try_acquire_slot(&s).await.expect("acquire").slot();
    open_window(&*store, &s).await;
    finish_window(&*store, &s).await;
    assert!(
        store
            .backoffs(&node("a"))
            .await
            .expect("backoffs")
            .is_empty(),
        "a success clears the backoff"
    );
}

pub async fn history_is_ordered_and_filterable(store: Arc<dyn Store>) {
    store.set_concurrency(2).await.expect("set concurrency");
    let a = session(&*store, "a").await;
    let b = session(&*store, "b").await;
    enqueue(&*store, &a, now_millis() - 2000).await;
    enqueue(&*store, &b, now_millis() - 1000).await;
    assert!(
        store
            .try_acquire_slot(&a)
            .await
            .expect("a")
            .slot()
            .is_some()
    );
    assert!(
        store
            .try_acquire_slot(&b)
            .await
            .expect("b")
            .slot()
            .is_some()
    );
    open_window(&*store, &a).await;
    open_window(&*store, &b).await;
    finish_window(&*store, &b).await;
    fail_closed(&*store, &a).await;

    let all = store
        .history(&HistoryFilter::default())
        .await
        .expect("history");
    let events: Vec<(String, HistoryEvent)> =
        all.iter().map(|e| (e.node.to_string(), e.event)).collect();
    assert_eq!(
        events,
        vec![
            ("a".into(), HistoryEvent::Started),
            ("b".into(), HistoryEvent::Started),
            ("b".into(), HistoryEvent::Finished),
            ("a".into(), HistoryEvent::Failed),
        ]
    );
    assert!(
        all.windows(2)
            .all(|w| w[0].id < w[1].id && w[0].at <= w[1].at)
    );
    assert!(all[2].released, "the finish gave the slot back");
    assert!(!all[3].released, "a failed maintenance keeps its slot");
    assert_eq!(all[3].cause.as_deref(), Some("script exited 3"));

    let only_a = store
        .history(&HistoryFilter {
            node: Some(node("a")),
            ..HistoryFilter::default()
        })
        .await
        .expect("filter by node");
    assert_eq!(only_a.len(), 2);
    let failed = store
        .history(&HistoryFilter {
            event: Some(HistoryEvent::Failed),
            ..HistoryFilter::default()
        })
        .await
        .expect("filter by event");
    assert_eq!(failed.len(), 1);
    let none = store
        .history(&HistoryFilter {
            since: Some(now_millis() + 60_000),
            ..HistoryFilter::default()
        })
        .await
        .expect("filter by time");
    assert!(none.is_empty());
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

pub async fn unlock_frees_a_failed_node(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let refused = store.unlock(&node("nobody"), "x").await;
    assert!(
        matches!(refused, Err(Error::NoSuchNode { .. })),
        "{refused:?}"
    );
    let s = session(&*store, "a").await;
    let refused = store.unlock(&node("a"), "x").await;
    assert!(
        matches!(refused, Err(Error::NotAllowed { .. })),
        "{refused:?}"
    );

    enqueue(&*store, &s, now_millis() - 1000).await;
    store.try_acquire_slot(&s).await.expect("acquire").slot();
    open_window(&*store, &s).await;
    fail_closed(&*store, &s).await;
    assert_eq!(store.slot_holders().await.expect("holders").len(), 1);

    let record = store
        .unlock(&node("a"), "replaced the disk")
        .await
        .expect("unlock");
    assert_eq!(record.state, NodeState::Idle);
    assert_eq!(record.slot, None);
    assert!(
        record.cordoned_by_rota,
        "the agent still has to uncordon what it cordoned"
    );
    assert!(store.slot_holders().await.expect("holders").is_empty());
    let last = store
        .history(&HistoryFilter::default())
        .await
        .expect("history")
        .pop()
        .expect("an entry");
    assert_eq!(last.event, HistoryEvent::Canceled);
    assert!(last.released);
    assert!(
        last.cause
            .as_deref()
            .is_some_and(|c| c.contains("replaced the disk"))
    );
    assert!(
        store
            .open_requests(&node("a"))
            .await
            .expect("open")
            .is_empty()
    );
}

pub async fn retry_resumes_a_failed_node(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(&*store, "a").await;
    let refused = store.retry(&node("a")).await;
    assert!(
        matches!(refused, Err(Error::NotAllowed { .. })),
        "{refused:?}"
    );
    enqueue(&*store, &s, now_millis() - 1000).await;
    store.try_acquire_slot(&s).await.expect("acquire").slot();
    open_window(&*store, &s).await;
    fail_closed(&*store, &s).await;
    let record = store.retry(&node("a")).await.expect("retry");
    assert_eq!(record.state, NodeState::Maintaining);
    assert_eq!(record.slot, Some(0), "a retried node keeps its slot");
    assert_eq!(
        store.open_requests(&node("a")).await.expect("open").len(),
        1,
        "its work is still open"
    );
}

/// A procedure for node `a` only: stores on a shared cluster see each other's procedures, and
/// one for every node would be run by other tests' agents.
fn only_on_a(mut spec: ProcedureSpec) -> ProcedureSpec {
    spec.nodes = vec![node("a")];
    spec
}

pub async fn procedures_are_stored_once_and_immutable(store: Arc<dyn Store>) {
    let mut first = only_on_a(ProcedureSpec::new(
        "kernel",
        "apt-get install -y linux-image",
    ));
    first.priority = "10".parse().expect("priority");
    let (record, created) = store.submit_procedure(&first).await.expect("submit");
    assert!(created);
    assert_eq!(record.spec, first);
    let (again, created) = store.submit_procedure(&first).await.expect("submit again");
    assert!(!created, "the same spec again changes nothing");
    assert_eq!(again.submitted_at, record.submitted_at);
    let mut changed = first.clone();
    changed.script = Some("rm -rf /".into());
    let refused = store.submit_procedure(&changed).await;
    assert!(
        matches!(&refused, Err(Error::ProcedureConflict { name }) if name == "kernel"),
        "{refused:?}"
    );
    let invalid = ProcedureSpec::new("Not_A_Label", "true");
    let refused = store.submit_procedure(&invalid).await;
    assert!(matches!(refused, Err(Error::Procedure(_))), "{refused:?}");
    store
        .submit_procedure(&only_on_a(ProcedureSpec::new("firmware", "true")))
        .await
        .expect("submit another");
    let names: Vec<String> = store
        .procedures()
        .await
        .expect("procedures")
        .into_iter()
        .map(|p| p.spec.name)
        .collect();
    assert_eq!(names, ["kernel", "firmware"], "in submission order");
    assert_eq!(
        store.procedures().await.expect("procedures")[0].spec,
        first,
        "read back exactly as submitted"
    );
}

/// A procedure's request is unique per node in every state: once done (or canceled), adding
/// it again returns the old request and creates nothing, so a restart never runs it again.
pub async fn a_procedure_is_requested_once_per_node_ever(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let mop = Process::mop("kernel").expect("process");
    let s = session(&*store, "a").await;
    let (request, created) = store.add_request(&s, &mop, "procedure").await.expect("add");
    assert!(created);
    store
        .transition(
            &s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("queue");
    store.try_acquire_slot(&s).await.expect("acquire");
    open_window(&*store, &s).await;
    finish_window(&*store, &s).await;
    let s = session(&*store, "a").await;
    let (again, created) = store
        .add_request(&s, &mop, "procedure")
        .await
        .expect("again");
    assert!(!created, "a finished procedure is not requested again");
    assert_eq!(again.id, request.id);
    assert_eq!(again.state, RequestState::Done);
    assert!(
        store
            .open_requests(&node("a"))
            .await
            .expect("open")
            .is_empty()
    );
    let other = session(&*store, "b").await;
    let (_, created) = store
        .add_request(&other, &mop, "procedure")
        .await
        .expect("b");
    assert!(created, "another node gets its own request");
    let (_, created) = store
        .add_request(&s, &Process::Reboot, "sentinel")
        .await
        .expect("reboot");
    assert!(created);
    store
        .cancel_request(&s, &Process::Reboot)
        .await
        .expect("cancel");
    let (_, created) = store
        .add_request(&s, &Process::Reboot, "sentinel")
        .await
        .expect("reboot again");
    assert!(
        created,
        "other processes may be requested again once closed"
    );
}

/// Opens a window whose work is two procedures; returns the session.
async fn window_with_two_procedures(store: &dyn Store) -> (Session, Process, Process) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(store, "a").await;
    let first = Process::mop("first").expect("process");
    let second = Process::mop("second").expect("process");
    for process in [&first, &second] {
        store
            .add_request(&s, process, "procedure")
            .await
            .expect("add");
    }
    store
        .transition(
            &s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("queue");
    store.try_acquire_slot(&s).await.expect("acquire");
    open_window(store, &s).await;
    store
        .transition(
            &s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("drained");
    (s, first, second)
}

pub async fn completing_a_request_keeps_the_window_open(store: Arc<dyn Store>) {
    let (s, first, second) = window_with_two_procedures(&*store).await;
    let changes = *store.changes().borrow();
    let done = store
        .complete_request(
            &s,
            &first,
            &Outcome::Succeeded {
                detail: Some("stdout: ok".into()),
            },
        )
        .await
        .expect("complete");
    assert_eq!(done.state, RequestState::Done);
    assert_eq!(done.process, first);
    let open = store.open_requests(&node("a")).await.expect("open");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].process, second);
    let record = store.node(&node("a")).await.expect("read").expect("node");
    assert_eq!(record.state, NodeState::Maintaining);
    assert_eq!(record.slot, Some(0), "the window keeps its slot");
    assert_eq!(*store.changes().borrow(), changes, "nobody is woken");
    let history = store
        .history(&HistoryFilter {
            process: Some(first.clone()),
            event: Some(HistoryEvent::Finished),
            ..HistoryFilter::default()
        })
        .await
        .expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].cause.as_deref(), Some("stdout: ok"));
    assert_eq!(history[0].slot, Some(0));
    assert!(!history[0].released);
    let again = store
        .complete_request(&s, &first, &Outcome::Succeeded { detail: None })
        .await;
    assert!(matches!(again, Err(Error::NotActive { .. })), "{again:?}");
    let stale = session(&*store, "a").await;
    let fenced = store
        .complete_request(&s, &second, &Outcome::Succeeded { detail: None })
        .await;
    assert!(matches!(fenced, Err(Error::Fenced { .. })), "{fenced:?}");
    store
        .complete_request(&stale, &second, &Outcome::Succeeded { detail: None })
        .await
        .expect("the current session completes");
    for (from, to, window) in [
        (
            NodeState::Maintaining,
            NodeState::Verifying,
            WindowChange::None,
        ),
        (NodeState::Verifying, NodeState::Idle, WindowChange::Finish),
    ] {
        store
            .transition(&stale, Transition::new(from, to).window(window))
            .await
            .expect("close the window");
    }
    let history = store
        .history(&HistoryFilter::default())
        .await
        .expect("history");
    let last = history.last().expect("entries");
    assert_eq!(
        last.event,
        HistoryEvent::Released,
        "a window with no request left records the release on its own: {history:?}"
    );
    assert!(last.released);
    let finished = history
        .iter()
        .filter(|h| h.event == HistoryEvent::Finished)
        .count();
    assert_eq!(
        finished, 2,
        "one `finished` per procedure, none for the window"
    );
}

pub async fn a_failed_request_stays_active_and_backs_off(store: Arc<dyn Store>) {
    let (s, first, second) = window_with_two_procedures(&*store).await;
    for expected in [1, 2] {
        let failed = store
            .complete_request(
                &s,
                &second,
                &Outcome::Failed {
                    cause: "exit 3".into(),
                    policy: policy(),
                },
            )
            .await
            .expect("fail");
        assert_eq!(failed.state, RequestState::Active, "it stays for a retry");
        let record = store.node(&node("a")).await.expect("read").expect("node");
        assert_eq!(record.state, NodeState::Failed, "the node fails closed");
        assert_eq!(record.slot, Some(0), "and keeps its slot");
        let refused = store
            .complete_request(
                &s,
                &second,
                &Outcome::Failed {
                    cause: "again".into(),
                    policy: policy(),
                },
            )
            .await;
        assert!(
            matches!(refused, Err(Error::Conflict { .. })),
            "{refused:?}"
        );
        store.retry(&node("a")).await.expect("operator retries");
        let backoffs = store.backoffs(&node("a")).await.expect("backoffs");
        let backoff = backoffs
            .iter()
            .find(|b| b.process == second)
            .expect("a backoff for the failed procedure");
        assert_eq!(backoff.last_interval, Duration::from_secs(expected));
        assert!(backoffs.iter().all(|b| b.process != first));
    }
    let record = store.node(&node("a")).await.expect("read").expect("node");
    assert_eq!(record.last_result.as_deref(), Some("failed: exit 3"));
    assert_eq!(record.state, NodeState::Maintaining, "retried");
    let failures = store
        .history(&HistoryFilter {
            event: Some(HistoryEvent::Failed),
            ..HistoryFilter::default()
        })
        .await
        .expect("history");
    assert_eq!(failures.len(), 2);
    assert!(failures.iter().all(|h| h.process == second));
    store
        .complete_request(&s, &second, &Outcome::Succeeded { detail: None })
        .await
        .expect("succeeds on retry");
    assert!(
        store
            .backoffs(&node("a"))
            .await
            .expect("backoffs")
            .is_empty(),
        "success clears the backoff"
    );
}

pub async fn pause_is_recorded_and_resume_wakes_every_waiter(store: Arc<dyn Store>) {
    assert_eq!(store.paused().await.expect("paused"), None);
    assert_eq!(
        store.resume().await.expect("resume"),
        None,
        "nothing to lift"
    );
    let before = now_millis();
    let pause = store.pause("kernel CVE triage").await.expect("pause");
    assert_eq!(pause.reason, "kernel CVE triage");
    assert!(pause.since >= before - 5_000, "{pause:?}");
    assert_eq!(store.paused().await.expect("paused"), Some(pause.clone()));
    let again = store.pause("still triaging").await.expect("pause again");
    assert_eq!(
        store.paused().await.expect("paused").map(|p| p.reason),
        Some("still triaging".to_string())
    );
    let changes = *store.changes().borrow();
    let lifted = store.resume().await.expect("resume");
    assert_eq!(lifted, Some(again));
    assert_eq!(store.paused().await.expect("paused"), None);
    assert!(
        *store.changes().borrow() > changes.saturating_add(1000),
        "a resume wakes every waiter at once"
    );
}

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

pub async fn drain_failure_releases_slot_and_requeues_requests(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(&*store, "a").await;
    enqueue(&*store, &s, now_millis() - 1000).await;
    store.try_acquire_slot(&s).await.expect("acquire").slot();
    open_window(&*store, &s).await;
    let record = store
        .transition(
            &s,
            Transition::new(NodeState::Draining, NodeState::Queued).window(WindowChange::Fail {
                cause: "PodDisruptionBudget never allowed eviction".into(),
                policy: policy(),
                keep_slot: false,
            }),
        )
        .await
        .expect("drain failed");
    assert_eq!(record.slot, None);
    assert!(!record.cordoned_by_rota);
    let open = store.open_requests(&node("a")).await.expect("open");
    assert_eq!(open.len(), 1);
    assert_eq!(
        open[0].state,
        crate::RequestState::Pending,
        "nothing is lost"
    );
}

/// A maintenance window that closes mid-way: active requests go back to pending (a completed
/// one stays done), the slot goes back, no backoff, and one `postponed` entry per request.
pub async fn a_postponed_window_requeues_its_work_without_backoff(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(&*store, "a").await;
    let done = Process::mop("first").expect("process");
    store
        .add_request(&s, &done, "conformance")
        .await
        .expect("request");
    enqueue(&*store, &s, now_millis() - 1000).await;
    let slot = store.try_acquire_slot(&s).await.expect("acquire").slot();
    assert!(slot.is_some(), "the only node gets the slot");
    open_window(&*store, &s).await;
    store
        .transition(
            &s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("drained");
    store
        .complete_request(&s, &done, &Outcome::Succeeded { detail: None })
        .await
        .expect("one request done");
    let reason = "the maintenance window closed at 2026-11-29T04:00:00Z";
    let record = store
        .transition(
            &s,
            Transition::new(NodeState::Maintaining, NodeState::Queued)
                .window(WindowChange::Postpone {
                    reason: reason.into(),
                })
                .fields(NodeFields {
                    cordoned_by_rota: Some(false),
                    ..NodeFields::default()
                }),
        )
        .await
        .expect("postpone");
    assert_eq!(record.state, NodeState::Queued);
    assert_eq!(record.slot, None, "the slot went back");
    assert!(!record.cordoned_by_rota);
    assert_eq!(
        record.last_result.as_deref(),
        Some(format!("postponed: {reason}").as_str())
    );
    assert!(store.slot_holders().await.expect("holders").is_empty());
    assert!(
        store
            .backoffs(&node("a"))
            .await
            .expect("backoffs")
            .is_empty(),
        "a postponement is no failure"
    );
    let open = store.open_requests(&node("a")).await.expect("open");
    assert_eq!(
        open.iter()
            .map(|r| (r.process.clone(), r.state))
            .collect::<Vec<_>>(),
        [(Process::Reboot, RequestState::Pending)],
        "the reboot waits for the next window; the finished procedure stays done"
    );
    let postponed = store
        .history(&HistoryFilter {
            event: Some(HistoryEvent::Postponed),
            ..HistoryFilter::default()
        })
        .await
        .expect("history");
    assert_eq!(postponed.len(), 1, "{postponed:?}");
    assert_eq!(postponed[0].process, Process::Reboot);
    assert_eq!(postponed[0].cause.as_deref(), Some(reason));
    assert_eq!(postponed[0].slot, slot);
    assert!(postponed[0].released);
    assert!(
        store
            .history(&HistoryFilter {
                event: Some(HistoryEvent::Failed),
                ..HistoryFilter::default()
            })
            .await
            .expect("history")
            .is_empty()
    );

    // The next window opens the same request again, and another node can take the slot.
    let b = session(&*store, "b").await;
    enqueue(&*store, &b, now_millis() - 2000).await;
    assert!(
        store
            .try_acquire_slot(&b)
            .await
            .expect("acquire")
            .slot()
            .is_some(),
        "the released slot is free for the next node"
    );
}

/// Every resume records when the rollout began, paused or not; the latest one counts.
pub async fn resume_starts_a_new_rollout(store: Arc<dyn Store>) {
    assert_eq!(store.resumed_at().await.expect("resumed at"), None);
    store
        .pause("failure budget exhausted")
        .await
        .expect("pause");
    // Two pauses at once (two agents exhausting the budget together) both succeed.
    let (first, second) = tokio::join!(store.pause("budget one"), store.pause("budget two"));
    first.expect("first pause");
    second.expect("second pause");
    let before = now_millis();
    assert!(store.resume().await.expect("resume").is_some());
    let first = store
        .resumed_at()
        .await
        .expect("resumed at")
        .expect("recorded");
    assert!(
        (before - 5_000..=now_millis() + 5_000).contains(&first),
        "{first} near {before}"
    );
    assert_eq!(store.paused().await.expect("paused"), None);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.resume().await.expect("resume again"), None);
    let second = store
        .resumed_at()
        .await
        .expect("resumed at")
        .expect("recorded");
    assert!(second > first, "a later resume starts a later rollout");
}

/// Many sessions race for few slots; afterwards the counts must add up exactly.
pub async fn concurrent_stress_never_double_grants_or_loses_history(store: Arc<dyn Store>) {
    concurrent_stress_across(vec![store]).await;
}

/// The bar: 64 sessions working on the same rows at once.
pub async fn sixty_four_sessions_never_double_grant_or_lose_history(store: Arc<dyn Store>) {
    stress(vec![store], Stress::SIXTY_FOUR).await;
}

/// How many sessions race, how often each takes a turn, and for how many slots.
#[derive(Clone, Copy, Debug)]
pub struct Stress {
    pub nodes: usize,
    pub rounds: usize,
    pub concurrency: u32,
}

impl Stress {
    pub const DEFAULT: Stress = Stress {
        nodes: 24,
        rounds: 4,
        concurrency: 3,
    };
    pub const SIXTY_FOUR: Stress = Stress {
        nodes: 64,
        rounds: 3,
        concurrency: 4,
    };
}

/// The stress case with the nodes spread over several handles on one store (separate
/// connections, as separate agent processes would have).
pub async fn concurrent_stress_across(stores: Vec<Arc<dyn Store>>) {
    stress(stores, Stress::DEFAULT).await;
}

/// Many sessions, spread over `stores` (handles on one store), race for few slots; afterwards
/// the counts must add up exactly: no double grant, no lost history row.
pub async fn stress(stores: Vec<Arc<dyn Store>>, shape: Stress) {
    let Stress {
        nodes,
        rounds,
        concurrency,
    } = shape;
    let store = stores[0].clone();
    store
        .set_concurrency(concurrency)
        .await
        .expect("set concurrency");
    let holding = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..nodes {
        let store = stores[i % stores.len()].clone();
        let holding = holding.clone();
        let peak = peak.clone();
        tasks.push(tokio::spawn(async move {
            // Sessions that outlive the whole run: this case is about exclusion, and it sends
            // no heartbeats, so a slow substrate under load must not expire them midway.
            let s = store
                .open_session(&node(&format!("stress-{i:02}")), STRESS_TTL)
                .await
                .expect("open session");
            for _ in 0..rounds {
                enqueue(&*store, &s, now_millis()).await;
                let mut changes = store.changes();
                loop {
                    if store
                        .try_acquire_slot(&s)
                        .await
                        .expect("acquire")
                        .slot()
                        .is_some()
                    {
                        break;
                    }
                    let _ =
                        tokio::time::timeout(Duration::from_millis(50), changes.changed()).await;
                }
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                open_window(&*store, &s).await;
                tokio::task::yield_now().await;
                holding.fetch_sub(1, Ordering::SeqCst);
                finish_window(&*store, &s).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert!(peak.load(Ordering::SeqCst) <= concurrency as usize);
    assert!(store.slot_holders().await.expect("holders").is_empty());

    let history = store
        .history(&HistoryFilter::default())
        .await
        .expect("history");
    let mut per_node: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for e in &history {
        let entry = per_node.entry(e.node.to_string()).or_default();
        match e.event {
            HistoryEvent::Started => entry.0 += 1,
            HistoryEvent::Finished => entry.1 += 1,
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(per_node.len(), nodes);
    assert!(
        per_node.values().all(|&(s, f)| s == rounds && f == rounds),
        "every round left exactly one started and one finished entry: {per_node:?}"
    );

    // Replaying history independently: at no instant did more than k windows overlap.
    let mut open = 0usize;
    let mut max_open = 0usize;
    for e in &history {
        match e.event {
            HistoryEvent::Started => open += 1,
            _ if e.released => open -= 1,
            _ => {}
        }
        max_open = max_open.max(open);
    }
    assert!(max_open <= concurrency as usize, "history shows {max_open}");
}
