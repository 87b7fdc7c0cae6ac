//! The node lifecycle conditions of KEP-5683 (Kubernetes 1.37, alpha) that the agent sets on
//! its own Node as the node goes through its window: other tools (autoscalers, monitoring,
//! other maintenance controllers, `kubectl describe node`) read from the Node itself that rota
//! has queued it, drains it, or has it in maintenance, in the shared vocabulary the KEP defines
//! instead of rota's own annotations. The API server takes any condition type, so they are
//! written whether or not the feature gate `NodeLifecycleConditions` is on.
//!
//! Each [`Step`] of the window sets some of the four conditions and leaves the others as they
//! are. A condition is written `True` whenever its step holds, but `False` only over a `True`
//! that rota wrote (its reason starts with [`ROTA_REASON_PREFIX`]): KEP-5683 gives a condition
//! no owner, and a writer that clears only what it set leaves another writer's alone (`kubectl
//! drain`'s `Drained`, a cloud provider's `MaintenancePlanned`), and lists nothing on a node
//! that rota never took out. A cleared condition stays listed as `False`, the Kubernetes way
//! (the KEP allows either that or its removal), so that the last transition stays readable.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeCondition;
use kube::Client;
use serde_json::{Value, json};

use crate::annotations::rfc3339;
use crate::error::Result;
use crate::node;

/// The node is expected to undergo maintenance: rota queued it, until it is idle again.
pub const MAINTENANCE_PLANNED: &str = "MaintenancePlanned";
/// rota's drain of the node is under way.
pub const DRAIN_IN_PROGRESS: &str = "DrainInProgress";
/// rota's drain of the node completed, until the node is back in service.
pub const DRAINED: &str = "Drained";
/// The node is in its maintenance window, from the cordon (or the drain) until it is back in
/// service: the drain, the procedures and the reboot.
pub const MAINTENANCE_IN_PROGRESS: &str = "MaintenanceInProgress";

/// How every reason rota writes begins: how rota tells its own conditions from another
/// writer's.
pub const ROTA_REASON_PREFIX: &str = "Rota";

/// A step of the node's way through its window, as the node actions see it; each sets some of
/// the conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The node has work: queued (and until it is idle again).
    Queued,
    /// The node is idle: no work queued, none under way.
    Idle,
    /// rota cordoned the node for the drain delay: its window opened.
    Cordoned,
    /// rota's drain starts (or starts again).
    Draining,
    /// rota's drain completed.
    Drained,
    /// rota's drain failed.
    DrainFailed,
    /// rota runs the node's maintenance (its procedures, kustodian's script), with or
    /// without a drain before it.
    Maintaining,
    /// rota starts the node's reboot.
    Rebooting,
    /// The node is back in service: uncordoned at the end of its window (or after an
    /// operator's unlock, or a failed drain).
    BackInService,
}

