//! The health gate before a slot goes back: the workloads the drain evicted are whole again
//! somewhere, and, optionally, every PodDisruptionBudget in the cluster is satisfied again.
//!
//! What the drain evicted is remembered on the Node itself, in the annotation
//! [`EVICTED_ANNOTATION`]: it survives an agent restart and the node's reboot, and an operator
//! can read it with `kubectl get node -o yaml`. The drain writes it before the first eviction;
//! the uncordon at the end of the window removes it.

use std::collections::{BTreeSet, HashSet};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::Selector;
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tracing::{debug, info};

use crate::error::{Error, Result};

/// The Node annotation that holds what rota's drain evicted ([`Evicted`] as compact JSON).
pub const EVICTED_ANNOTATION: &str = "rota.dev/evicted";

/// PodDisruptionBudgets named in one reason at most; the rest are counted.
const PDBS_NAMED: usize = 5;

/// What a drain moved off the node: the controllers whose pods it evicted, and how many pods.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evicted {
    /// Pods evicted (or found terminating) by the drain, with a controller or without. After
    /// a drain that was repeated (an agent restart), the larger of the two drains' counts.
    pub count: u32,
    /// Of those, pods that no controller manages (evicted only with `force`): nothing brings
    /// them back, so they do not hold the gate.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unmanaged: u32,
    /// The controllers of the other pods; a ReplicaSet that a Deployment owns is recorded as
    /// that Deployment (a rollout may replace the ReplicaSet meanwhile).
    #[serde(default)]
    pub controllers: BTreeSet<Workload>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A controller of evicted pods.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Workload {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

impl Evicted {
    /// This record and `other` together: a repeated drain must not forget what the first one
    /// evicted (those pods are gone by then, so the second one does not see them).
    fn merge(&self, other: &Evicted) -> Evicted {
        Evicted {
            count: self.count.max(other.count),
            unmanaged: self.unmanaged.max(other.unmanaged),
            controllers: self
                .controllers
                .union(&other.controllers)
                .cloned()
                .collect(),
        }
    }
}

/// One pod leaving the node in a drain: its namespace and its controller, if any.
pub(crate) struct Leaving {
    pub namespace: String,
    pub controller: Option<OwnerReference>,
}

impl Leaving {
    pub(crate) fn of(pod: &Pod) -> Leaving {
        Leaving {
            namespace: pod.namespace().unwrap_or_default(),
            controller: pod
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .cloned(),
        }
    }
}

/// The annotation of `node`, if it has one.
pub async fn evicted(client: &Client, node: &str) -> Result<Option<Evicted>> {
    let object = Api::<Node>::all(client.clone())
        .get_opt(node)
        .await
        .map_err(|e| Error::api("get", "nodes", node, e))?
        .ok_or_else(|| Error::NodeNotFound {
            node: node.to_owned(),
        })?;
    parse(node, &object)
}

fn parse(node: &str, object: &Node) -> Result<Option<Evicted>> {
    let Some(text) = object.annotations().get(EVICTED_ANNOTATION) else {
        return Ok(None);
    };
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| Error::BadAnnotation {
            node: node.to_owned(),
            annotation: EVICTED_ANNOTATION,
            detail: e.to_string(),
        })
}

/// The workload a controller reference stands for: a ReplicaSet's Deployment, if it has one.
async fn workload(client: &Client, namespace: &str, owner: &OwnerReference) -> Result<Workload> {
    let mut workload = Workload {
        kind: owner.kind.clone(),
        namespace: namespace.to_owned(),
        name: owner.name.clone(),
    };
    if owner.kind == "ReplicaSet" {
        let object = format!("{namespace}/{}", owner.name);
        let replica_set = Api::<ReplicaSet>::namespaced(client.clone(), namespace)
            .get_opt(&owner.name)
            .await
            .map_err(|e| Error::api("get", "replicasets", object, e))?;
        let deployment = replica_set.as_ref().and_then(|rs| {
            rs.owner_references()
                .iter()
                .find(|o| o.controller == Some(true) && o.kind == "Deployment")
                .cloned()
        });
        if let Some(deployment) = deployment {
            workload.kind = deployment.kind;
            workload.name = deployment.name;
        }
    }
    Ok(workload)
}

