use std::sync::Arc;

use async_trait::async_trait;
use rota_actions::{ActionError, NodeActions, RebootHandle};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The simulator's node actions: a reboot asks the harness to "power-cycle" the node (stop its
/// agent, wait, restart it with a new boot id). Cordon, drain, uncordon and health go to the
/// node's real actions when there are any (in a cluster), and succeed at once otherwise.
pub(crate) struct SimulatedActions {
    pub(crate) node: usize,
    /// The node and when its reboot command ran.
    pub(crate) reboots: mpsc::UnboundedSender<(usize, Instant)>,
    pub(crate) real: Option<Arc<dyn NodeActions>>,
}

#[async_trait]
impl NodeActions for SimulatedActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        match &self.real {
            Some(real) => real.is_cordoned().await,
            None => Ok(false),
        }
    }

    async fn drain(&self) -> Result<(), ActionError> {
        match &self.real {
            Some(real) => real.drain().await,
            None => Ok(()),
        }
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        match &self.real {
            Some(real) => real.uncordon().await,
            None => Ok(()),
        }
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        self.reboots
            .send((self.node, Instant::now()))
            .map_err(|_| ActionError {
                action: "reboot",
                detail: "the simulator has stopped".into(),
            })?;
        // Like `systemctl reboot`, the command "returns"; the machine going down is what
        // stops the agent.
        let (done, handle) = oneshot::channel();
        let _ = done.send(Ok(()));
        Ok(handle)
    }

    async fn health(&self) -> Result<(), ActionError> {
        match &self.real {
            Some(real) => real.health().await,
            None => Ok(()),
        }
    }

    async fn mark_pending(&self, pending: bool) -> Result<(), ActionError> {
        match &self.real {
            Some(real) => real.mark_pending(pending).await,
            None => Ok(()),
        }
    }
}