impl Step {
    /// The reason of every condition the step writes: CamelCase, as KEP-5683 asks, and
    /// starting with [`ROTA_REASON_PREFIX`].
    fn reason(self) -> &'static str {
        match self {
            Step::Queued => "RotaMaintenanceQueued",
            Step::Idle => "RotaIdle",
            Step::Cordoned => "RotaCordoned",
            Step::Draining => "RotaDraining",
            Step::Drained => "RotaDrained",
            Step::DrainFailed => "RotaDrainFailed",
            Step::Maintaining => "RotaMaintaining",
            Step::Rebooting => "RotaRebooting",
            Step::BackInService => "RotaBackInService",
        }
    }

    /// The conditions the step sets: type, whether `True`, and the message.
    fn conditions(self) -> &'static [(&'static str, bool, &'static str)] {
        const WINDOW: &str = "the node is in its rota maintenance window: cordon, drain, \
                              maintenance and reboot, until it is verified back in service";
        const BACK: &str = "the node is back in service after its rota maintenance window";
        match self {
            Step::Queued => &[(
                MAINTENANCE_PLANNED,
                true,
                "rota queued the node for maintenance; it waits for its turn",
            )],
            Step::Idle => &[
                (
                    MAINTENANCE_PLANNED,
                    false,
                    "rota has no maintenance queued for the node",
                ),
                (DRAIN_IN_PROGRESS, false, BACK),
                (DRAINED, false, BACK),
                (MAINTENANCE_IN_PROGRESS, false, BACK),
            ],
            Step::Cordoned => &[(
                MAINTENANCE_IN_PROGRESS,
                true,
                "rota cordoned the node for its maintenance window; the drain follows the \
                 drain delay",
            )],
            Step::Draining => &[
                (
                    DRAIN_IN_PROGRESS,
                    true,
                    "rota is draining the node: it evicts its pods through the Eviction API",
                ),
                (DRAINED, false, "rota's drain of the node has not completed"),
                (MAINTENANCE_IN_PROGRESS, true, WINDOW),
            ],
            Step::Drained => &[
                (
                    DRAIN_IN_PROGRESS,
                    false,
                    "rota's drain of the node completed",
                ),
                (
                    DRAINED,
                    true,
                    "rota's drain completed: the pods it evicts are gone from the node",
                ),
                (MAINTENANCE_IN_PROGRESS, true, WINDOW),
            ],
            Step::DrainFailed => &[(
                DRAIN_IN_PROGRESS,
                false,
                "rota's drain of the node failed; rota puts it back in service and tries \
                 again later",
            )],
            Step::Maintaining => &[(
                MAINTENANCE_IN_PROGRESS,
                true,
                "rota runs the node's maintenance: its procedures",
            )],
            Step::Rebooting => &[(MAINTENANCE_IN_PROGRESS, true, "rota is rebooting the node")],
            Step::BackInService => &[
                (DRAIN_IN_PROGRESS, false, BACK),
                (DRAINED, false, BACK),
                (MAINTENANCE_IN_PROGRESS, false, BACK),
            ],
        }
    }
}

/// Whether rota wrote `condition` (see [`ROTA_REASON_PREFIX`]).
fn rotas(condition: &NodeCondition) -> bool {
    condition
        .reason
        .as_deref()
        .is_some_and(|r| r.starts_with(ROTA_REASON_PREFIX))
}

/// The strategic merge patch of the Node's status that sets `step`'s conditions over
/// `current` (the Node's conditions as read) at `now`; `None` when there is nothing to write.
/// `lastTransitionTime` changes only with the status; `lastHeartbeatTime` is `now` in every
/// condition written.
pub(crate) fn patch(step: Step, current: &[NodeCondition], now: Timestamp) -> Option<Value> {
    let now = rfc3339(now);
    let written: Vec<Value> = step
        .conditions()
        .iter()
        .filter_map(|&(type_, true_, message)| {
            let status = if true_ { "True" } else { "False" };
            let existing = current.iter().find(|c| c.type_ == type_);
            let clears_its_own = existing.is_some_and(|c| c.status == "True" && rotas(c));
            if !true_ && !clears_its_own {
                return None;
            }
            let transition = existing
                .filter(|c| c.status == status)
                .and_then(|c| c.last_transition_time.as_ref())
                .map_or_else(|| json!(now), |t| json!(t));
            Some(json!({
                "type": type_,
                "status": status,
                "reason": step.reason(),
                "message": message,
                "lastTransitionTime": transition,
                "lastHeartbeatTime": now,
            }))
        })
        .collect();
    (!written.is_empty()).then(|| json!({ "status": { "conditions": written } }))
}

