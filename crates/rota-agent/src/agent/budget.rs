//! The rollout's failure budget, checked before the slot: once that many nodes failed since the
//! rollout began, the agent pauses the whole fleet (`StoreExt::enforce_failure_budget`).

use rota_store::{Pause, StoreExt};
use tracing::warn;

use super::Agent;
use crate::error::Result;

impl Agent {
    /// Enforces the fleet's failure budget and tells the observers the count. Returns the
    /// fleet's pause: the one read with the budget, or the one set now.
    pub(super) async fn enforce_failure_budget(&self) -> Result<Option<Pause>> {
        let check = self.store.enforce_failure_budget().await?;
        if let Some((failed, budget)) = check.counted {
            self.tell(|o| o.failure_budget(failed, budget));
        }
        if let Some(reason) = &check.paused_now {
            warn!(node = %self.config.node, reason, "paused the fleet");
        }
        Ok(check.pause)
    }
}