/// Records on `node` what the drain is about to move off it (merged with what an earlier,
/// interrupted drain of the same window recorded). Called before the first eviction, so that
/// an agent killed in the middle still knows afterwards. `cordoned` is the Node as the drain's
/// cordon left it, which holds the earlier record.
pub(crate) async fn record(
    client: &Client,
    node: &str,
    cordoned: &Node,
    leaving: &[Leaving],
) -> Result<()> {
    let mut fresh = Evicted {
        count: u32::try_from(leaving.len()).unwrap_or(u32::MAX),
        ..Evicted::default()
    };
    let mut seen = HashSet::new();
    for pod in leaving {
        match &pod.controller {
            None => fresh.unmanaged = fresh.unmanaged.saturating_add(1),
            Some(owner) => {
                if seen.insert((
                    pod.namespace.as_str(),
                    owner.kind.as_str(),
                    owner.name.as_str(),
                )) {
                    fresh
                        .controllers
                        .insert(workload(client, &pod.namespace, owner).await?);
                }
            }
        }
    }
    let known = parse(node, cordoned)?.unwrap_or_default();
    let merged = known.merge(&fresh);
    if merged == known {
        return Ok(());
    }
    let text = serde_json::to_string(&merged).map_err(|e| Error::BadAnnotation {
        node: node.to_owned(),
        annotation: EVICTED_ANNOTATION,
        detail: e.to_string(),
    })?;
    let patch = json!({ "metadata": { "annotations": { EVICTED_ANNOTATION: text } } });
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::api("patch", "nodes", node, e))?;
    info!(node, evicted = %text, "recorded what the drain evicts");
    Ok(())
}

fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn controller_uid(object: &impl ResourceExt) -> Option<String> {
    object
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// List parameters for the objects `selector` selects; all of them if it cannot be expressed
/// (the owner check that follows keeps only the right ones anyway).
fn selecting(selector: &LabelSelector) -> ListParams {
    match Selector::try_from(selector.clone()) {
        Ok(selector) => ListParams::default().labels_from(&selector),
        Err(_) => ListParams::default(),
    }
}

/// How many of the pods in `namespace` that `selector` selects and whose controller is one of
/// `owners` are Ready. Counted from the pods, not from the controller's status: the status
/// lags behind, and right after a drain it may still count the evicted pods.
async fn ready_pods(
    client: &Client,
    namespace: &str,
    selector: &LabelSelector,
    owners: &HashSet<String>,
) -> Result<i32> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&selecting(selector))
        .await
        .map_err(|e| Error::api("list", "pods", format!("in namespace {namespace}"), e))?;
    let ready = pods
        .items
        .iter()
        .filter(|p| controller_uid(*p).is_some_and(|uid| owners.contains(&uid)) && is_ready(p))
        .count();
    Ok(i32::try_from(ready).unwrap_or(i32::MAX))
}

/// How far `workload` is from whole: `None` when as many of its pods are Ready as it wants, or
/// when it is gone (deleted, or a kind rota cannot count): nothing will bring those pods back.
async fn shortfall(client: &Client, workload: &Workload) -> Result<Option<String>> {
    let Workload {
        kind,
        namespace,
        name,
    } = workload;
    let object = format!("{namespace}/{name}");
    let (desired, ready) = match kind.as_str() {
        "Deployment" => {
            let Some(deployment) = Api::<Deployment>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(|e| Error::api("get", "deployments", object.clone(), e))?
            else {
                return gone(workload);
            };
            let spec = &deployment.spec;
            let selector = &spec.selector;
            let uid = deployment.uid().unwrap_or_default();
            // A Deployment's pods belong to its ReplicaSets, old and new alike.
            let replica_sets: HashSet<String> =
                Api::<ReplicaSet>::namespaced(client.clone(), namespace)
                    .list(&selecting(selector))
                    .await
                    .map_err(|e| Error::api("list", "replicasets", object.clone(), e))?
                    .items
                    .iter()
                    .filter(|rs| controller_uid(*rs).as_deref() == Some(uid.as_str()))
                    .filter_map(ResourceExt::uid)
                    .collect();
            let desired = spec.replicas.unwrap_or(1);
            (
                desired,
                ready_pods(client, namespace, selector, &replica_sets).await?,
            )
        }
        "ReplicaSet" => {
            let Some(replica_set) = Api::<ReplicaSet>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(|e| Error::api("get", "replicasets", object.clone(), e))?
            else {
                return gone(workload);
            };
            let spec = &replica_set.spec;
            let owners = replica_set.uid().into_iter().collect();
            let desired = spec.replicas.unwrap_or(1);
            let selector = &spec.selector;
            (
                desired,
                ready_pods(client, namespace, selector, &owners).await?,
            )
        }
        "StatefulSet" => {
            let Some(stateful_set) = Api::<StatefulSet>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(|e| Error::api("get", "statefulsets", object.clone(), e))?
            else {
                return gone(workload);
            };
            let spec = &stateful_set.spec;
            let owners = stateful_set.uid().into_iter().collect();
            let desired = spec.replicas.unwrap_or(1);
            let selector = &spec.selector;
            (
                desired,
                ready_pods(client, namespace, selector, &owners).await?,
            )
        }
        _ => {
            debug!(%workload, "not a kind whose pods rota counts; it does not hold the gate");
            return Ok(None);
        }
    };
    Ok((ready < desired).then(|| {
        format!(
            "{} of {desired} pods of {workload} are not Ready",
            desired - ready
        )
    }))
}

fn gone(workload: &Workload) -> Result<Option<String>> {
    info!(%workload, "an evicted pod's controller is gone; nothing to wait for");
    Ok(None)
}

