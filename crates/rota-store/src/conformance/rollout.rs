//! A rollout's batches: the slots given no wider than the width the rollout reached, which
//! widens as its nodes end their windows healthy, and narrows again with a new rollout.

use std::sync::Arc;
use std::time::Duration;

use rota_core::{Batches, FailureBudget, Rollout};

use super::{enqueue, finish_window, open_window, session};
use crate::model::{Session, Setting, now_millis};
use crate::store::{Store, StoreExt};

/// Asks for a slot for each of `waiting` in turn and opens the window of each granted one;
/// returns those granted, in the order asked.
async fn grant_round(store: &dyn Store, waiting: &mut Vec<Session>) -> Vec<Session> {
    let mut granted = Vec::new();
    let mut still = Vec::new();
    for s in waiting.drain(..) {
        if store
            .try_acquire_slot(&s)
            .await
            .expect("acquire")
            .slot()
            .is_some()
        {
            open_window(store, &s).await;
            granted.push(s);
        } else {
            still.push(s);
        }
    }
    *waiting = still;
    granted
}

pub async fn a_rollout_widens_as_its_nodes_finish_healthy(store: Arc<dyn Store>) {
    store.set_concurrency(4).await.expect("set concurrency");
    let rollout = Rollout {
        batches: Batches::Exponential,
        failure_budget: Some(FailureBudget::Percent(10)),
    };
    store
        .set(Setting::Rollout(rollout.clone()))
        .await
        .expect("set the rollout");
    assert_eq!(store.settings().await.expect("settings").rollout, rollout);

    let now = now_millis();
    let mut waiting = Vec::new();
    for i in 0..8 {
        let s = session(&*store, &format!("node-{i}")).await;
        enqueue(&*store, &s, now - 10_000 + i).await;
        waiting.push(s);
    }
    // Width 1 until one node finished, 2 until three did, then 4 (the concurrency).
    let first = grant_round(&*store, &mut waiting).await;
    assert_eq!(first.len(), 1, "the first batch is one node");
    assert!(grant_round(&*store, &mut waiting).await.is_empty());
    finish_window(&*store, &first[0]).await;

    let second = grant_round(&*store, &mut waiting).await;
    assert_eq!(second.len(), 2, "after one healthy node, two at once");
    finish_window(&*store, &second[0]).await;
    // Two finished: the width is still two, and one is out.
    let third = grant_round(&*store, &mut waiting).await;
    assert_eq!(third.len(), 1, "the width stays two until three finished");
    finish_window(&*store, &second[1]).await;
    // Three finished: width four, one out.
    let fourth = grant_round(&*store, &mut waiting).await;
    assert_eq!(fourth.len(), 3, "after three healthy nodes, four at once");
    assert_eq!(store.slot_holders().await.expect("holders").len(), 4);

    // A new rollout starts narrow again: with the four out finished, one goes.
    for s in third.iter().chain(&fourth) {
        finish_window(&*store, s).await;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    store.resume().await.expect("resume");
    assert_eq!(waiting.len(), 1);
    let s = session(&*store, "node-8").await;
    enqueue(&*store, &s, now_millis() - 1000).await;
    waiting.push(s);
    let fifth = grant_round(&*store, &mut waiting).await;
    assert_eq!(fifth.len(), 1, "a new rollout is one node wide");
}
