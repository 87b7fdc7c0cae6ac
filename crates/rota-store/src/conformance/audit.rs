//! The operators' audit trail: each command's audit record written once with who and why, read
//! back in order, and filtered like the history.

use std::sync::Arc;

use rota_core::{HistoryEvent, NodeName, Process};

use crate::audit::{NewAuditRecord, OperatorCommand};
use crate::model::{HistoryFilter, now_millis};
use crate::store::{Store, StoreExt};

fn audit(
    command: OperatorCommand,
    node: Option<&str>,
    process: Option<Process>,
    reason: Option<&str>,
) -> NewAuditRecord {
    NewAuditRecord {
        command,
        node: node.map(|n| NodeName::new(n).expect("a node name")),
        process,
        by: "alice@admin-1".into(),
        reason: reason.map(str::to_owned),
    }
}

pub async fn operator_commands_are_audited_with_who_and_why(store: Arc<dyn Store>) {
    let none = store
        .audit_records(&HistoryFilter::default())
        .await
        .expect("audit records");
    assert_eq!(none, Vec::new(), "a new store has none");

    let before = now_millis();
    let pause = audit(OperatorCommand::Pause, None, None, Some("change freeze"));
    let unlock = audit(
        OperatorCommand::Unlock,
        Some("node-a"),
        Some(Process::Reboot),
        Some("replaced the disk"),
    );
    let submit = audit(
        OperatorCommand::Submit,
        None,
        Some(Process::mop("kernel").expect("a procedure")),
        None,
    );
    let mut recorded = Vec::new();
    for new in [&pause, &unlock, &submit] {
        let record = store.record_audit(new).await.expect("record");
        assert_eq!(
            (
                record.command,
                &record.node,
                &record.process,
                &record.by,
                &record.reason
            ),
            (new.command, &new.node, &new.process, &new.by, &new.reason)
        );
        assert!(
            (before - 5_000..=now_millis() + 5_000).contains(&record.at),
            "{record:?} near {before}"
        );
        recorded.push(record);
    }

    let all = store
        .audit_records(&HistoryFilter::default())
        .await
        .expect("audit records");
    assert_eq!(
        all.iter().map(|r| r.command).collect::<Vec<_>>(),
        [
            OperatorCommand::Pause,
            OperatorCommand::Unlock,
            OperatorCommand::Submit
        ],
        "oldest first: {all:?}"
    );
    assert_eq!(all, recorded, "read back as recorded");

    let of_node = store
        .audit_records(&HistoryFilter {
            node: Some(NodeName::new("node-a").expect("a node name")),
            ..HistoryFilter::default()
        })
        .await
        .expect("audit records of a node");
    assert_eq!(of_node, vec![recorded[1].clone()]);
    let of_process = store
        .audit_records(&HistoryFilter {
            process: Some(Process::mop("kernel").expect("a procedure")),
            ..HistoryFilter::default()
        })
        .await
        .expect("audit records of a process");
    assert_eq!(of_process, vec![recorded[2].clone()]);
    let later = store
        .audit_records(&HistoryFilter {
            since: Some(now_millis() + 60_000),
            ..HistoryFilter::default()
        })
        .await
        .expect("audit records since");
    assert_eq!(later, Vec::new());
    let events_only = store
        .audit_records(&HistoryFilter {
            event: Some(HistoryEvent::Started),
            ..HistoryFilter::default()
        })
        .await
        .expect("audit records with an event filter");
    assert_eq!(
        events_only,
        Vec::new(),
        "an event filter asks for history only"
    );
}