/// Sets `step`'s conditions on the Node `node`: one read, for the conditions' transition
/// times, then one patch of its status (none when there is nothing to write). The read and
/// the patch are no compare-and-swap: the kubelet writes the Node's status often, and every
/// conflict would cost a round; a writer that changes one of these four in between only makes
/// the transition time rota writes that of its read.
pub(crate) async fn set(client: &Client, node: &str, step: Step) -> Result<()> {
    let object = node::get(client, node).await?;
    let current = object.status.and_then(|s| s.conditions).unwrap_or_default();
    match patch(step, &current, Timestamp::now()) {
        Some(patch) => node::patch_status(client, node, patch).await,
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    const NOW: &str = "2026-07-20T14:00:05Z";
    const EARLIER: &str = "2026-07-20T13:00:00Z";

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a valid time")
    }

    fn condition(type_: &str, status: &str, reason: &str, since: &str) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some("as it was".into()),
            last_transition_time: Some(Time(at(since))),
            last_heartbeat_time: Some(Time(at(since))),
        }
    }

    /// The conditions `patch` writes, as (type, status, reason, lastTransitionTime).
    fn written(step: Step, current: &[NodeCondition]) -> Vec<(String, String, String, String)> {
        let Some(patch) = patch(step, current, at(NOW)) else {
            return Vec::new();
        };
        let field = |c: &Value, key: &str| c[key].as_str().expect(key).to_owned();
        patch["status"]["conditions"]
            .as_array()
            .expect("a list of conditions")
            .iter()
            .map(|c| {
                assert_eq!(field(c, "lastHeartbeatTime"), NOW, "{c}");
                assert!(field(c, "message").contains("rota"), "{c}");
                (
                    field(c, "type"),
                    field(c, "status"),
                    field(c, "reason"),
                    field(c, "lastTransitionTime"),
                )
            })
            .collect()
    }

    fn row(
        type_: &str,
        status: &str,
        reason: &str,
        since: &str,
    ) -> (String, String, String, String) {
        (type_.into(), status.into(), reason.into(), since.into())
    }

    /// What the steps of one window with a reboot write, each over what the one before left;
    /// the kubelet's Ready is never among them.
    #[test]
    fn a_window_sets_each_condition_true_while_it_holds_and_false_after() {
        let ready = condition("Ready", "True", "KubeletReady", EARLIER);
        let mut node = vec![ready.clone()];
        let mut apply = |step: Step| {
            let rows = written(step, &node);
            for (type_, status, reason, since) in &rows {
                let mut c = condition(type_, status, reason, since);
                c.message = Some("rota".into());
                node.retain(|n| n.type_ != *type_);
                node.push(c);
            }
            rows
        };
        assert_eq!(
            apply(Step::Queued),
            [row(
                MAINTENANCE_PLANNED,
                "True",
                "RotaMaintenanceQueued",
                NOW
            )]
        );
        assert_eq!(
            apply(Step::Draining),
            [
                row(DRAIN_IN_PROGRESS, "True", "RotaDraining", NOW),
                row(MAINTENANCE_IN_PROGRESS, "True", "RotaDraining", NOW),
            ],
            "Drained is not written False where it never was True"
        );
        assert_eq!(
            apply(Step::Drained),
            [
                row(DRAIN_IN_PROGRESS, "False", "RotaDrained", NOW),
                row(DRAINED, "True", "RotaDrained", NOW),
                row(MAINTENANCE_IN_PROGRESS, "True", "RotaDrained", NOW),
            ]
        );
        assert_eq!(
            apply(Step::Maintaining),
            [row(MAINTENANCE_IN_PROGRESS, "True", "RotaMaintaining", NOW)]
        );
        assert_eq!(
            apply(Step::Rebooting),
            [row(MAINTENANCE_IN_PROGRESS, "True", "RotaRebooting", NOW)]
        );
        assert_eq!(
            apply(Step::BackInService),
            [
                row(DRAINED, "False", "RotaBackInService", NOW),
                row(MAINTENANCE_IN_PROGRESS, "False", "RotaBackInService", NOW),
            ],
            "DrainInProgress is False already"
        );
        assert_eq!(
            apply(Step::Idle),
            [row(MAINTENANCE_PLANNED, "False", "RotaIdle", NOW)]
        );
        // Idle again (an agent's start): nothing left to write.
        assert_eq!(apply(Step::Idle), []);
        assert!(node.contains(&ready), "{node:?}");
    }

    /// A status that does not change keeps its transition time; one that changes gets now.
    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let current = [condition(
            MAINTENANCE_IN_PROGRESS,
            "True",
            "RotaDraining",
            EARLIER,
        )];
        assert_eq!(
            written(Step::Rebooting, &current),
            [row(
                MAINTENANCE_IN_PROGRESS,
                "True",
                "RotaRebooting",
                EARLIER
            )]
        );
        assert_eq!(
            written(Step::BackInService, &current),
            [row(
                MAINTENANCE_IN_PROGRESS,
                "False",
                "RotaBackInService",
                NOW
            )]
        );
        // A condition listed without a transition time gets one.
        let mut bare = current[0].clone();
        bare.last_transition_time = None;
        assert_eq!(
            written(Step::Rebooting, &[bare]),
            [row(MAINTENANCE_IN_PROGRESS, "True", "RotaRebooting", NOW)]
        );
    }

    /// rota clears only what it set: another writer's True, and conditions never listed, stay
    /// as they are; a True of rota's is set again (its heartbeat) when its step repeats.
    #[test]
    fn rota_clears_only_its_own_conditions() {
        let kubectl = [
            condition(DRAINED, "True", "KubectlDrainCompleted", EARLIER),
            condition(MAINTENANCE_PLANNED, "True", "ProviderMaintenance", EARLIER),
        ];
        assert_eq!(written(Step::Idle, &kubectl), []);
        assert_eq!(written(Step::BackInService, &kubectl), []);
        assert_eq!(written(Step::BackInService, &[]), []);
        assert!(patch(Step::Idle, &[], at(NOW)).is_none());
        // A step that holds writes its True over anyone's.
        assert_eq!(
            written(Step::Queued, &kubectl),
            [row(
                MAINTENANCE_PLANNED,
                "True",
                "RotaMaintenanceQueued",
                EARLIER
            )]
        );
        let draining = [condition(
            DRAIN_IN_PROGRESS,
            "True",
            "RotaDraining",
            EARLIER,
        )];
        assert_eq!(
            written(Step::Draining, &draining),
            [
                row(DRAIN_IN_PROGRESS, "True", "RotaDraining", EARLIER),
                row(MAINTENANCE_IN_PROGRESS, "True", "RotaDraining", NOW),
            ]
        );
        assert_eq!(
            written(Step::DrainFailed, &draining),
            [row(DRAIN_IN_PROGRESS, "False", "RotaDrainFailed", NOW)]
        );
        // A drain that starts again after a completed one: Drained is no longer so.
        let drained = [condition(DRAINED, "True", "RotaDrained", EARLIER)];
        assert!(written(Step::Draining, &drained).contains(&row(
            DRAINED,
            "False",
            "RotaDraining",
            NOW
        )));
    }

    /// The patch is a strategic merge patch of `status.conditions` alone, which the API server
    /// merges by `type`: every entry carries its type and nothing else of the Node is in it.
    #[test]
    fn the_patch_names_only_the_conditions_and_each_by_its_type() {
        let patch = patch(Step::Draining, &[], at(NOW)).expect("a patch");
        let object = patch.as_object().expect("an object");
        assert_eq!(object.keys().collect::<Vec<_>>(), ["status"]);
        let status = patch["status"].as_object().expect("an object");
        assert_eq!(status.keys().collect::<Vec<_>>(), ["conditions"]);
        for c in patch["status"]["conditions"].as_array().expect("a list") {
            let mut keys: Vec<&str> = c
                .as_object()
                .expect("an object")
                .keys()
                .map(String::as_str)
                .collect();
            keys.sort_unstable();
            assert_eq!(
                keys,
                [
                    "lastHeartbeatTime",
                    "lastTransitionTime",
                    "message",
                    "reason",
                    "status",
                    "type"
                ]
            );
        }
    }

    /// Every reason is CamelCase and rota's, so that rota recognises what it wrote.
    #[test]
    fn every_reason_is_camel_case_and_rotas() {
        let steps = [
            Step::Queued,
            Step::Idle,
            Step::Cordoned,
            Step::Draining,
            Step::Drained,
            Step::DrainFailed,
            Step::Maintaining,
            Step::Rebooting,
            Step::BackInService,
        ];
        for step in steps {
            let reason = step.reason();
            assert!(reason.starts_with(ROTA_REASON_PREFIX), "{reason}");
            assert!(reason.chars().all(|c| c.is_ascii_alphabetic()), "{reason}");
            for (type_, _, message) in step.conditions() {
                assert!(
                    [
                        MAINTENANCE_PLANNED,
                        DRAIN_IN_PROGRESS,
                        DRAINED,
                        MAINTENANCE_IN_PROGRESS
                    ]
                    .contains(type_),
                    "{type_}"
                );
                assert!(message.contains("rota"), "{message}");
            }
        }
    }
}
