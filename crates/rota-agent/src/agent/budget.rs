//! The rollout's failure budget, checked before the slot: once that many nodes failed since the
//! rollout began, the agent pauses the whole fleet.

use std::collections::BTreeSet;

use rota_core::{FailureBudget, HistoryEvent};
use rota_store::{HistoryFilter, Pause, StoreExt};
use tracing::warn;

use super::Agent;
use super::hours::timestamp;
use crate::error::Result;

impl Agent {
    /// With a failure budget in the fleet's rollout: counts the nodes that failed since the
    /// rollout began (the last `rota resume`, or ever), and at the budget pauses the whole
    /// fleet (the pause then holds every node back, this one included, as a blocker).
    /// Returns the fleet's pause: the one it read with the budget, or the one it set.
    pub(super) async fn enforce_failure_budget(&self) -> Result<Option<Pause>> {
        let settings = self.store.settings().await?;
        let Some(budget) = settings.rollout.failure_budget else {
            return Ok(settings.pause);
        };
        let since = settings.resumed_at;
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
        // A share of the fleet needs its size; a number of nodes does not.
        let fleet = match budget {
            FailureBudget::Nodes(_) => 0,
            FailureBudget::Percent(_) => {
                u32::try_from(self.store.fleet().await?.nodes.len()).unwrap_or(u32::MAX)
            }
        };
        let limit = budget.nodes(fleet);
        self.tell(|o| o.failure_budget(count, limit));
        if !budget.exhausted(count, fleet) {
            return Ok(settings.pause);
        }
        let began = since.map_or_else(
            || "the beginning".to_string(),
            |at| timestamp(at).to_string(),
        );
        let names: Vec<String> = failed.into_iter().collect();
        let of_fleet = match budget {
            FailureBudget::Nodes(_) => String::new(),
            FailureBudget::Percent(_) => format!(" ({limit} of {fleet} nodes)"),
        };
        let reason = format!(
            "failure budget exhausted: {count} node{} failed since {began} ({}), budget {budget}{of_fleet}; rota resume continues",
            if count == 1 { "" } else { "s" },
            names.join(", ")
        );
        // Several agents may reach the budget at once: the first pause stands if it is already
        // there.
        if let Some(pause) = settings.pause {
            return Ok(Some(pause));
        }
        if let Some(pause) = self.store.paused().await? {
            return Ok(Some(pause));
        }
        warn!(node = %self.config.node, reason, "pausing the fleet");
        Ok(Some(self.store.pause(&reason).await?))
    }
}
