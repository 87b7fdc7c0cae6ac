//! [`KubeActions`]: the agent's node actions in a Kubernetes cluster.

use std::collections::BTreeMap;

use async_trait::async_trait;
use backon::Retryable as _;
use kube::Client;
use rota_agent::{ActionError, NodeActions, RebootHandle, run_command, spawn_reboot};
use rota_core::NodeName;
use rota_store::retry_pauses;
use tokio::sync::watch;
use tracing::warn;

use crate::drain::{DrainOptions, Progress, drain_with_progress};
use crate::error::Error;
use crate::{health_gate, node};

/// Reboots the host from a pod with `hostPID: true`: enter PID 1's namespaces and ask systemd.
pub const DEFAULT_REBOOT_COMMAND: &str = "nsenter -t 1 -m -u -i -n -p -- systemctl reboot";

/// Cordon, drain and uncordon through the Kubernetes API; reboot and the optional health
/// command as child processes, run as on a standalone host ([`run_command`],
/// [`spawn_reboot`]).
pub struct KubeActions {
    client: Client,
    node: NodeName,
    drain: DrainOptions,
    progress: watch::Sender<Progress>,
    reboot: String,
    health: Option<String>,
    health_pdbs: bool,
    pending_taint: Option<String>,
}

impl KubeActions {
    /// Node actions for `node`. `client` must not retry 429s by itself (see
    /// [`rota_kube_client::client`]): the drain retries refused evictions with its own
    /// backoff, and a client that retries them too hides every refusal for minutes. `reboot` is
    /// run with `sh -c`; `health`, when given, must also succeed for the node to count as
    /// healthy.
    pub fn new(
        client: Client,
        node: NodeName,
        drain: DrainOptions,
        reboot: String,
        health: Option<String>,
    ) -> KubeActions {
        KubeActions {
            client,
            node,
            drain,
            progress: watch::Sender::default(),
            reboot,
            health,
            health_pdbs: false,
            pending_taint: None,
        }
    }

    /// With `key`, a node waiting for maintenance carries the taint `key:PreferNoSchedule`
    /// (kured's `--prefer-no-schedule-taint`): the scheduler places new pods, and those
    /// evicted from the nodes out now, on nodes that will not be drained soon.
    pub fn pending_taint(mut self, key: Option<String>) -> KubeActions {
        self.pending_taint = key;
        self
    }

    /// With `check`, the health check also waits until every PodDisruptionBudget of the
    /// cluster is satisfied again (see [`crate::check_gate`]).
    pub fn health_pdbs(mut self, check: bool) -> KubeActions {
        self.health_pdbs = check;
        self
    }

    /// What the current or last drain waits for: when the caller's timeout ends a drain, this
    /// says which pods a PodDisruptionBudget held back.
    pub fn drain_progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }
}

fn failed(action: &'static str, error: Error) -> ActionError {
    ActionError {
        action,
        detail: error.to_string(),
    }
}

#[async_trait]
impl NodeActions for KubeActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        node::is_cordoned(&self.client, self.node.as_str())
            .await
            .map_err(|e| failed("reading the cordon", e))
    }

    /// A drain that meets an API server it cannot reach, or one that cannot serve it for now,
    /// starts again after a pause, where the cluster is (the drain is idempotent), instead of
    /// failing the window: the agent's drain timeout bounds the whole.
    async fn drain(&self) -> Result<(), ActionError> {
        let drain = || {
            drain_with_progress(
                &self.client,
                self.node.as_str(),
                &self.drain,
                &self.progress,
            )
        };
        drain
            .retry(retry_pauses())
            .when(Error::is_unavailable)
            .notify(|e, pause| {
                warn!(node = %self.node, error = %e, pause = ?pause, "the drain met an unavailable API server; draining again");
            })
            .await
            .map_err(|e| failed("drain", e))
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        node::uncordon(&self.client, self.node.as_str(), &self.drain.labels)
            .await
            .map_err(|e| failed("uncordon", e))
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        spawn_reboot(&self.reboot, Some(&self.node))
    }

    /// The node's Ready condition first: a health command on a node that Kubernetes does not
    /// consider Ready would return it to service too early. Then the gate: the workloads the
    /// drain evicted are whole again (and, optionally, every PodDisruptionBudget is satisfied),
    /// so that the next node's drain does not take down what this one's has not yet restored.
    async fn health(&self) -> Result<(), ActionError> {
        // One read of the Node for both: its Ready condition and its record of evictions.
        let object = node::check_ready(&self.client, self.node.as_str())
            .await
            .map_err(|e| failed("health check", e))?;
        health_gate::check_gate(&self.client, &object, self.health_pdbs)
            .await
            .map_err(|e| failed("health check", e))?;
        match &self.health {
            Some(script) => run_command("health check", script, Some(&self.node)).await,
            None => Ok(()),
        }
    }

    async fn labels(&self) -> Result<BTreeMap<String, String>, ActionError> {
        node::labels(&self.client, self.node.as_str())
            .await
            .map_err(|e| failed("reading the node's labels", e))
    }

    async fn mark_pending(&self, pending: bool) -> Result<(), ActionError> {
        let Some(key) = &self.pending_taint else {
            return Ok(());
        };
        node::set_prefer_no_schedule(&self.client, self.node.as_str(), key, pending)
            .await
            .map_err(|e| failed("tainting the node", e))
    }
}
