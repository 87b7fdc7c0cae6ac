//! The status of each `Procedure`: where it stands on every node, counted.
//!
//! Who writes it: the store of each node's agent, after its own writes. Every RotaNode write
//! of this process passes through [`StatusReporter::observe`], which derives the state of each
//! procedure request of the node and, when one changed, hands it to a background task. That
//! task merge-patches `status.nodes.<node>`, the counts and the `Complete` condition of the
//! procedure, the patch carrying the `resourceVersion` it read (a compare-and-swap): agents of
//! many nodes write one Procedure at once, and a lost race reads again and retries. So the
//! status never slows down a node's maintenance, and one node's entry never overwrites
//! another's. Each entry carries the RotaNode `resourceVersion` it was derived from, so an older
//! observation (another process's, late) never replaces a newer one.
//!
//! A process that dies with observations still queued loses them, but only until its node's
//! agent starts again: what was reported is remembered per process, so the restarted agent's
//! first RotaNode write (its new session) reports every entry of the node again, changed or
//! not (test `a_restarted_agent_reports_an_entry_its_predecessor_lost`). An observation dropped
//! after [`ATTEMPTS`] lost compare-and-swaps waits for the node's next change of that request.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use rota_core::{NodeName, Process};
use rota_store::{Millis, now_millis};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::crd::{RequestStateName, RotaNode, RotaNodeStatus, Timestamp};
use crate::procedure::{
    NodeProcedureState, NodeProcedureStatus, Procedure, ProcedureCondition, ProcedureStatus,
};
use crate::view::revision;
use rota_kube_client::{is_conflict, is_not_found};

/// How often one status write may lose its compare-and-swap before the observation is dropped
/// (the node's next change writes it again).
const ATTEMPTS: u32 = 32;
/// How long a count of the matching Nodes is used before counting again.
const MATCHING_TTL: Millis = 30_000;
pub const COMPLETE: &str = "Complete";

/// One node's procedure entry, for procedure `procedure` (its name without the store prefix).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Observation {
    pub procedure: String,
    pub node: String,
    pub entry: NodeProcedureStatus,
}

/// Where each procedure request of a node stands, by the request, its backoff and its window:
/// open requests are pending or running, a failed attempt (it backs off) while still active is
/// failed, closed ones are succeeded or canceled.
pub(crate) fn procedure_states(
    status: &RotaNodeStatus,
) -> Vec<(String, NodeProcedureState, Option<String>)> {
    status
        .requests
        .iter()
        .filter_map(|r| {
            let Process::Mop(name) = &r.process else {
                return None;
            };
            let backoff = status.backoff.iter().find(|b| b.process == r.process);
            let (state, cause) = match (r.state, backoff) {
                (RequestStateName::Pending, _) => (NodeProcedureState::Pending, None),
                (RequestStateName::Active, Some(b)) => {
                    (NodeProcedureState::Failed, Some(b.cause.clone()))
                }
                (RequestStateName::Active, None) => (NodeProcedureState::Running, None),
                (RequestStateName::Done, _) => (NodeProcedureState::Succeeded, None),
                (RequestStateName::Canceled, _) => (NodeProcedureState::Canceled, None),
            };
            Some((name.clone(), state, cause))
        })
        .collect()
}

