//! The Node object: cordon, uncordon, and what its status says.

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::error::{Error, Result};
use crate::health_gate::EVICTED_ANNOTATION;
use crate::node_labels::NodeLabels;

pub(crate) async fn get(client: &Client, node: &str) -> Result<Node> {
    Api::<Node>::all(client.clone())
        .get_opt(node)
        .await
        .map_err(|e| Error::api("get", "nodes", node, e))?
        .ok_or_else(|| Error::NodeNotFound {
            node: node.to_owned(),
        })
}

/// Merge patches only the fields concerned: it cannot overwrite a concurrent change to anything
/// else on the Node, and setting the value a field already has is a no-op, so repeating one is
/// safe.
pub(crate) async fn patch_node(
    client: &Client,
    node: &str,
    patch: serde_json::Value,
) -> Result<Node> {
    match Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(patched) => Ok(patched),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(Error::NodeNotFound {
            node: node.to_owned(),
        }),
        Err(e) => Err(Error::api("patch", "nodes", node, e)),
    }
}

/// Patches the Node's `status` subresource (`nodes/status`) with the strategic merge patch
/// `patch`. Strategic, not the merge patch of [`patch_node`]: a merge patch replaces a list
/// whole, and `status.conditions` is one list that the kubelet (Ready, MemoryPressure...) and
/// other controllers write too, while a strategic merge patch merges it by `type`, as the
/// kubelet's own status writes do, so only the entries named in `patch` change.
pub(crate) async fn patch_status(
    client: &Client,
    node: &str,
    patch: serde_json::Value,
) -> Result<()> {
    match Api::<Node>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(Error::NodeNotFound {
            node: node.to_owned(),
        }),
        Err(e) => Err(Error::api("patch", "nodes/status", node, e)),
    }
}

/// Marks the node unschedulable, as `kubectl cordon` does, and sets the cordon's `labels` in
/// the same write; returns the Node as the cordon left it.
pub async fn cordon(client: &Client, node: &str, labels: &NodeLabels) -> Result<Node> {
    let patch = json!({
        "metadata": { "labels": labels.on_cordon() },
        "spec": { "unschedulable": true },
    });
    patch_node(client, node, patch).await
}

/// Makes the node schedulable again, as `kubectl uncordon` does. In the same write it forgets
/// what rota's drain evicted ([`EVICTED_ANNOTATION`]; rota uncordons when a window ends) and
/// sets the uncordon's `labels`, removing the cordon's others.
pub async fn uncordon(client: &Client, node: &str, labels: &NodeLabels) -> Result<()> {
    patch_node(client, node, uncordon_patch(labels))
        .await
        .map(drop)
}

/// The merge patch of [`uncordon`].
pub(crate) fn uncordon_patch(labels: &NodeLabels) -> serde_json::Value {
    json!({
        "metadata": {
            "annotations": { EVICTED_ANNOTATION: null },
            "labels": labels.on_uncordon(),
        },
        "spec": { "unschedulable": false },
    })
}

/// The effect of the taint of [`set_prefer_no_schedule`].
const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";

/// Rounds of read and compare-and-swap before [`set_prefer_no_schedule`] gives up for now.
const TAINT_ATTEMPTS: usize = 5;

/// Adds (`present`) or removes the taint `key:PreferNoSchedule` on the node, leaving its other
/// taints as they are. The taints are one list that others write too (the node lifecycle
/// controller, operators), so the write is a compare-and-swap: a merge patch that carries the
/// resourceVersion it was computed from, which the API server refuses with a conflict if the
/// Node changed since.
pub(crate) async fn set_prefer_no_schedule(
    client: &Client,
    node: &str,
    key: &str,
    present: bool,
) -> Result<()> {
    let mut last = None;
    for _ in 0..TAINT_ATTEMPTS {
        let object = get(client, node).await?;
        let mut taints = object.spec.and_then(|spec| spec.taints).unwrap_or_default();
        let ours = |t: &Taint| t.key == key && t.effect == PREFER_NO_SCHEDULE;
        if taints.iter().any(ours) == present {
            return Ok(());
        }
        if present {
            taints.push(Taint {
                key: key.to_owned(),
                effect: PREFER_NO_SCHEDULE.to_owned(),
                ..Taint::default()
            });
        } else {
            taints.retain(|t| !ours(t));
        }
        let patch = json!({
            "metadata": { "resourceVersion": object.metadata.resource_version },
            "spec": { "taints": taints },
        });
        match patch_node(client, node, patch).await {
            Ok(_) => return Ok(()),
            Err(Error::Call(call)) => match call.refused_with(409) {
                Some(status) => last = Some(status.message.clone()),
                None => return Err(Error::Call(call)),
            },
            Err(e) => return Err(e),
        }
    }
    Err(Error::TaintsContended {
        node: node.to_owned(),
        attempts: TAINT_ATTEMPTS,
        detail: last.unwrap_or_default(),
    })
}

/// Whether the node is marked unschedulable.
pub async fn is_cordoned(client: &Client, node: &str) -> Result<bool> {
    let node = get(client, node).await?;
    Ok(node.spec.and_then(|s| s.unschedulable).unwrap_or(false))
}

/// Whether any Node carries the label `key`, whatever its value: a list of at most one.
pub async fn any_carries(client: &Client, key: &str) -> Result<bool> {
    let listed = Api::<Node>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().labels(key).limit(1))
        .await
        .map_err(|e| Error::api("list", "nodes", key, e))?;
    Ok(!listed.items.is_empty())
}

/// The Node's labels.
pub async fn labels(
    client: &Client,
    node: &str,
) -> Result<std::collections::BTreeMap<String, String>> {
    Ok(get(client, node).await?.metadata.labels.unwrap_or_default())
}

/// Succeeds with the Node as read when its `Ready` condition is `True`; otherwise says what the
/// condition says.
pub async fn check_ready(client: &Client, node: &str) -> Result<Node> {
    let object = get(client, node).await?;
    let ready = object
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .cloned();
    let detail = match ready {
        Some(c) if c.status == "True" => return Ok(object),
        Some(c) => {
            let mut detail = format!("condition Ready is {}", c.status);
            for part in [c.reason, c.message].into_iter().flatten() {
                detail.push_str(": ");
                detail.push_str(&part);
            }
            detail
        }
        None => "it reports no Ready condition".to_owned(),
    };
    Err(Error::NodeNotReady {
        node: node.to_owned(),
        detail,
    })
}
