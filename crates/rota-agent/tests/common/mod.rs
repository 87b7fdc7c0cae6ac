//! What the agent's integration tests share.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use rota_agent::{ActionError, NodeActions, RebootHandle};

/// Node actions for agents that never get as far as a reboot: they count the cordon reads.
#[derive(Default)]
pub struct CountingActions {
    pub cordon_reads: AtomicUsize,
}

#[async_trait]
impl NodeActions for CountingActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        self.cordon_reads.fetch_add(1, Ordering::SeqCst);
        Ok(false)
    }

    async fn drain(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        Err(ActionError {
            action: "reboot",
            detail: "not in this test".into(),
        })
    }

    async fn health(&self) -> Result<(), ActionError> {
        Ok(())
    }
}
