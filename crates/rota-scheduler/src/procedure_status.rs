//! The status of each `Procedure`: where it stands on every node, counted. One writer: the
//! leading scheduler.
//!
//! The scheduler follows the Procedures and the Nodes' metadata (their labels: a procedure's
//! selector) with kube-runtime's reflectors, beside the RotaNodes it schedules. After each
//! change of any of them, while it leads, it derives the state of every procedure request of
//! every RotaNode ([`procedure_states`]), puts the ones that changed into the status of their
//! Procedure ([`merge`]), counts the matching Nodes and sums up ([`summarise`]), and writes a
//! Procedure's status only when it differs from the one its reflector holds: a merge patch of
//! the changed entries, the counts and the conditions, carrying the `resourceVersion` it was
//! computed from (a compare-and-swap; one that loses is computed again on the watch's news).
//!
//! Entries are never removed: an entry of a node that no RotaNode of this installation shows
//! (its node deleted, or a node of another installation in the same cluster) stays. Each entry
//! carries the RotaNode `resourceVersion` it was derived from, so an older read (a deposed
//! leader's, late) never replaces a newer one. A status that lost a write (or was edited by
//! hand) is written again on the next change, or by the next leader, which computes every
//! status on its first read.
//!
//! A scheduler writes only the Procedures named with its prefix
//! ([`crate::SchedulerConfig::name_prefix`]), and each procedure request `mop/<name>` of a node
//! is the Procedure `<prefix><name>`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use rota_core::{NodeName, Process};
use rota_kube_api::crd::{RequestStateName, RotaNodeStatus, Timestamp};
use rota_kube_api::procedure::{
    NodeProcedureState, NodeProcedureStatus, ProcedureCondition, ProcedureStatus,
};
use rota_kube_api::{CONFIG_MAP, Procedure, RotaNode};
use rota_kube_client::{is_conflict, is_not_found};
use rota_store::{Millis, RetryPauses, now_millis};
use rota_store_kube::{PROCEDURES_KEY, procedures_fingerprint};
use serde_json::json;
use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::fleet::{Fleet, follow};

pub const COMPLETE: &str = "Complete";
/// How soon a status whose write failed (other than a lost compare-and-swap, which the watch
/// answers) is computed again.
const RETRY: Duration = Duration::from_secs(2);
/// How long after a change the statuses are computed: the changes that come meanwhile are
/// read with it.
const SETTLE: Duration = Duration::from_millis(200);

/// One node's entry, for the Procedure it belongs to.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Observation {
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
        .procedures
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

/// Puts `observation` into `status` unless it holds a newer one for that node, or one of the
/// same state and cause (whose `since` stays); whether it did.
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

/// Every procedure entry of `nodes`, by the name of its Procedure object (`prefix` before the
/// procedure's name), each dated `now`.
pub(crate) fn observations(
    nodes: &[Arc<RotaNode>],
    prefix: &str,
    now: Millis,
) -> BTreeMap<String, Vec<Observation>> {
    let mut by_procedure: BTreeMap<String, Vec<Observation>> = BTreeMap::new();
    for node in nodes {
        let Some(status) = &node.status else {
            continue;
        };
        // One whose revision does not parse cannot be ordered, and is not reported.
        let Some(version) = node
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        for (procedure, state, cause) in procedure_states(status) {
            by_procedure
                .entry(format!("{prefix}{procedure}"))
                .or_default()
                .push(Observation {
                    node: node.spec.node.clone(),
                    entry: NodeProcedureStatus {
                        state,
                        since: Timestamp(now),
                        cause,
                        observed_version: version,
                    },
                });
        }
    }
    by_procedure
}

