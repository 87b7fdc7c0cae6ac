//! What a look at the queue needs of each queued node, mirrored into the RotaNode's labels at
//! every write: its place (`queuedAt`), whether its session is alive (the deadline) and whether
//! it is blocked. A look then lists the queued RotaNodes' metadata only, not their status with
//! its history: a tenth of the bytes for the API server to encode and the agent to decode, at
//! every look of every waiter (100 looks of 100 nodes each when a fleet's sentinels appear at
//! once).
//!
//! Objects last written by a rota without these labels have no deadline label while queued; a
//! look that meets one reads the full objects instead.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rota_core::NodeState;
use rota_store::Millis;

use crate::crd::RotaNodeStatus;
use crate::store::Waiter;

/// When the node entered the queue (ms since the epoch), while it is queued with a place.
pub const QUEUED_AT_LABEL: &str = "rota.dev/queued-at";
/// When the node's session expires (ms since the epoch), while it is queued.
pub const DEADLINE_LABEL: &str = "rota.dev/session-deadline";
/// `true` while the node is queued and blocked.
pub const BLOCKED_LABEL: &str = "rota.dev/blocked";
/// `true` while the node is queued far from the front, its session renewed sparsely.
pub const SPARSE_LABEL: &str = "rota.dev/session-sparse";

/// Sets the queue's labels from `status`, and removes those that no longer apply. A label
/// value must start with a letter or digit: a time before the epoch is left out.
pub fn mirror(labels: &mut BTreeMap<String, String>, status: &RotaNodeStatus) {
    let queued = status.state == NodeState::Queued;
    let time = |t: Millis| (t >= 0).then(|| t.to_string());
    let values = [
        (
            QUEUED_AT_LABEL,
            status.queued_at.filter(|_| queued).and_then(|t| time(t.0)),
        ),
        (
            DEADLINE_LABEL,
            status
                .session
                .as_ref()
                .filter(|_| queued)
                .and_then(|s| time(s.deadline.0)),
        ),
        (
            BLOCKED_LABEL,
            status
                .blocked
                .as_ref()
                .filter(|_| queued)
                .map(|_| "true".to_owned()),
        ),
        (
            SPARSE_LABEL,
            status
                .session
                .as_ref()
                .filter(|s| queued && s.sparse)
                .map(|_| "true".to_owned()),
        ),
    ];
    for (key, value) in values {
        match value {
            Some(value) => labels.insert(key.to_owned(), value),
            None => labels.remove(key),
        };
    }
}

/// The waiters of a look at the queue from the queued objects' metadata (named
/// `prefix` + node), or `None` if one of them lacks the labels.
pub fn waiters(
    queued: &[ObjectMeta],
    prefix: &str,
    holders: &[&str],
    now: Millis,
) -> Option<Vec<Waiter>> {
    let mut waiters = Vec::new();
    for meta in queued {
        let labels = meta.labels.as_ref()?;
        let node = meta.name.as_deref()?.strip_prefix(prefix)?;
        let deadline: Millis = labels.get(DEADLINE_LABEL)?.parse().ok()?;
        // A blocked node keeps its place without holding the queue up; one without a place
        // yet is not in the queue.
        if labels.contains_key(BLOCKED_LABEL) {
            continue;
        }
        let Some(queued_at) = labels.get(QUEUED_AT_LABEL) else {
            continue;
        };
        waiters.push(Waiter {
            node: node.to_owned(),
            queued_at: queued_at.parse().ok()?,
            alive: deadline > now,
            holds_slot: holders.contains(&node),
            sparse: labels.contains_key(SPARSE_LABEL),
        });
    }
    Some(waiters)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BlockedStatus, SessionStatus, Timestamp};

    fn queued(queued_at: Option<Millis>, deadline: Millis) -> RotaNodeStatus {
        RotaNodeStatus {
            state: NodeState::Queued,
            queued_at: queued_at.map(Timestamp),
            session: Some(SessionStatus {
                id: 1,
                deadline: Timestamp(deadline),
                sparse: false,
            }),
            ..RotaNodeStatus::default()
        }
    }

    fn meta(name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_labels_follow_the_status_and_go_when_the_node_leaves_the_queue() {
        let mut labels = BTreeMap::from([("other".to_owned(), "kept".to_owned())]);
        let mut status = queued(Some(100), 5_000);
        mirror(&mut labels, &status);
        assert_eq!(labels.get(QUEUED_AT_LABEL).map(String::as_str), Some("100"));
        assert_eq!(labels.get(DEADLINE_LABEL).map(String::as_str), Some("5000"));
        assert_eq!(labels.get(BLOCKED_LABEL), None);

        status.blocked = Some(BlockedStatus {
            reason: "paused".into(),
            since: Timestamp(200),
        });
        mirror(&mut labels, &status);
        assert_eq!(labels.get(BLOCKED_LABEL).map(String::as_str), Some("true"));

        status.state = NodeState::Draining;
        mirror(&mut labels, &status);
        assert_eq!(
            labels,
            BTreeMap::from([("other".to_owned(), "kept".to_owned())])
        );

        mirror(&mut labels, &queued(Some(-5), 5_000));
        assert_eq!(
            labels.get(QUEUED_AT_LABEL),
            None,
            "no label value starts with '-'"
        );
    }

    #[test]
    fn waiters_come_from_the_labels_and_a_missing_deadline_asks_for_the_objects() {
        let labelled = |status: &RotaNodeStatus| {
            let mut labels = BTreeMap::new();
            mirror(&mut labels, status);
            labels
        };
        let mut blocked = queued(Some(50), 5_000);
        blocked.blocked = Some(BlockedStatus {
            reason: "pod".into(),
            since: Timestamp(60),
        });
        let queue = [
            meta("p-a", labelled(&queued(Some(100), 5_000))),
            meta("p-b", labelled(&queued(Some(200), 900))),
            meta("p-c", labelled(&blocked)),
            meta("p-d", labelled(&queued(None, 5_000))),
        ];
        let found = waiters(&queue, "p-", &["b"], 1_000).expect("labelled");
        let seen: Vec<_> = found
            .iter()
            .map(|w| (w.node.as_str(), w.queued_at, w.alive, w.holds_slot))
            .collect();
        assert_eq!(seen, [("a", 100, true, false), ("b", 200, false, true)]);

        let old = [meta("p-e", BTreeMap::new())];
        assert!(waiters(&old, "p-", &[], 1_000).is_none());
    }
}
