//! The fleet's pause: recorded, lifted by a resume that wakes every waiter and starts a new
//! rollout.

use std::sync::Arc;
use std::time::Duration;

use crate::model::now_millis;
use crate::store::{Store, StoreExt};

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
