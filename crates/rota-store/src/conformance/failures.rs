//! Windows that do not finish: a failure's backoff, an operator's unlock and retry, a failed
//! drain, and a postponed window.

use std::sync::Arc;

use rota_core::{HistoryEvent, NodeState, Process};

use super::{enqueue, fail_closed, finish_window, node, open_window, policy, session};
use crate::error::Error;
use crate::model::{
    HistoryFilter, NodeFields, Outcome, RequestState, Transition, WindowChange, now_millis,
};
use crate::store::{Store, StoreExt};

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
        matches!(
            refused,
            Err(Error::Refused(rota_core::RecordError::NotAllowed { .. }))
        ),
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
        matches!(
            refused,
            Err(Error::Refused(rota_core::RecordError::NotAllowed { .. }))
        ),
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

/// A window postponed mid-way (its maintenance hours ended): active requests go back to
/// pending (a completed one stays done), the slot goes back, no backoff, and one `postponed`
/// entry per request.
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
    let reason = "the maintenance hours ended at 2026-11-29T04:00:00Z";
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
