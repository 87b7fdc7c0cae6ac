//! FleetLock hosts on kwok nodes: a Node labelled as a FleetLock host, whose status reports
//! what a Fedora CoreOS host's kubelet would (a machine id, a boot id, an InternalIP), where
//! the InternalIP is an address of this machine's loopback (127.0.0.0/8), so that a test's
//! client can send its requests from it.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{NodeAddress, NodeSystemInfo};
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::testenv::Scope;

/// The label (value `true`) of a FleetLock host: `rota_fleetlock_kube::HOST_LABEL`, which the
/// FleetLock tests check it is.
pub const HOST_LABEL: &str = "rota.dev/fleetlock";

/// What a host's kubelet reports of it.
#[derive(Clone, Debug)]
pub struct HostStatus {
    /// `/etc/machine-id`: 32 hexadecimal digits.
    pub machine_id: String,
    pub boot_id: String,
    /// `None`: the Node lists no InternalIP.
    pub address: Option<IpAddr>,
}

/// A machine id of 32 hexadecimal digits, different for each `n` and each scope.
pub fn machine_id(scope: &Scope, n: u32) -> String {
    let seed = scope.id().bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{seed:016x}{n:016x}")
}

/// A Ready kwok node `<scope id>-<short>`, labelled a FleetLock host (`host`) or not, whose
/// status reports `status` from its creation on; returns its name.
pub async fn create_node(
    scope: &Scope,
    short: &str,
    host: bool,
    status: &HostStatus,
) -> Result<String> {
    let name = scope
        .create_node_with(short, |node| {
            if host {
                node.labels_mut()
                    .insert(HOST_LABEL.to_owned(), "true".to_owned());
            }
            let reported = node.status.get_or_insert_default();
            reported.addresses = Some(addresses(
                &node.metadata.name.clone().unwrap_or_default(),
                status,
            ));
            reported.node_info = Some(NodeSystemInfo {
                machine_id: status.machine_id.clone(),
                boot_id: status.boot_id.clone(),
                ..NodeSystemInfo::default()
            });
        })
        .await?;
    scope
        .wait_node_ready(&name, Duration::from_secs(60))
        .await?;
    Ok(name)
}

fn addresses(node: &str, status: &HostStatus) -> Vec<NodeAddress> {
    let hostname = NodeAddress {
        type_: "Hostname".into(),
        address: node.into(),
    };
    match status.address {
        Some(address) => vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: address.to_string(),
            },
            hostname,
        ],
        None => vec![hostname],
    }
}

/// Writes `status` into the Node's status, as its kubelet reports a change.
pub async fn report(scope: &Scope, node: &str, status: &HostStatus) -> Result<()> {
    let patch = json!({
        "status": {
            "addresses": addresses(node, status),
            "nodeInfo": { "machineID": status.machine_id, "bootID": status.boot_id },
        }
    });
    scope
        .nodes()
        .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("writing the status of node {node}"))?;
    Ok(())
}

/// What the host's kubelet reports once the host is back from a reboot: a new boot id.
pub async fn set_boot_id(scope: &Scope, node: &str, boot_id: &str) -> Result<()> {
    let patch = json!({ "status": { "nodeInfo": { "bootID": boot_id } } });
    scope
        .nodes()
        .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("writing the boot id of node {node}"))?;
    Ok(())
}
