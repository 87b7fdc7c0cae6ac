//! Kubernetes Events on the Node: one for every transition but a node's queueing, and for
//! every unlock, retry and procedure outcome, sent in the background. Queueing disrupts
//! nothing, and a procedure for the whole fleet queues every node at once: `rota status`
//! shows the queue.

use kube::runtime::events::{Event, EventType};
use rota_core::{NodeName, NodeState, Process};
use rota_store::{Outcome, Transition, WindowChange};
use tracing::warn;

use super::KubeStore;

impl KubeStore {
    /// An Event on the node's Node object, sent in the background: it stays off the path of
    /// the transition that caused it, and a node's maintenance does not stop because its Event could
    /// not be written.
    pub(super) fn emit(
        &self,
        node: &NodeName,
        type_: EventType,
        reason: &'static str,
        note: String,
    ) {
        let reference = rota_kube_api::node_reference(node.as_str());
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Maintenance".into(),
            secondary: None,
        };
        let recorder = self.inner.recorder.clone();
        let node = node.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                warn!(node = %node, error = %e, reason, "could not record an Event on the Node");
            }
        });
    }
}

/// The Event of a transition of a node's agent, none for its queueing: a failure is a
/// warning.
pub(super) fn transition_event(
    transition: &Transition,
    node: &NodeName,
) -> Option<(EventType, &'static str, String)> {
    if matches!(transition.window, WindowChange::Queue { .. }) {
        return None;
    }
    let failed = matches!(transition.window, WindowChange::Fail { .. })
        || transition.to == NodeState::Failed;
    let type_ = if failed {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let reason = match (&transition.window, transition.to) {
        (WindowChange::Open, _) => "SlotAcquired",
        (WindowChange::Finish, _) => "MaintenanceFinished",
        (WindowChange::Fail { .. }, _) => "MaintenanceFailed",
        (WindowChange::Cancel { .. }, _) => "MaintenanceCanceled",
        (WindowChange::Postpone { .. }, _) => "MaintenancePostponed",
        (_, NodeState::Idle) => "Idle",
        (_, NodeState::Queued) => "Queued",
        (_, NodeState::Draining) => "Draining",
        (_, NodeState::Maintaining) => "Maintaining",
        (_, NodeState::Rebooting) => "Rebooting",
        (_, NodeState::Verifying) => "Verifying",
        (_, NodeState::Failed) => "Failed",
    };
    let mut note = format!("rota: node {node} {} → {}", transition.from, transition.to);
    match &transition.window {
        WindowChange::Fail { cause, .. } => note.push_str(&format!(": {cause}")),
        WindowChange::Cancel { reason } | WindowChange::Postpone { reason } => {
            note.push_str(&format!(": {reason}"));
        }
        _ => {}
    }
    Some((type_, reason, note))
}

/// The Event of a procedure's outcome on `node`.
pub(super) fn outcome_event(
    process: &Process,
    node: &NodeName,
    outcome: &Outcome,
) -> (EventType, &'static str, String) {
    match outcome {
        Outcome::Succeeded { .. } => (
            EventType::Normal,
            "ProcedureSucceeded",
            format!("rota: {process} succeeded on node {node}"),
        ),
        Outcome::Failed { cause, .. } => (
            EventType::Warning,
            "ProcedureFailed",
            format!("rota: {process} failed on node {node}: {cause}"),
        ),
    }
}
