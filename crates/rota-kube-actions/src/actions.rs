//! [`KubeActions`]: the agent's node actions in a Kubernetes cluster.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use backon::Retryable as _;
use kube::{Client, ResourceExt as _};
use rota_actions::{ActionError, NodeActions, Reboot, RebootHandle, run_command};
use rota_core::{Millis, NodeName};
use rota_store::retry_pauses;
use tokio::sync::watch;
use tracing::warn;

use crate::annotations::REBOOT_IN_PROGRESS_ANNOTATION;
use crate::conditions::{self, Step};
use crate::drain::{DrainOptions, Progress, drain_with_progress};
use crate::error::Error;
use crate::{annotations, health_gate, node};

/// Reboots the host from a pod with `hostPID: true`: enter PID 1's namespaces and ask systemd.
pub const DEFAULT_REBOOT_COMMAND: &str = "nsenter -t 1 -m -u -i -n -p -- systemctl reboot";

/// Cordon, drain and uncordon through the Kubernetes API; the reboot ([`Reboot`]) and the
/// optional health command ([`run_command`]) as on a standalone host.
pub struct KubeActions {
    client: Client,
    node: NodeName,
    drain: DrainOptions,
    progress: watch::Sender<Progress>,
    reboot: Reboot,
    health: Option<String>,
    health_pdbs: bool,
    pending_taint: Option<String>,
    annotate: bool,
    /// Whether the node lifecycle conditions are set (see [`KubeActions::node_conditions`]).
    conditions: bool,
    /// Whether the Node, as the last health check read it, carries
    /// [`REBOOT_IN_PROGRESS_ANNOTATION`]: the verification that precedes every return to
    /// service reads it, so the return knows without a read of its own whether the window
    /// rebooted the node.
    reboot_in_progress: AtomicBool,
}

