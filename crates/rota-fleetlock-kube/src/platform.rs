//! [`KubePlatform`]: what the FleetLock server does to a host's Node, as `rota agent
//! --node-actions kube` does to its own (rota-kube-actions' [`KubeActions`]), and the boot id
//! the Node's kubelet reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};
use rota_actions::{ActionError, NodeActions, Reboot};
use rota_core::NodeName;
use rota_fleetlock::Platform;
use rota_kube_actions::{DrainOptions, KubeActions};

/// The reboot the hosts' actions are built with, which the server never starts: a host
/// reboots itself once its lock is granted. Were it ever started, it fails and says why,
/// where a signal to PID 1 would reboot the server's own machine.
const NO_REBOOT: &str = "echo 'rota fleetlock never reboots a host: the host reboots itself \
                         once its lock is granted' >&2; exit 1";

/// How the server acts on every host's Node (the flags of `rota agent --node-actions kube`).
#[derive(Clone, Debug)]
pub struct NodeActionsConfig {
    pub drain: DrainOptions,
    /// Also wait, before the slot goes back, until every PodDisruptionBudget is satisfied.
    pub health_pdbs: bool,
    /// rota's annotations of the reboot on the Node (`--annotate-nodes`).
    pub annotate_nodes: bool,
    /// The node lifecycle conditions of KEP-5683 on the Node (`--node-conditions`).
    pub node_conditions: bool,
    /// A command (`sh -c`, `ROTA_NODE` names the host) that must also succeed after the
    /// reboot, besides the Node's Ready condition and the health gate.
    pub health: Option<String>,
}

/// The Kubernetes API as the FleetLock hosts' platform.
pub struct KubePlatform {
    client: Client,
    nodes: Api<Node>,
    config: NodeActionsConfig,
    /// Each host's actions, made once: they carry what one call leaves for the next (the
    /// drain's progress, and whether the health check found the reboot annotation that the
    /// return to service then removes).
    actions: Mutex<HashMap<NodeName, Arc<KubeActions>>>,
}

impl KubePlatform {
    pub fn new(client: Client, config: NodeActionsConfig) -> KubePlatform {
        KubePlatform {
            nodes: Api::all(client.clone()),
            client,
            config,
            actions: Mutex::default(),
        }
    }
}

#[async_trait]
impl Platform for KubePlatform {
    fn actions(&self, node: &NodeName) -> Arc<dyn NodeActions> {
        let mut actions = self.actions.lock().unwrap_or_else(|e| e.into_inner());
        actions
            .entry(node.clone())
            .or_insert_with(|| {
                let config = &self.config;
                Arc::new(
                    KubeActions::new(
                        self.client.clone(),
                        node.clone(),
                        config.drain.clone(),
                        Reboot::Command(NO_REBOOT.to_owned()),
                        config.health.clone(),
                    )
                    .health_pdbs(config.health_pdbs)
                    .annotate_nodes(config.annotate_nodes)
                    .node_conditions(config.node_conditions),
                )
            })
            .clone()
    }

    /// The Node's `status.nodeInfo.bootID`, read now: its kubelet reports a new one once the
    /// host is back from its reboot. `None` for a Node that reports none, or is gone.
    async fn boot_id(&self, node: &NodeName) -> Result<Option<String>, ActionError> {
        let object = self
            .nodes
            .get_opt(node.as_str())
            .await
            .map_err(|e| ActionError {
                action: "reading the node's boot id",
                detail: format!("get Node {node}: {e}"),
            })?;
        Ok(object
            .and_then(|n| n.status?.node_info)
            .map(|info| info.boot_id)
            .filter(|id| !id.is_empty()))
    }
}