/// How many of `nodes` the procedure applies to: its selector, then its list of node names.
/// A spec that does not read matches none.
fn count_matching(object: &Procedure, nodes: &[Arc<PartialObjectMeta<Node>>]) -> u32 {
    let Ok(spec) = object.spec.to_spec(&object.name_any()) else {
        return 0;
    };
    let count = nodes
        .iter()
        .filter(|n| {
            let labels = n.labels();
            spec.node_selector
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
        .filter_map(|n| NodeName::new(n.name_any()).ok())
        .filter(|n| spec.nodes.is_empty() || spec.nodes.contains(n))
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// What one Procedure's status write sends: the entries that changed, the counts and the
/// conditions; `None` when the status is as it should be.
pub(crate) fn status_patch(
    object: &Procedure,
    observations: &[Observation],
    matching: u32,
    now: Millis,
) -> Option<serde_json::Value> {
    let mut status = object.status.clone().unwrap_or_default();
    let mut changed: BTreeMap<&str, &NodeProcedureStatus> = BTreeMap::new();
    for observation in observations {
        if merge(&mut status, observation) {
            changed.insert(&observation.node, &observation.entry);
        }
    }
    let before = status.clone();
    summarise(&mut status, matching, now);
    if changed.is_empty() && status == before && object.status.is_some() {
        return None;
    }
    // Only the changed entries: a merge patch keeps the others. The resourceVersion makes it a
    // compare-and-swap, so the counts agree with the entries.
    Some(json!({
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
    }))
}

/// The Procedures and the Nodes' metadata, followed with reflectors, and the writer of the
/// Procedures' status.
pub(crate) struct Statuses {
    procedures: Store<Procedure>,
    nodes: Store<PartialObjectMeta<Node>>,
    ready: [Arc<AtomicBool>; 2],
    tasks: Vec<AbortHandle>,
    api: Api<Procedure>,
    prefix: String,
}

impl Drop for Statuses {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Statuses {
    /// Starts following the Procedures and the Nodes' labels, telling `changed` of each change
    /// that may move a status.
    pub(crate) fn follow(client: Client, prefix: &str, changed: Arc<Notify>) -> Statuses {
        let api: Api<Procedure> = Api::all(client.clone());
        let (procedures, procedures_writer) = reflector::store();
        let (nodes, nodes_writer) = reflector::store();
        let ready: [Arc<AtomicBool>; 2] = Default::default();
        let nodes_api: Api<PartialObjectMeta<Node>> = Api::all(client);
        // A Node's status changes often; only its labels (and its coming and going) count.
        let mut labels: HashMap<String, BTreeMap<String, String>> = HashMap::new();
        let label_news = move |event: &watcher::Event<PartialObjectMeta<Node>>| match event {
            watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                let name = node.name_any();
                if labels.get(&name) == Some(node.labels()) {
                    false
                } else {
                    labels.insert(name, node.labels().clone());
                    true
                }
            }
            watcher::Event::Delete(node) => labels.remove(&node.name_any()).is_some(),
            watcher::Event::Init => {
                labels.clear();
                false
            }
            watcher::Event::InitDone => true,
        };
        let tasks = vec![
            follow(
                watcher(api.clone(), watcher::Config::default()).reflect(procedures_writer),
                ready[0].clone(),
                vec![changed.clone()],
                |_| true,
            ),
            follow(
                watcher(nodes_api, watcher::Config::default()).reflect(nodes_writer),
                ready[1].clone(),
                vec![changed],
                label_news,
            ),
        ];
        Statuses {
            procedures,
            nodes,
            ready,
            tasks,
            api,
            prefix: prefix.into(),
        }
    }

    fn ready(&self) -> bool {
        self.ready.iter().all(|r| r.load(Ordering::SeqCst))
    }

    /// Whether any Procedure has this scheduler's prefix: with none, the RotaNodes are not
    /// even read.
    fn any(&self) -> bool {
        self.procedures
            .state()
            .iter()
            .any(|p| p.name_any().starts_with(&self.prefix))
    }

    /// Publishes the Procedures' fingerprint in `rota-config` unless `shown` there already:
    /// the agents list the procedures again only when it changes (see
    /// `rota_store_kube::procedures_fingerprint`). An apply, which makes `rota-config` when
    /// there is none. Whether it is there.
    async fn publish(&self, config_maps: &Api<ConfigMap>, shown: Option<&str>) -> bool {
        let procedures = self.procedures.state();
        let fingerprint =
            procedures_fingerprint(&self.prefix, procedures.iter().map(|p| &p.metadata));
        if shown == Some(fingerprint.as_str()) {
            return true;
        }
        let patch = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": CONFIG_MAP },
            "data": { PROCEDURES_KEY: fingerprint },
        });
        let params = PatchParams::apply("rota-scheduler").force();
        match config_maps
            .patch(CONFIG_MAP, &params, &Patch::Apply(&patch))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                warn!(error = %e, "could not publish the procedures' fingerprint in rota-config; trying again");
                false
            }
        }
    }

    /// Writes the status of every Procedure of this scheduler's prefix that differs from what
    /// `rota_nodes` show, while `leading`; whether every write that was due went through or
    /// lost only a compare-and-swap (which the watch answers).
    async fn update(&self, rota_nodes: &[Arc<RotaNode>], leading: &watch::Receiver<bool>) -> bool {
        let now = now_millis();
        let observed = observations(rota_nodes, &self.prefix, now);
        let nodes = self.nodes.state();
        let mut done = true;
        for object in self.procedures.state() {
            let name = object.name_any();
            if !name.starts_with(&self.prefix) {
                continue;
            }
            let matching = count_matching(&object, &nodes);
            let mine = observed.get(&name).map_or(&[][..], Vec::as_slice);
            let Some(patch) = status_patch(&object, mine, matching, now) else {
                continue;
            };
            if !*leading.borrow() {
                return true;
            }
            match self
                .api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => debug!(procedure = name, "wrote the procedure's status"),
                Err(e) if is_conflict(&e) || is_not_found(&e) => {
                    debug!(
                        procedure = name,
                        "the procedure changed since its read; its watch tells"
                    );
                }
                Err(e) => {
                    warn!(procedure = name, error = %e, "could not write the procedure's status; trying again");
                    done = false;
                }
            }
        }
        done
    }
}

