//! Bare metal: the server acts on a host's node with shell commands (`ROTA_NODE` names the
//! node), and knows no boot id: the host's `steady-state` after its lock is the word that it
//! rebooted.

use std::sync::Arc;

use async_trait::async_trait;
use rota_actions::{ActionError, CommandActions, NodeActions};
use rota_core::NodeName;

use crate::hosts::Platform;

/// The commands run for every host (each may be absent: nothing to do).
#[derive(Clone, Debug, Default)]
pub struct CommandPlatform {
    pub drain: Option<String>,
    pub uncordon: Option<String>,
    pub health: Option<String>,
}

#[async_trait]
impl Platform for CommandPlatform {
    fn actions(&self, node: &NodeName) -> Arc<dyn NodeActions> {
        Arc::new(CommandActions {
            node: Some(node.clone()),
            drain: self.drain.clone(),
            uncordon: self.uncordon.clone(),
            reboot: None,
            health: self.health.clone(),
        })
    }

    async fn boot_id(&self, _node: &NodeName) -> Result<Option<String>, ActionError> {
        Ok(None)
    }
}