/// The counts and the `Complete` condition of `status`, from its node entries and the number
/// of matching Nodes. The condition's time moves only when its status does.
pub(crate) fn summarise(status: &mut ProcedureStatus, matching: u32, now: Millis) {
    let count = |state| {
        let n = status.nodes.values().filter(|e| e.state == state).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    };
    status.matching = matching;
    status.pending = count(NodeProcedureState::Pending);
    status.running = count(NodeProcedureState::Running);
    status.succeeded = count(NodeProcedureState::Succeeded);
    status.failed = count(NodeProcedureState::Failed);
    status.canceled = count(NodeProcedureState::Canceled);
    let nodes_in = |state| {
        let nodes: Vec<&str> = status
            .nodes
            .iter()
            .filter(|(_, e)| e.state == state)
            .map(|(n, _)| n.as_str())
            .collect();
        format!("{}: {}", nodes.len(), nodes.join(", "))
    };
    let settled = status.pending == 0 && status.running == 0;
    let (done, reason, message) = if status.failed > 0 {
        (
            false,
            "Failed",
            format!("failed on {}", nodes_in(NodeProcedureState::Failed)),
        )
    } else if settled && status.canceled > 0 {
        // A canceled procedure never runs again on its node: it cannot complete.
        (
            false,
            "Canceled",
            format!("canceled on {}", nodes_in(NodeProcedureState::Canceled)),
        )
    } else if matching == 0 {
        (false, "NoMatchingNodes", "no Node matches".to_string())
    } else if settled && status.succeeded >= matching {
        (
            true,
            "Succeeded",
            format!("succeeded on all {matching} matching nodes"),
        )
    } else {
        (
            false,
            "InProgress",
            format!(
                "succeeded on {} of {matching} matching nodes",
                status.succeeded
            ),
        )
    };
    let value = if done { "True" } else { "False" };
    let since = status
        .conditions
        .iter()
        .find(|c| c.type_ == COMPLETE && c.status == value)
        .map_or(Timestamp(now), |c| c.last_transition_time);
    status.conditions.retain(|c| c.type_ != COMPLETE);
    status.conditions.push(ProcedureCondition {
        type_: COMPLETE.into(),
        status: value.into(),
        reason: reason.into(),
        message,
        last_transition_time: since,
    });
}

/// Puts `observation` into `status` unless it holds a newer one for that node; whether it did.
pub(crate) fn merge(status: &mut ProcedureStatus, observation: &Observation) -> bool {
    match status.nodes.get(&observation.node) {
        Some(e) if e.observed_version >= observation.entry.observed_version => false,
        Some(e) if e.state == observation.entry.state && e.cause == observation.entry.cause => {
            false
        }
        _ => {
            status
                .nodes
                .insert(observation.node.clone(), observation.entry.clone());
            true
        }
    }
}

/// What was last reported for a (node, procedure): the state and the cause.
type Reported = (NodeProcedureState, Option<String>);

/// The handle of the store: remembers what it last reported per node and procedure, and
/// queues what changed for the background writer.
pub(crate) struct StatusReporter {
    queue: mpsc::UnboundedSender<Observation>,
    reported: Mutex<HashMap<(String, String), Reported>>,
}

impl StatusReporter {
    /// A reporter and the writer task's half of its queue.
    pub fn new() -> (StatusReporter, mpsc::UnboundedReceiver<Observation>) {
        let (queue, receiver) = mpsc::unbounded_channel();
        let reporter = StatusReporter {
            queue,
            reported: Mutex::new(HashMap::new()),
        };
        (reporter, receiver)
    }

    /// Looks at a RotaNode as written, and queues every procedure entry of its node that
    /// differs from the one last reported.
    pub fn observe(&self, object: &RotaNode) {
        let Some(status) = &object.status else {
            return;
        };
        // One whose revision does not parse cannot be ordered, and is not reported.
        let Some(version) = revision(&object.metadata) else {
            return;
        };
        let node = object.spec.node.clone();
        let now = now_millis();
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        for (procedure, state, cause) in procedure_states(status) {
            let key = (node.clone(), procedure.clone());
            if reported.get(&key) == Some(&(state, cause.clone())) {
                continue;
            }
            reported.insert(key, (state, cause.clone()));
            let observation = Observation {
                procedure,
                node: node.clone(),
                entry: NodeProcedureStatus {
                    state,
                    since: Timestamp(now),
                    cause,
                    observed_version: version,
                },
            };
            // The writer runs as long as the store; once it is gone, so is the status's reader.
            let _ = self.queue.send(observation);
        }
    }
}

