//! The failure budget, checked before the slot: once that many nodes failed since the rollout
//! began, the agent pauses the whole fleet.

use std::collections::BTreeSet;

use rota_core::HistoryEvent;
use rota_store::{HistoryFilter, StoreExt};
use tracing::warn;

use super::Agent;
use super::hours::timestamp;
use crate::error::Result;

impl Agent {
    /// With a failure budget: counts the nodes that failed since the rollout began (the last
    /// `rota resume`, or ever), and at the budget pauses the whole fleet (the pause then holds
    /// every node back, this one included, as a blocker).
    pub(super) async fn enforce_failure_budget(&self) -> Result<()> {
        let Some(budget) = self.config.failure_budget else {
            return Ok(());
        };
        let since = self.store.resumed_at().await?;
        let failed: BTreeSet<String> = self
            .store
            .history(&HistoryFilter {
                event: Some(HistoryEvent::Failed),
                since,
                ..HistoryFilter::default()
            })
            .await?
            .into_iter()
            .map(|e| e.node.to_string())
            .collect();
        let count = u32::try_from(failed.len()).unwrap_or(u32::MAX);
        self.tell(|o| o.failure_budget(count, budget));
        if count < budget {
            return Ok(());
        }
        let began = since.map_or_else(
            || "the beginning".to_string(),
            |at| timestamp(at).to_string(),
        );
        let names: Vec<String> = failed.into_iter().collect();
        let reason = format!(
            "failure budget exhausted: {count} node{} failed since {began} ({}), budget {budget}; rota resume continues",
            if count == 1 { "" } else { "s" },
            names.join(", ")
        );
        // Several agents may reach the budget at once: the first pause stands if it is already
        // there.
        if self.store.paused().await?.is_none() {
            warn!(node = %self.config.node, reason, "pausing the fleet");
            self.store.pause(&reason).await?;
        }
        Ok(())
    }
}
