//! The operators' audit trail: each action recorded once with who and why, read back in
//! order, and filtered like the history.

use std::sync::Arc;

use rota_core::{HistoryEvent, NodeName, Process};

use crate::actions::{Action, NewAction};
use crate::model::{HistoryFilter, now_millis};
use crate::store::{Store, StoreExt};

fn action(
    action: Action,
    node: Option<&str>,
    process: Option<Process>,
    reason: Option<&str>,
) -> NewAction {
    NewAction {
        action,
        node: node.map(|n| NodeName::new(n).expect("a node name")),
        process,
        by: "alice@admin-1".into(),
        reason: reason.map(str::to_owned),
    }
}

pub async fn operator_actions_are_recorded_with_who_and_why(store: Arc<dyn Store>) {
    let none = store
        .actions(&HistoryFilter::default())
        .await
        .expect("actions");
    assert_eq!(none, Vec::new(), "a new store has none");

    let before = now_millis();
    let pause = action(Action::Pause, None, None, Some("change freeze"));
    let unlock = action(
        Action::Unlock,
        Some("node-a"),
        Some(Process::Reboot),
        Some("replaced the disk"),
    );
    let submit = action(
        Action::Submit,
        None,
        Some(Process::mop("kernel").expect("a procedure")),
        None,
    );
    let mut recorded = Vec::new();
    for new in [&pause, &unlock, &submit] {
        let record = store.record_action(new).await.expect("record");
        assert_eq!(
            (
                record.action,
                &record.node,
                &record.process,
                &record.by,
                &record.reason
            ),
            (new.action, &new.node, &new.process, &new.by, &new.reason)
        );
        assert!(
            (before - 5_000..=now_millis() + 5_000).contains(&record.at),
            "{record:?} near {before}"
        );
        recorded.push(record);
    }

    let all = store
        .actions(&HistoryFilter::default())
        .await
        .expect("actions");
    assert_eq!(
        all.iter().map(|r| r.action).collect::<Vec<_>>(),
        [Action::Pause, Action::Unlock, Action::Submit],
        "oldest first: {all:?}"
    );
    assert_eq!(all, recorded, "read back as recorded");

    let of_node = store
        .actions(&HistoryFilter {
            node: Some(NodeName::new("node-a").expect("a node name")),
            ..HistoryFilter::default()
        })
        .await
        .expect("actions of a node");
    assert_eq!(of_node, vec![recorded[1].clone()]);
    let of_process = store
        .actions(&HistoryFilter {
            process: Some(Process::mop("kernel").expect("a procedure")),
            ..HistoryFilter::default()
        })
        .await
        .expect("actions of a process");
    assert_eq!(of_process, vec![recorded[2].clone()]);
    let later = store
        .actions(&HistoryFilter {
            since: Some(now_millis() + 60_000),
            ..HistoryFilter::default()
        })
        .await
        .expect("actions since");
    assert_eq!(later, Vec::new());
    let events_only = store
        .actions(&HistoryFilter {
            event: Some(HistoryEvent::Started),
            ..HistoryFilter::default()
        })
        .await
        .expect("actions with an event filter");
    assert_eq!(
        events_only,
        Vec::new(),
        "an event filter asks for history only"
    );
}