/// The background writer: takes every queued observation, groups them by procedure, and
/// writes each procedure's status once. Runs until the store is dropped.
pub(crate) async fn write_statuses(
    api: Api<Procedure>,
    nodes: Api<Node>,
    prefix: String,
    mut queue: mpsc::UnboundedReceiver<Observation>,
) {
    let mut matching: HashMap<String, (Millis, u32)> = HashMap::new();
    while let Some(first) = queue.recv().await {
        let mut batch: BTreeMap<String, Vec<Observation>> = BTreeMap::new();
        batch
            .entry(first.procedure.clone())
            .or_default()
            .push(first);
        while let Ok(next) = queue.try_recv() {
            batch.entry(next.procedure.clone()).or_default().push(next);
        }
        for (procedure, observations) in batch {
            let name = format!("{prefix}{procedure}");
            if let Err(e) = write_one(&api, &nodes, &name, &observations, &mut matching).await {
                warn!(procedure = name, error = %e, "could not write the procedure's status");
            }
        }
    }
}

async fn write_one(
    api: &Api<Procedure>,
    nodes: &Api<Node>,
    name: &str,
    observations: &[Observation],
    matching: &mut HashMap<String, (Millis, u32)>,
) -> Result<(), kube::Error> {
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(crate::store::jitter(attempt)).await;
        }
        let Some(object) = api.get_opt(name).await? else {
            debug!(
                procedure = name,
                "no such Procedure object: its status is not written"
            );
            return Ok(());
        };
        let mut status = object.status.clone().unwrap_or_default();
        let mut changed: BTreeMap<&str, &NodeProcedureStatus> = BTreeMap::new();
        for observation in observations {
            if merge(&mut status, observation) {
                changed.insert(&observation.node, &observation.entry);
            }
        }
        let now = now_millis();
        let count = match matching.get(name) {
            Some((at, count)) if now - at < MATCHING_TTL => *count,
            _ => {
                let count = count_matching(nodes, &object).await?;
                matching.insert(name.into(), (now, count));
                count
            }
        };
        let before = status.clone();
        summarise(&mut status, count, now);
        if changed.is_empty() && status == before {
            return Ok(());
        }
        // Only the changed nodes' entries: a merge patch keeps the others as they are. The
        // resourceVersion makes it a compare-and-swap, so the counts agree with the entries.
        let patch = json!({
            "metadata": { "resourceVersion": object.metadata.resource_version },
            "status": {
                "nodes": changed,
                "matching": status.matching,
                "pending": status.pending,
                "running": status.running,
                "succeeded": status.succeeded,
                "failed": status.failed,
                "canceled": status.canceled,
                "conditions": status.conditions,
            },
        });
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_conflict(&e) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    warn!(
        procedure = name,
        attempts = ATTEMPTS,
        "the procedure's status changed under every attempt; leaving it to the next change"
    );
    Ok(())
}

