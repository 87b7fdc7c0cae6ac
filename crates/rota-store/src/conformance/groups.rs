//! Slot groups: a node records its group as it queues; a group's limit holds beside the
//! concurrency, and groups in turn go one at a time.

use std::sync::Arc;

use super::{enqueue_with, finish_window, node, open_window, session};
use crate::model::{NodeFields, Session, Setting, now_millis};
use crate::store::{Store, StoreExt};

/// Requests a reboot and enters the queue at `queued_at`, in `group`.
async fn enqueue_in(store: &dyn Store, s: &Session, queued_at: i64, group: &str) {
    let fields = NodeFields {
        group: Some(Some(group.to_owned())),
        ..NodeFields::default()
    };
    enqueue_with(store, s, queued_at, fields).await;
}

/// Asks for a slot for each of `asking` in turn, opening each granted one's window; returns
/// the names granted.
async fn granted(store: &dyn Store, asking: &[&Session]) -> Vec<String> {
    let mut names = Vec::new();
    for s in asking {
        if store
            .try_acquire_slot(s)
            .await
            .expect("acquire")
            .slot()
            .is_some()
        {
            open_window(store, s).await;
            names.push(s.node.to_string());
        }
    }
    names
}

pub async fn slot_groups_keep_their_limits_and_go_in_turn(store: Arc<dyn Store>) {
    store.set_concurrency(4).await.expect("set concurrency");
    let one_each: rota_core::GroupRules = "*=1".parse().expect("rules");
    store
        .set(Setting::Groups(one_each.clone()))
        .await
        .expect("set the groups");
    assert_eq!(store.settings().await.expect("settings").groups, one_each);

    let now = now_millis();
    let a1 = session(&*store, "a1").await;
    let a2 = session(&*store, "a2").await;
    let b1 = session(&*store, "b1").await;
    enqueue_in(&*store, &a1, now - 3000, "zone-a").await;
    enqueue_in(&*store, &a2, now - 2000, "zone-a").await;
    enqueue_in(&*store, &b1, now - 1000, "zone-b").await;
    let record = store.node(&node("a1")).await.expect("read").expect("a1");
    assert_eq!(record.group.as_deref(), Some("zone-a"));
    // One of each group, though the concurrency allows three.
    assert_eq!(granted(&*store, &[&a1, &a2, &b1]).await, ["a1", "b1"]);
    finish_window(&*store, &a1).await;
    assert_eq!(granted(&*store, &[&a2]).await, ["a2"]);
    finish_window(&*store, &a2).await;
    finish_window(&*store, &b1).await;

    // In turn: zone-a (first by name) goes first, though zone-b's node queued before.
    store
        .set(Setting::Groups("in-turn".parse().expect("rules")))
        .await
        .expect("set the groups");
    let now = now_millis();
    let x1 = session(&*store, "x1").await;
    let y1 = session(&*store, "y1").await;
    let y2 = session(&*store, "y2").await;
    enqueue_in(&*store, &x1, now - 3000, "zone-b").await;
    enqueue_in(&*store, &y1, now - 2000, "zone-a").await;
    enqueue_in(&*store, &y2, now - 1000, "zone-a").await;
    assert_eq!(granted(&*store, &[&x1, &y1, &y2]).await, ["y1", "y2"]);
    finish_window(&*store, &y1).await;
    assert!(
        granted(&*store, &[&x1]).await.is_empty(),
        "zone-b waits while zone-a holds a slot"
    );
    finish_window(&*store, &y2).await;
    assert_eq!(granted(&*store, &[&x1]).await, ["x1"]);
}
