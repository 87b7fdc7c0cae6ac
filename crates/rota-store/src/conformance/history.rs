//! History: ordered, and filtered by node, event and time; and the steps inside the windows.

use std::sync::Arc;

use rota_core::{HistoryEvent, NodeState};

use super::{enqueue, fail_closed, finish_window, node, open_window, session};
use crate::model::{Blocked, HistoryFilter, now_millis};
use crate::store::{Store, StoreExt};

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
    // In time order; an entry's id is unique among its node's and grows with them (a store
    // may number each node's entries on their own, as the Kubernetes store does).
    assert!(all.windows(2).all(|w| w[0].at <= w[1].at));
    for node in ["a", "b"] {
        let ids: Vec<i64> = all
            .iter()
            .filter(|e| e.node.as_str() == node)
            .map(|e| e.id)
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{node}: {ids:?}");
    }
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

/// Every state a node enters is a step, in order, with its time: an agent's transitions, a
/// failed window, an operator's retry and unlock; filtered by node and by time.
pub async fn steps_record_every_state_a_node_enters(store: Arc<dyn Store>) {
    store.set_concurrency(2).await.expect("set concurrency");
    let before = now_millis();
    let a = session(&*store, "a").await;
    let b = session(&*store, "b").await;
    enqueue(&*store, &a, now_millis() - 2000).await;
    enqueue(&*store, &b, now_millis() - 1000).await;
    for s in [&a, &b] {
        let granted = store.try_acquire_slot(s).await.expect("grant");
        assert!(granted.slot().is_some());
        open_window(&*store, s).await;
    }
    finish_window(&*store, &a).await;
    fail_closed(&*store, &b).await;
    store.retry(&node("b")).await.expect("retry");
    store
        .unlock(&node("b"), "done by hand")
        .await
        .expect("unlock");

    let steps = |name: &str| {
        let store = store.clone();
        let name = name.to_owned();
        async move {
            store
                .steps(&HistoryFilter {
                    node: Some(node(&name)),
                    ..HistoryFilter::default()
                })
                .await
                .expect("steps")
        }
    };
    let of_a = steps("a").await;
    let states: Vec<NodeState> = of_a.iter().map(|s| s.state).collect();
    assert_eq!(
        states,
        [
            NodeState::Queued,
            NodeState::Draining,
            NodeState::Maintaining,
            NodeState::Verifying,
            NodeState::Idle,
        ]
    );
    assert!(of_a.iter().all(|s| s.node == node("a") && s.at >= before));
    assert!(of_a.windows(2).all(|w| w[0].at <= w[1].at));
    let of_b: Vec<NodeState> = steps("b").await.iter().map(|s| s.state).collect();
    assert_eq!(
        of_b,
        [
            NodeState::Queued,
            NodeState::Draining,
            NodeState::Maintaining,
            NodeState::Failed,
            NodeState::Maintaining,
            NodeState::Idle,
        ]
    );
    let all = store
        .steps(&HistoryFilter::default())
        .await
        .expect("every node's steps");
    assert_eq!(all.len(), 11);
    let later = store
        .steps(&HistoryFilter {
            since: Some(now_millis() + 60_000),
            ..HistoryFilter::default()
        })
        .await
        .expect("filter by time");
    assert!(later.is_empty());
}

/// A step keeps what last held the node back in it: a blocker while queued, the pods its drain
/// waited for. Clearing the reason keeps the note; the next step starts without one.
pub async fn a_step_keeps_what_held_the_node_back(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let a = session(&*store, "a").await;
    enqueue(&*store, &a, now_millis() - 1000).await;
    let blocked = |reason: &str| Blocked {
        reason: reason.to_owned(),
        since: now_millis(),
    };
    for reason in ["paused", "blocked by pods: monitoring/prometheus-0"] {
        store
            .set_blocked(&a, Some(&blocked(reason)))
            .await
            .expect("blocked");
    }
    store.set_blocked(&a, None).await.expect("cleared");
    assert!(
        store
            .try_acquire_slot(&a)
            .await
            .expect("grant")
            .slot()
            .is_some()
    );
    open_window(&*store, &a).await;
    let held = "the drain is held: waiting for 1 pod to complete: ci/job-x";
    store
        .set_blocked(&a, Some(&blocked(held)))
        .await
        .expect("drain held");
    store.set_blocked(&a, None).await.expect("drain done");
    finish_window(&*store, &a).await;

    let steps = store
        .steps(&HistoryFilter {
            node: Some(node("a")),
            ..HistoryFilter::default()
        })
        .await
        .expect("steps");
    let notes: Vec<(NodeState, Option<&str>)> =
        steps.iter().map(|s| (s.state, s.note.as_deref())).collect();
    assert_eq!(
        notes,
        [
            (
                NodeState::Queued,
                Some("blocked by pods: monitoring/prometheus-0")
            ),
            (NodeState::Draining, Some(held)),
            (NodeState::Maintaining, None),
            (NodeState::Verifying, None),
            (NodeState::Idle, None),
        ]
    );
}