/// Why the workloads evicted from `node` are not whole again, one reason per workload; empty
/// when they are (or when the node has no record of evictions).
pub async fn workloads_not_restored(client: &Client, node: &str) -> Result<Vec<String>> {
    let evicted = evicted(client, node).await?;
    not_restored(client, node, evicted).await
}

async fn not_restored(
    client: &Client,
    node: &str,
    evicted: Option<Evicted>,
) -> Result<Vec<String>> {
    let Some(evicted) = evicted else {
        return Ok(Vec::new());
    };
    if evicted.unmanaged > 0 {
        debug!(
            node,
            unmanaged = evicted.unmanaged,
            "pods without a controller were evicted; they do not come back"
        );
    }
    let mut reasons = Vec::new();
    for workload in &evicted.controllers {
        if let Some(reason) = shortfall(client, workload).await? {
            reasons.push(reason);
        }
    }
    Ok(reasons)
}

/// Every PodDisruptionBudget of the cluster that is not satisfied now, as
/// `namespace/name (why)`: fewer healthy pods than it wants, or a status that does not describe
/// its current spec.
pub async fn unsatisfied_pdbs(client: &Client) -> Result<Vec<String>> {
    let pdbs = Api::<PodDisruptionBudget>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::api("list", "poddisruptionbudgets", "in all namespaces", e))?;
    let mut unsatisfied = Vec::new();
    for pdb in &pdbs.items {
        let name = format!("{}/{}", pdb.namespace().unwrap_or_default(), pdb.name_any());
        let why = match &pdb.status {
            None => Some("no status yet".to_owned()),
            Some(s) if s.observed_generation != pdb.metadata.generation => {
                Some("its status is not up to date with its spec".to_owned())
            }
            Some(s) if s.current_healthy.unwrap_or(0) < s.desired_healthy.unwrap_or(0) => {
                Some(format!(
                    "{} of {} required pods healthy",
                    s.current_healthy.unwrap_or(0),
                    s.desired_healthy.unwrap_or(0)
                ))
            }
            Some(_) => None,
        };
        if let Some(why) = why {
            unsatisfied.push(format!("{name} ({why})"));
        }
    }
    Ok(unsatisfied)
}

/// The gate for `object`, the Node as just read (the health check reads it once, for `Ready`
/// and the gate): succeeds when the workloads the drain evicted from it are whole again and,
/// with `pdbs`, every PodDisruptionBudget of the cluster is satisfied; otherwise says what is
/// missing.
pub async fn check_gate(client: &Client, object: &Node, pdbs: bool) -> Result<()> {
    let node = object.name_any();
    let evicted = parse(&node, object)?;
    gate(client, &node, evicted, pdbs).await
}

async fn gate(client: &Client, node: &str, evicted: Option<Evicted>, pdbs: bool) -> Result<()> {
    let mut reasons = not_restored(client, node, evicted).await?;
    if pdbs {
        let unsatisfied = unsatisfied_pdbs(client).await?;
        if !unsatisfied.is_empty() {
            let mut named = unsatisfied
                .iter()
                .take(PDBS_NAMED)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if unsatisfied.len() > PDBS_NAMED {
                named.push_str(&format!(" and {} more", unsatisfied.len() - PDBS_NAMED));
            }
            reasons.push(format!("PodDisruptionBudgets not satisfied: {named}"));
        }
    }
    if reasons.is_empty() {
        return Ok(());
    }
    Err(Error::NotRestored {
        node: node.to_owned(),
        reasons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(kind: &str, name: &str) -> Workload {
        Workload {
            kind: kind.into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn the_annotation_is_compact_json_and_reads_back() -> serde_json::Result<()> {
        let evicted = Evicted {
            count: 4,
            unmanaged: 1,
            controllers: [workload("Deployment", "web"), workload("StatefulSet", "db")].into(),
        };
        let text = serde_json::to_string(&evicted)?;
        assert_eq!(
            text,
            r#"{"count":4,"unmanaged":1,"controllers":[{"kind":"Deployment","namespace":"default","name":"web"},{"kind":"StatefulSet","namespace":"default","name":"db"}]}"#
        );
        assert_eq!(serde_json::from_str::<Evicted>(&text)?, evicted);
        let bare: Evicted = serde_json::from_str(r#"{"count":0}"#)?;
        assert_eq!(bare, Evicted::default());
        Ok(())
    }

    #[test]
    fn a_repeated_drain_keeps_what_the_first_one_evicted() {
        let first = Evicted {
            count: 3,
            unmanaged: 1,
            controllers: [workload("Deployment", "web")].into(),
        };
        let second = Evicted {
            count: 1,
            unmanaged: 0,
            controllers: [workload("StatefulSet", "db")].into(),
        };
        let merged = first.merge(&second);
        assert_eq!(merged.count, 3);
        assert_eq!(merged.unmanaged, 1);
        assert_eq!(
            merged.controllers,
            [workload("Deployment", "web"), workload("StatefulSet", "db")].into()
        );
        assert_eq!(merged.merge(&second), merged);
    }
}
