//! What an agent does to its node. The agent decides *when*; a [`NodeActions`] decides *how*:
//! shell commands for a standalone host, the Kubernetes API in a cluster, or the simulator's
//! stand-ins in `rota simulate`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rota_core::{Millis, NodeName};
use tokio::sync::oneshot;

use crate::commands::run_command;
use crate::error::ActionError;
use crate::reboot::Reboot;

/// Resolves when the reboot command exits: `Ok` if it exited successfully. A successful exit
/// does not mean the node rebooted; only a new boot id says that.
pub type RebootHandle = oneshot::Receiver<Result<(), ActionError>>;

#[async_trait]
pub trait NodeActions: Send + Sync {
    /// Whether someone already cordoned the node (rota then leaves the cordon in place).
    async fn is_cordoned(&self) -> Result<bool, ActionError>;
    /// Cordons the node without evicting anything, for a drain delay; the drain that follows
    /// cordons too. Idempotent. Where the drain is one command (a standalone host's
    /// `--drain-command`) there is nothing to do apart from it.
    async fn cordon(&self) -> Result<(), ActionError> {
        Ok(())
    }
    /// Cordons the node and evicts its workloads. Must be idempotent: it is repeated after a
    /// restart in the middle of a drain.
    async fn drain(&self) -> Result<(), ActionError>;
    async fn uncordon(&self) -> Result<(), ActionError>;
    /// Returns the node to service at the end of a window it passed (healthy after its work):
    /// uncordons it when rota cordoned it (`uncordon`), and ends whatever the platform records
    /// on the node about its reboot (Kubernetes' `--annotate-nodes`), in the same write where
    /// it can. Idempotent: it is repeated until it works.
    async fn return_to_service(&self, uncordon: bool) -> Result<(), ActionError> {
        if uncordon {
            self.uncordon().await
        } else {
            Ok(())
        }
    }
    /// Records on the node, for other tools, that its reboot starts (recorded in the store
    /// at `started_at`, in milliseconds since the epoch): Kubernetes' `--annotate-nodes`.
    /// Called right before the reboot, once the slot is proven; a failure postpones the
    /// reboot to the agent's next pass. Idempotent.
    async fn reboot_starting(&self, _started_at: Millis) -> Result<(), ActionError> {
        Ok(())
    }
    /// What holds the drain under way back, if anything does for now (pods whose eviction is
    /// refused, pods the drain waits to complete), for `rota status`: Kubernetes' drain
    /// says; a drain command says nothing.
    fn drain_held(&self) -> Option<String> {
        None
    }
    /// Records on the node, for other tools, that its maintenance (its procedures) runs:
    /// Kubernetes' node lifecycle conditions. A courtesy: it fails nothing.
    async fn maintenance_started(&self) {}
    /// Starts the reboot as a child process and returns at once; the agent stays alive.
    async fn reboot(&self) -> Result<RebootHandle, ActionError>;
    async fn health(&self) -> Result<(), ActionError>;
    /// The node's labels as its platform knows them (a Kubernetes Node's), for procedures'
    /// node selectors; a standalone host has none beyond its configuration.
    async fn labels(&self) -> Result<BTreeMap<String, String>, ActionError> {
        Ok(BTreeMap::new())
    }
    /// Marks the node as waiting for maintenance (`pending`), or not, so that new workloads
    /// prefer other nodes and are not moved twice (in Kubernetes, a `PreferNoSchedule` taint);
    /// idempotent. Where nothing schedules onto the node there is nothing to mark.
    async fn mark_pending(&self, _pending: bool) -> Result<(), ActionError> {
        Ok(())
    }
}

/// Node actions as shell commands (`sh -c`), for standalone hosts. A missing command is a
/// node action that has nothing to do on this host and succeeds. Each command sees `ROTA_NODE`.
#[derive(Clone, Debug, Default)]
pub struct CommandActions {
    pub node: Option<NodeName>,
    pub drain: Option<String>,
    pub uncordon: Option<String>,
    pub reboot: Option<Reboot>,
    pub health: Option<String>,
}

impl CommandActions {
    async fn run(&self, action: &'static str, script: Option<&str>) -> Result<(), ActionError> {
        match script {
            Some(script) => run_command(action, script, self.node.as_ref()).await,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl NodeActions for CommandActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        Ok(false)
    }

    async fn drain(&self) -> Result<(), ActionError> {
        self.run("drain", self.drain.as_deref()).await
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        self.run("uncordon", self.uncordon.as_deref()).await
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        match &self.reboot {
            Some(reboot) => reboot.start(self.node.as_ref()),
            None => {
                let (done, handle) = oneshot::channel();
                let _ = done.send(Err(ActionError {
                    action: "reboot",
                    detail: "no reboot command is configured".into(),
                }));
                Ok(handle)
            }
        }
    }

    async fn health(&self) -> Result<(), ActionError> {
        self.run("health check", self.health.as_deref()).await
    }
}
