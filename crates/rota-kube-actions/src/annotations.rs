//! The annotations of `rota agent --annotate-nodes` (kured's `--annotate-nodes`): other tools
//! (monitoring, other maintenance tools) can tell from the Node that rota is rebooting it, and
//! when its last reboot started and ended. They ride on the uncordon's write where there is
//! one; the reboot's start has a write of its own, right before the reboot.

use jiff::Timestamp;
use rota_core::Millis;
use serde_json::{Map, Value, json};

/// From the reboot's start until the node is back in service (kured's
/// `weave.works/kured-reboot-in-progress`): the time the reboot started.
pub const REBOOT_IN_PROGRESS_ANNOTATION: &str = "rota.dev/reboot-in-progress";
/// The time the node's last reboot by rota started (kured's
/// `weave.works/kured-most-recent-reboot-needed`); stays after the reboot.
pub const LAST_REBOOT_STARTED_ANNOTATION: &str = "rota.dev/last-reboot-started";
/// The time the node was back in service, verified healthy, after its last reboot by rota.
pub const LAST_REBOOT_FINISHED_ANNOTATION: &str = "rota.dev/last-reboot-finished";

/// RFC 3339 in UTC, to the second, as kured writes its times (and Kubernetes its own).
pub(crate) fn rfc3339(at: Timestamp) -> String {
    Timestamp::from_second(at.as_second())
        .unwrap_or(at)
        .to_string()
}

/// The merge patch of the reboot's start, recorded in the store at `started_at`.
pub(crate) fn on_reboot_start(started_at: Millis) -> Value {
    let at = rfc3339(Timestamp::from_millisecond(started_at).unwrap_or_else(|_| Timestamp::now()));
    json!({ "metadata": { "annotations": {
        REBOOT_IN_PROGRESS_ANNOTATION: at,
        LAST_REBOOT_STARTED_ANNOTATION: at,
    } } })
}

/// The annotations of a return to service: no reboot is in progress any more, and, when the
/// window `rebooted` the node, it ended now.
pub(crate) fn on_return(rebooted: bool) -> Map<String, Value> {
    let mut annotations = Map::new();
    annotations.insert(REBOOT_IN_PROGRESS_ANNOTATION.into(), Value::Null);
    if rebooted {
        annotations.insert(
            LAST_REBOOT_FINISHED_ANNOTATION.into(),
            Value::String(rfc3339(Timestamp::now())),
        );
    }
    annotations
}

/// Adds `annotations` to the merge patch `patch` of the Node.
pub(crate) fn add_to(patch: &mut Value, annotations: Map<String, Value>) {
    if let Some(metadata) = patch
        .as_object_mut()
        .map(|p| p.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        let existing = metadata.entry("annotations").or_insert_with(|| json!({}));
        if let Some(existing) = existing.as_object_mut() {
            existing.extend(annotations);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reboots_start_sets_both_times_to_the_second_in_utc() {
        // 2024-06-01T12:34:56.789Z
        let patch = on_reboot_start(1_717_245_296_789);
        let at = "2024-06-01T12:34:56Z";
        assert_eq!(
            patch,
            json!({ "metadata": { "annotations": {
                "rota.dev/reboot-in-progress": at,
                "rota.dev/last-reboot-started": at,
            } } })
        );
    }

    #[test]
    fn a_return_removes_the_reboot_in_progress_and_adds_to_the_uncordons_patch() {
        let mut patch = json!({
            "metadata": { "annotations": { "rota.dev/evicted": null }, "labels": {} },
            "spec": { "unschedulable": false },
        });
        add_to(&mut patch, on_return(false));
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({ "rota.dev/evicted": null, "rota.dev/reboot-in-progress": null })
        );
        let mut alone = json!({});
        add_to(&mut alone, on_return(true));
        let finished = alone["metadata"]["annotations"]["rota.dev/last-reboot-finished"]
            .as_str()
            .map(|t| t.parse::<Timestamp>());
        assert!(matches!(finished, Some(Ok(_))), "{alone}");
    }
}