impl KubeActions {
    /// Node actions for `node`. `client` must not retry 429s by itself (see
    /// [`rota_kube_client::client`]): the drain retries refused evictions with its own
    /// backoff, and a client that retries them too hides every refusal for minutes. `reboot`
    /// starts the reboot (a command run with `sh -c`, or systemd's reboot signal); `health`,
    /// when given, must also succeed for the node to count as healthy.
    pub fn new(
        client: Client,
        node: NodeName,
        drain: DrainOptions,
        reboot: Reboot,
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
            annotate: false,
            conditions: true,
            reboot_in_progress: AtomicBool::new(false),
        }
    }

    /// With `key`, a node waiting for maintenance carries the taint `key:PreferNoSchedule`
    /// (kured's `--prefer-no-schedule-taint`): the scheduler places new pods, and those
    /// evicted from the nodes out now, on nodes that will not be drained soon.
    pub fn pending_taint(mut self, key: Option<String>) -> KubeActions {
        self.pending_taint = key;
        self
    }

    /// With `annotate` (kured's `--annotate-nodes`), the Node carries
    /// [`REBOOT_IN_PROGRESS_ANNOTATION`] from the reboot's start until it is back in service,
    /// and [`LAST_REBOOT_STARTED_ANNOTATION`] and [`LAST_REBOOT_FINISHED_ANNOTATION`] after.
    pub fn annotate_nodes(mut self, annotate: bool) -> KubeActions {
        self.annotate = annotate;
        self
    }

    /// With `set` (the default; `rota agent --node-conditions`), the Node carries the node
    /// lifecycle conditions of KEP-5683 through the node's window: `MaintenancePlanned` while
    /// it is queued, `DrainInProgress` while rota drains it and `Drained` after, and
    /// `MaintenanceInProgress` from the cordon or the drain until it is back in service, when
    /// rota sets each of them `False` again (see [`crate::conditions`]).
    pub fn node_conditions(mut self, set: bool) -> KubeActions {
        self.conditions = set;
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

impl KubeActions {
    /// The Node's write of [`NodeActions::return_to_service`]: with annotations, one write:
    /// the uncordon's, carrying them, or theirs alone for a node rota did not cordon. Without,
    /// or for a window without a reboot and nothing to uncordon, no request.
    async fn return_node(&self, uncordon: bool) -> Result<(), ActionError> {
        let rebooted = self.annotate && self.reboot_in_progress.load(Ordering::Relaxed);
        if !uncordon && !rebooted {
            return Ok(());
        }
        let mut patch = if uncordon {
            node::uncordon_patch(&self.drain.labels)
        } else {
            serde_json::json!({})
        };
        if self.annotate {
            annotations::add_to(&mut patch, annotations::on_return(rebooted));
        }
        node::patch_node(&self.client, self.node.as_str(), patch)
            .await
            .map(drop)
            .map_err(|e| failed("returning the node to service", e))
    }

    /// Sets the conditions of `step` on the Node, when they are on. A failure is logged and
    /// goes no further, as a refused Event does: the conditions report to other tools what rota
    /// does, and no Kubernetes controller acts on them (KEP-5683), so a write of them that
    /// fails must neither fail a drain, hold a reboot back nor stop the agent. An installation
    /// whose RBAC lacks `patch` on `nodes/status` (an older chart) keeps working, with a warning
    /// at each step. A condition left behind is set right by the next step's write, or by the
    /// idle node's when the agent starts again.
    async fn set_conditions(&self, step: Step) {
        if !self.conditions {
            return;
        }
        if let Err(e) = conditions::set(&self.client, self.node.as_str(), step).await {
            warn!(node = %self.node, error = %e, ?step, "cannot set the node's lifecycle conditions (KEP-5683); the window goes on without them (--node-conditions=false turns them off)");
        }
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

    /// The drain's own cordon, with its labels, for a drain delay before the evictions.
    async fn cordon(&self) -> Result<(), ActionError> {
        self.set_conditions(Step::Cordoned).await;
        node::cordon(&self.client, self.node.as_str(), &self.drain.labels)
            .await
            .map(drop)
            .map_err(|e| failed("cordon", e))
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
        self.set_conditions(Step::Draining).await;
        let drained = drain
            .retry(retry_pauses())
            .when(Error::is_unavailable)
            .notify(|e, pause| {
                warn!(node = %self.node, error = %e, pause = ?pause, "the drain met an unavailable API server; draining again");
            })
            .await;
        // A drain that the agent's timeout ends never gets here: the uncordon that follows
        // its failure clears DrainInProgress.
        let step = match drained {
            Ok(()) => Step::Drained,
            Err(_) => Step::DrainFailed,
        };
        self.set_conditions(step).await;
        drained.map_err(|e| failed("drain", e))
    }

    /// With annotations, every uncordon of rota's ends a reboot in progress: the node is
    /// back in service (an operator's unlock of a failed reboot included, and a failed
    /// drain's). So it is for the conditions, once the uncordon is written.
    async fn uncordon(&self) -> Result<(), ActionError> {
        let mut patch = node::uncordon_patch(&self.drain.labels);
        if self.annotate {
            annotations::add_to(&mut patch, annotations::on_return(false));
        }
        node::patch_node(&self.client, self.node.as_str(), patch)
            .await
            .map_err(|e| failed("uncordon", e))?;
        self.set_conditions(Step::BackInService).await;
        Ok(())
    }

    /// The Node's write ([`KubeActions::return_node`]), then the conditions' own (a patch of
    /// the Node's status, which a patch of the Node cannot carry), once the node is back in
    /// service.
    async fn return_to_service(&self, uncordon: bool) -> Result<(), ActionError> {
        self.return_node(uncordon).await?;
        self.set_conditions(Step::BackInService).await;
        Ok(())
    }

    /// Refused evictions and wait-completed pods; pods on their way out hold nothing back.
    fn drain_held(&self) -> Option<String> {
        let progress = self.progress.borrow();
        (!progress.refused.is_empty() || !progress.waiting.is_empty()).then(|| {
            let held = Progress {
                terminating: Vec::new(),
                ..progress.clone()
            };
            format!("the drain is held: {held}")
        })
    }

    /// A window's maintenance without a drain (a procedure that does not need one) says so
    /// too, not only the cordon and the drain.
    async fn maintenance_started(&self) {
        self.set_conditions(Step::Maintaining).await;
    }

    /// Starts the reboot. The conditions first, so that the Node says rota reboots it before
    /// the reboot takes the node away.
    async fn reboot_starting(&self, started_at: Millis) -> Result<(), ActionError> {
        self.set_conditions(Step::Rebooting).await;
        if !self.annotate {
            return Ok(());
        }
        let patch = annotations::on_reboot_start(started_at);
        node::patch_node(&self.client, self.node.as_str(), patch)
            .await
            .map(drop)
            .map_err(|e| failed("annotating the node's reboot", e))
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        self.reboot.start(Some(&self.node))
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
        if self.annotate {
            let marked = object
                .annotations()
                .contains_key(REBOOT_IN_PROGRESS_ANNOTATION);
            self.reboot_in_progress.store(marked, Ordering::Relaxed);
        }
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

    /// The conditions' `MaintenancePlanned` follows the mark, taint or not; an idle node's
    /// also clears whatever of rota's conditions a failed write left behind.
    async fn mark_pending(&self, pending: bool) -> Result<(), ActionError> {
        let step = if pending { Step::Queued } else { Step::Idle };
        self.set_conditions(step).await;
        let Some(key) = &self.pending_taint else {
            return Ok(());
        };
        node::set_prefer_no_schedule(&self.client, self.node.as_str(), key, pending)
            .await
            .map_err(|e| failed("tainting the node", e))
    }
}
