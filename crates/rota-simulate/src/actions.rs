use async_trait::async_trait;
use rota_agent::{ActionError, NodeActions, RebootHandle};
use tokio::sync::{mpsc, oneshot};

/// The simulator's node actions: drain, uncordon and health succeed at once, and a reboot asks
/// the harness to "power-cycle" the node (stop its agent, wait, restart it with a new boot id).
pub(crate) struct SimulatedActions {
    pub(crate) node: usize,
    pub(crate) reboots: mpsc::UnboundedSender<usize>,
}

#[async_trait]
impl NodeActions for SimulatedActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        Ok(false)
    }

    async fn drain(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        self.reboots.send(self.node).map_err(|_| ActionError {
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
        Ok(())
    }
}