/// When an attempt that failed is due again: after growing pauses, whatever wakes the loop
/// in between. A fingerprint that cannot be published (no `rota-config` yet, which a cluster
/// of FleetLock hosts only may never have) is then tried every few seconds, not at every
/// change of a RotaNode.
#[derive(Default)]
struct Paced {
    pauses: RetryPauses,
    after: Option<Instant>,
}

impl Paced {
    fn due(&self, now: Instant) -> bool {
        self.after.is_none_or(|after| now >= after)
    }

    fn tried(&mut self, succeeded: bool, now: Instant) {
        if succeeded {
            self.pauses.reset();
            self.after = None;
        } else {
            self.after = Some(now + self.pauses.next_pause());
        }
    }
}

/// Keeps every Procedure's status, and their fingerprint in `rota-config` of `namespace`,
/// while this scheduler leads, until `cancel`.
pub(crate) fn keep(
    client: Client,
    namespace: &str,
    prefix: &str,
    fleet: Arc<Fleet>,
    mut leading: watch::Receiver<bool>,
    cancel: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let changed = Arc::new(Notify::new());
    let rota_node_news = fleet.rota_node_news();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let statuses = Statuses::follow(client, prefix, changed.clone());
    async move {
        let mut retry = false;
        let mut publishing = Paced::default();
        loop {
            let wait = if retry {
                RETRY
            } else {
                Duration::from_secs(3600)
            };
            tokio::select! {
                () = cancel.cancelled() => break,
                lead = leading.changed() => if lead.is_err() { break },
                () = changed.notified() => {}
                () = rota_node_news.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
            if !*leading.borrow() || !fleet.ready() || !statuses.ready() {
                continue;
            }
            retry = true;
            if publishing.due(Instant::now()) {
                let shown = fleet.config_value(PROCEDURES_KEY);
                let published = statuses.publish(&config_maps, shown.as_deref()).await;
                publishing.tried(published, Instant::now());
                retry = !published;
            }
            if !statuses.any() {
                continue;
            }
            // Changes that come together are read together: a fleet under way changes its
            // RotaNodes many times a second, and each read decodes every one of them.
            tokio::time::sleep(SETTLE).await;
            retry |= !statuses.update(&fleet.rota_nodes(), &leading).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use rota_core::NodeState;

    #[test]
    fn a_failed_publish_is_not_tried_again_before_its_pause_whatever_wakes_the_loop() {
        let start = tokio::time::Instant::now();
        let mut paced = super::Paced::default();
        assert!(paced.due(start));
        paced.tried(false, start);
        // Every RotaNode change wakes the loop; none of them within the pause retries.
        for ms in [0, 10, 100, 500, 900] {
            assert!(!paced.due(start + Duration::from_millis(ms)), "{ms} ms");
        }
        assert!(paced.due(start + Duration::from_secs(2)));
        let again = start + Duration::from_secs(2);
        paced.tried(false, again);
        assert!(
            !paced.due(again + Duration::from_millis(1900)),
            "the pause grows"
        );
        paced.tried(true, again);
        assert!(paced.due(again), "a success ends the pauses");
    }
    use rota_kube_api::crd::{BackoffStatus, RequestStatus};
    use rota_store_kube::record::new_status;

    use super::*;

    const T: Millis = 1_800_000_000_000;

    fn request(process: &str, state: RequestStateName) -> RequestStatus {
        RequestStatus {
            id: 1,
            process: process.parse().expect("process"),
            source: "procedure".into(),
            created_at: Timestamp(T),
            state,
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
            procedures: vec![
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
            ..new_status(T)
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

    fn rota_node(node: &str, version: &str, procedures: Vec<RequestStatus>) -> RotaNode {
        let mut object = RotaNode::new(
            &format!("p-{node}"),
            rota_kube_api::RotaNodeSpec {
                node: node.into(),
                grant: None,
                withdrawn: None,
            },
        );
        object.metadata.resource_version = Some(version.into());
        object.status = Some(RotaNodeStatus {
            procedures,
            ..new_status(T)
        });
        object
    }

    #[test]
    fn each_entry_goes_to_the_procedure_of_the_prefix_and_a_status_as_it_should_be_is_not_written()
    {
        let nodes = [
            rota_node(
                "a",
                "7",
                vec![request("mop/kernel", RequestStateName::Pending)],
            ),
            rota_node(
                "b",
                "9",
                vec![request("mop/kernel", RequestStateName::Done)],
            ),
            rota_node(
                "c",
                "not a number",
                vec![request("mop/kernel", RequestStateName::Done)],
            ),
        ]
        .map(Arc::new);
        let observed = observations(&nodes, "p-", T);
        assert_eq!(observed.keys().collect::<Vec<_>>(), ["p-kernel"]);
        let entries = &observed["p-kernel"];
        assert_eq!(entries.len(), 2, "c's version does not read: {entries:?}");

        let mut object = Procedure::new("p-kernel", Default::default());
        object.metadata.resource_version = Some("100".into());
        let patch = status_patch(&object, entries, 2, T).expect("a first status");
        assert_eq!(patch["metadata"]["resourceVersion"], "100");
        assert_eq!(patch["status"]["nodes"]["a"]["state"], "pending");
        assert_eq!(patch["status"]["nodes"]["b"]["observedVersion"], 9);
        assert_eq!(
            (
                patch["status"]["pending"].clone(),
                patch["status"]["succeeded"].clone()
            ),
            (json!(1), json!(1))
        );

        // The status as written: the same read again writes nothing, later or not.
        let mut status: ProcedureStatus =
            serde_json::from_value(patch["status"].clone()).expect("a status");
        summarise(&mut status, 2, T);
        object.status = Some(status);
        assert_eq!(status_patch(&object, entries, 2, T + 1000), None);
        // Another matching Node: the counts change, no entry does.
        let patch = status_patch(&object, entries, 3, T + 1000).expect("a new count");
        assert_eq!(patch["status"]["nodes"], json!({}));
        assert_eq!(patch["status"]["matching"], 3);
    }
}
