//! A store's forecast of the turns to come (`rota plan`, `rota simulate --plan`): the fleet,
//! its settings and its steps read, and rota-core's plan made of them, writing nothing.

use rota_core::NodeState;
use rota_core::plan::{Now, Plan, PlanNode, Rules, StepDurations, plan};
use rota_core::rollout;

use crate::error::Result;
use crate::model::{HistoryFilter, Millis, NodeOverview, RequestState, Settings};
use crate::store::{Store, StoreExt};

/// A plan and what it was made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forecast {
    /// How many nodes the store knows, whether or not they wait.
    pub nodes: usize,
    pub plan: Plan,
    pub rules: Rules,
    pub durations: StepDurations,
}

/// Reads the fleet, its settings and every recorded step, and plans from `now`.
pub async fn forecast(store: &dyn Store, now: Millis) -> Result<Forecast> {
    let fleet = store.fleet().await?;
    let settings = store.settings().await?;
    let steps: Vec<_> = store
        .steps(&HistoryFilter::default())
        .await?
        .into_iter()
        .map(|s| (s.node, s.state, s.at))
        .collect();
    let durations = StepDurations::from_steps(&steps);
    let nodes: Vec<PlanNode> = fleet
        .nodes
        .iter()
        .filter_map(|node| plan_node(node, &settings, now))
        .collect();
    let rules = Rules {
        concurrency: settings.slots(),
        batches: settings.rollout.batches.clone(),
        groups: settings.groups.clone(),
        finished: rollout::finished(fleet.nodes.iter().map(|n| &n.record), settings.resumed_at),
    };
    Ok(Forecast {
        nodes: fleet.nodes.len(),
        plan: plan(&nodes, &rules, &durations, now),
        rules,
        durations,
    })
}

/// Where `node` stands for the plan; `None` for a node with nothing to do.
fn plan_node(node: &NodeOverview, settings: &Settings, now: Millis) -> Option<PlanNode> {
    let record = &node.record;
    let at = |now: Now| {
        Some(PlanNode {
            node: record.node.clone(),
            group: record.group.clone(),
            now,
        })
    };
    match (record.state, record.slot) {
        (NodeState::Failed, Some(slot)) => at(Now::Failed { slot }),
        (state, Some(slot)) => at(Now::InWindow {
            slot,
            state,
            since: record.since,
        }),
        (NodeState::Queued | NodeState::Idle, None) => {
            let pending = node
                .open_requests
                .iter()
                .any(|r| r.state == RequestState::Pending);
            if record.state == NodeState::Idle && !pending {
                return None;
            }
            if let Some(pause) = &settings.pause {
                return at(Now::HeldBack {
                    reason: format!("the fleet is paused: {}", pause.reason),
                });
            }
            if let Some(blocked) = &record.blocked {
                return at(Now::HeldBack {
                    reason: blocked.reason.clone(),
                });
            }
            // A node with a request that has not queued yet queues as soon as its agent
            // sees it.
            at(Now::Queued {
                place: record.queued_at.unwrap_or(now),
            })
        }
        _ => None,
    }
}