/// How many Nodes the procedure applies to: its selector as a label selector, then its list
/// of node names.
async fn count_matching(nodes: &Api<Node>, object: &Procedure) -> Result<u32, kube::Error> {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let Ok(spec) = object.spec.to_spec(name) else {
        return Ok(0);
    };
    let selector: Vec<String> = spec
        .node_selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let list = nodes
        .list_metadata(&ListParams::default().labels(&selector.join(",")))
        .await?;
    let count = list
        .items
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .filter_map(|n| NodeName::new(n).ok())
        .filter(|n| spec.nodes.is_empty() || spec.nodes.contains(n))
        .count();
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use rota_core::NodeState;

    use super::*;
    use crate::crd::{BackoffStatus, RequestStatus};

    const T: Millis = 1_800_000_000_000;

    fn request(process: &str, state: RequestStateName) -> RequestStatus {
        RequestStatus {
            id: 1,
            process: process.parse().expect("process"),
            source: "procedure".into(),
            created_at: Timestamp(T),
            state,
            finished_at: None,
        }
    }

    fn entry(state: NodeProcedureState, version: u64) -> NodeProcedureStatus {
        NodeProcedureStatus {
            state,
            since: Timestamp(T),
            cause: None,
            observed_version: version,
        }
    }

    #[test]
    fn each_procedure_request_has_a_state_and_others_are_left_out() {
        let status = RotaNodeStatus {
            state: NodeState::Maintaining,
            requests: vec![
                request("reboot", RequestStateName::Active),
                request("mop/a", RequestStateName::Pending),
                request("mop/b", RequestStateName::Active),
                request("mop/c", RequestStateName::Active),
                request("mop/d", RequestStateName::Done),
                request("mop/e", RequestStateName::Canceled),
            ],
            backoff: vec![BackoffStatus {
                process: "mop/c".parse().expect("process"),
                until: Timestamp(T),
                last_interval_seconds: 60,
                cause: "exit 3".into(),
            }],
            ..RotaNodeStatus::default()
        };
        let states = procedure_states(&status);
        use NodeProcedureState::*;
        assert_eq!(
            states,
            vec![
                ("a".into(), Pending, None),
                ("b".into(), Running, None),
                ("c".into(), Failed, Some("exit 3".into())),
                ("d".into(), Succeeded, None),
                ("e".into(), Canceled, None),
            ]
        );
    }

    #[test]
    fn an_older_observation_never_replaces_a_newer_one() {
        let mut status = ProcedureStatus::default();
        let observe = |state, version| Observation {
            procedure: "p".into(),
            node: "n1".into(),
            entry: entry(state, version),
        };
        assert!(merge(
            &mut status,
            &observe(NodeProcedureState::Running, 10)
        ));
        assert!(!merge(
            &mut status,
            &observe(NodeProcedureState::Pending, 9)
        ));
        assert!(!merge(
            &mut status,
            &observe(NodeProcedureState::Running, 11)
        ));
        assert!(merge(
            &mut status,
            &observe(NodeProcedureState::Succeeded, 12)
        ));
        assert_eq!(status.nodes["n1"].state, NodeProcedureState::Succeeded);
    }

    #[test]
    fn complete_when_every_matching_node_succeeded() {
        let mut status = ProcedureStatus::default();
        status
            .nodes
            .insert("a".into(), entry(NodeProcedureState::Succeeded, 1));
        status
            .nodes
            .insert("b".into(), entry(NodeProcedureState::Running, 1));
        summarise(&mut status, 2, T);
        assert_eq!((status.succeeded, status.running), (1, 1));
        let complete = &status.conditions[0];
        assert_eq!(
            (complete.status.as_str(), complete.reason.as_str()),
            ("False", "InProgress")
        );
        assert_eq!(complete.message, "succeeded on 1 of 2 matching nodes");

        status
            .nodes
            .insert("b".into(), entry(NodeProcedureState::Succeeded, 2));
        summarise(&mut status, 2, T + 5);
        assert_eq!(status.conditions.len(), 1);
        let complete = &status.conditions[0];
        assert_eq!(complete.status, "True");
        assert_eq!(complete.last_transition_time, Timestamp(T + 5));
        summarise(&mut status, 2, T + 9);
        assert_eq!(
            status.conditions[0].last_transition_time,
            Timestamp(T + 5),
            "the time moves only with the status"
        );

        summarise(&mut status, 3, T + 10);
        assert_eq!(
            status.conditions[0].status, "False",
            "a third matching node has not run it"
        );
        status
            .nodes
            .insert("c".into(), entry(NodeProcedureState::Failed, 1));
        summarise(&mut status, 3, T + 11);
        assert_eq!(status.conditions[0].reason, "Failed");
        assert_eq!(status.conditions[0].message, "failed on 1: c");
        summarise(&mut status, 0, T + 12);
        assert_eq!(status.failed, 1);

        status
            .nodes
            .insert("c".into(), entry(NodeProcedureState::Canceled, 2));
        summarise(&mut status, 3, T + 13);
        assert_eq!(
            (status.conditions[0].reason.as_str(), status.canceled),
            ("Canceled", 1)
        );
        assert_eq!(status.conditions[0].message, "canceled on 1: c");
    }
}
