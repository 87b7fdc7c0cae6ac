//! The rollout's failure budget, enforced by whoever is about to take a slot for a node (its
//! agent, or `rota fleetlock` for a FleetLock host): once that many nodes failed since the
//! rollout began, the whole fleet pauses.

use std::collections::BTreeSet;

use rota_core::{FailureBudget, HistoryEvent};

use crate::error::Result;
use crate::model::{HistoryFilter, Millis, Pause};
use crate::store::{Store, StoreExt};

/// What a look at the failure budget found, and did.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetCheck {
    /// The fleet's pause: the one read with the budget, or the one this look set.
    pub pause: Option<Pause>,
    /// With a budget: the nodes that failed since the rollout began, and the budget in nodes.
    pub counted: Option<(u32, u32)>,
    /// Why the budget is spent, when it is: the reason of the pause it calls for.
    pub spent: Option<String>,
    /// The reason of the pause this look set, if it set one.
    pub paused_now: Option<String>,
}

fn when(at: Option<Millis>) -> String {
    at.and_then(|at| jiff::Timestamp::from_millisecond(at).ok())
        .map_or_else(|| "the beginning".to_owned(), |at| at.to_string())
}

/// Counts the nodes that failed since the rollout began (the last `rota resume`, or ever),
/// writing nothing: whether the budget is spent, and why.
pub async fn look<S: Store + ?Sized>(store: &S) -> Result<BudgetCheck> {
    let settings = store.settings().await?;
    let mut check = BudgetCheck {
        pause: settings.pause,
        counted: None,
        spent: None,
        paused_now: None,
    };
    let Some(budget) = settings.rollout.failure_budget else {
        return Ok(check);
    };
    let since = settings.resumed_at;
    let filter = HistoryFilter {
        event: Some(HistoryEvent::Failed),
        since,
        ..HistoryFilter::default()
    };
    let failed: BTreeSet<String> = store
        .history(&filter)
        .await?
        .into_iter()
        .map(|e| e.node.to_string())
        .collect();
    let count = u32::try_from(failed.len()).unwrap_or(u32::MAX);
    // A share of the fleet needs its size; a number of nodes does not.
    let fleet = match budget {
        FailureBudget::Nodes(_) => 0,
        FailureBudget::Percent(_) => {
            u32::try_from(store.fleet().await?.nodes.len()).unwrap_or(u32::MAX)
        }
    };
    let limit = budget.nodes(fleet);
    check.counted = Some((count, limit));
    if budget.exhausted(count, fleet) {
        let names: Vec<String> = failed.into_iter().collect();
        let of_fleet = match budget {
            FailureBudget::Nodes(_) => String::new(),
            FailureBudget::Percent(_) => format!(" ({limit} of {fleet} nodes)"),
        };
        check.spent = Some(format!(
            "failure budget exhausted: {count} node{} failed since {} ({}), budget {budget}{of_fleet}; rota resume continues",
            if count == 1 { "" } else { "s" },
            when(since),
            names.join(", ")
        ));
    }
    Ok(check)
}

/// [`look`], and at the budget, pauses the whole fleet (the pause then holds every node back
/// as a blocker). Several callers may reach the budget at once: the first pause stands.
pub async fn enforce<S: Store + ?Sized>(store: &S) -> Result<BudgetCheck> {
    let mut check = look(store).await?;
    let Some(reason) = check.spent.clone() else {
        return Ok(check);
    };
    if check.pause.is_some() {
        return Ok(check);
    }
    if let Some(pause) = store.paused().await? {
        check.pause = Some(pause);
        return Ok(check);
    }
    check.pause = Some(store.pause(&reason).await?);
    check.paused_now = Some(reason);
    Ok(check)
}
