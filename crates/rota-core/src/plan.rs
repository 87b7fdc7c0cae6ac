//! A forecast of the turns to come (`rota plan`): the queue played forward in time by
//! [`schedule`] itself, each window lasting the fleet's own typical window, so that the plan
//! follows the one rule the stores grant by, the rollout's batches included.
//!
//! Nodes held back now (a blocker, the fleet's pause, an agent not running) are not planned:
//! the plan names them with their reason. Time is played in whole windows: a slot comes free
//! when the window that holds it is expected to end, and each end counts as a node finished
//! healthy for the rollout's width.

use std::collections::BTreeMap;

use crate::decision::Millis;
use crate::groups::GroupRules;
use crate::lifecycle::NodeState;
use crate::names::NodeName;
use crate::rollout::Batches;
use crate::schedule::{Held, Limits, Waiter, schedule};

/// One node as the plan starts from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanNode {
    pub node: NodeName,
    pub group: Option<String>,
    pub now: Now,
}

/// Where a node is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Now {
    /// In its window of `slot`, in `state` since `since`.
    InWindow {
        slot: u32,
        state: NodeState,
        since: Millis,
    },
    /// Failed in its window of `slot`, which it holds until an operator's unlock or retry.
    Failed { slot: u32 },
    /// Queued, with its place (a place in the future waits for its backoff).
    Queued { place: Millis },
    /// Waiting for something that the plan cannot foresee the end of.
    HeldBack { reason: String },
}

/// How long each state of a window typically lasts (the p50 of the fleet's recorded steps);
/// a state never recorded counts nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepDurations {
    pub by_state: BTreeMap<NodeState, Millis>,
}

/// The states of a window, in order.
const WINDOW_STATES: [NodeState; 4] = [
    NodeState::Draining,
    NodeState::Maintaining,
    NodeState::Rebooting,
    NodeState::Verifying,
];

impl StepDurations {
    /// The p50 of each window state's recorded durations: `steps` is every node's steps in
    /// time order (node, state entered, when); a step lasts until the node's next one.
    pub fn from_steps(steps: &[(NodeName, NodeState, Millis)]) -> StepDurations {
        let mut last: BTreeMap<&NodeName, (NodeState, Millis)> = BTreeMap::new();
        let mut samples: BTreeMap<NodeState, Vec<Millis>> = BTreeMap::new();
        for (node, state, at) in steps {
            if let Some((previous, since)) = last.insert(node, (*state, *at))
                && WINDOW_STATES.contains(&previous)
            {
                samples
                    .entry(previous)
                    .or_default()
                    .push(at.saturating_sub(since).max(0));
            }
        }
        let by_state = samples
            .into_iter()
            .map(|(state, mut durations)| {
                durations.sort_unstable();
                (state, durations[(durations.len() - 1) / 2])
            })
            .collect();
        StepDurations { by_state }
    }

    /// Whether any window state was ever recorded: without, the plan has order but no times.
    pub fn known(&self) -> bool {
        !self.by_state.is_empty()
    }

    /// A whole window.
    pub fn window(&self) -> Millis {
        self.by_state.values().sum()
    }

    /// What is left of a window in `state` since `since`, at `now`: what its state's typical
    /// length has not used up, and the states after it.
    fn remaining(&self, state: NodeState, since: Millis, now: Millis) -> Millis {
        let position = WINDOW_STATES.iter().position(|s| *s == state).unwrap_or(0);
        let own = self.by_state.get(&state).copied().unwrap_or(0);
        let after: Millis = WINDOW_STATES[position + 1..]
            .iter()
            .filter_map(|s| self.by_state.get(s))
            .sum();
        own.saturating_sub(now.saturating_sub(since)).max(0) + after
    }
}

/// One window of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub node: NodeName,
    pub group: Option<String>,
    pub slot: u32,
    /// When it opens; for a window open already, when it entered its current state.
    pub start: Millis,
    pub finish: Millis,
    /// Whether it is open already.
    pub open: bool,
    /// Its turn among the windows of the plan, from 1.
    pub turn: usize,
}

/// The plan: the windows in the order they open, and the nodes held back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub windows: Vec<Planned>,
    pub held_back: Vec<(NodeName, String)>,
}

impl Plan {
    /// When the last planned window ends.
    pub fn finish(&self) -> Option<Millis> {
        self.windows.iter().map(|w| w.finish).max()
    }
}

/// The fleet's rules the plan follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    pub concurrency: u32,
    pub batches: Batches,
    pub groups: GroupRules,
    /// Nodes finished healthy in the rollout so far.
    pub finished: u32,
}

/// Plays the queue forward from `now` (see the module's documentation).
pub fn plan(nodes: &[PlanNode], rules: &Rules, durations: &StepDurations, now: Millis) -> Plan {
    let window = durations.window();
    let mut plan = Plan::default();
    // (slot, node, expected end), and the node's group.
    let mut held: Vec<(u32, NodeName, Millis)> = Vec::new();
    let group_of = |node: &NodeName| {
        nodes
            .iter()
            .find(|n| &n.node == node)
            .and_then(|n| n.group.clone())
    };
    let mut waiters: Vec<Waiter> = Vec::new();
    for node in nodes {
        match &node.now {
            Now::InWindow { slot, state, since } => {
                let finish = now + durations.remaining(*state, *since, now);
                held.push((*slot, node.node.clone(), finish));
                plan.windows.push(Planned {
                    node: node.node.clone(),
                    group: node.group.clone(),
                    slot: *slot,
                    start: *since,
                    finish,
                    open: true,
                    turn: 0,
                });
            }
            Now::Failed { slot } => {
                held.push((*slot, node.node.clone(), Millis::MAX));
                plan.held_back.push((
                    node.node.clone(),
                    format!("failed in its window: holds slot {slot} until `rota unlock` or `rota retry`"),
                ));
            }
            Now::Queued { place } => waiters.push(Waiter {
                node: node.node.clone(),
                place: *place,
                blocked: false,
                alive: true,
                group: node.group.clone(),
            }),
            Now::HeldBack { reason } => plan.held_back.push((node.node.clone(), reason.clone())),
        }
    }
    plan.windows
        .sort_by(|a, b| (a.start, &a.node).cmp(&(b.start, &b.node)));
    let mut finished = rules.finished;
    let mut t = now;
    while !waiters.is_empty() {
        // The windows expected to end by `t` give their slots back, each a node finished.
        let before = held.len();
        held.retain(|(_, _, end)| *end > t);
        finished = finished.saturating_add(u32::try_from(before - held.len()).unwrap_or(0));
        let holding: Vec<Held> = held
            .iter()
            .map(|(slot, node, _)| Held {
                slot: *slot,
                group: group_of(node),
            })
            .collect();
        let limits =
            rules
                .groups
                .limits(Limits::rollout(rules.concurrency, &rules.batches, finished));
        let granted = schedule(&waiters, &holding, &limits, t).grants;
        for grant in &granted {
            held.push((grant.slot, grant.node.clone(), t + window));
            plan.windows.push(Planned {
                node: grant.node.clone(),
                group: group_of(&grant.node),
                slot: grant.slot,
                start: t,
                finish: t + window,
                open: false,
                turn: 0,
            });
        }
        waiters.retain(|w| !granted.iter().any(|g| g.node == w.node));
        // The next moment anything changes: a window's end, or a waiter's place.
        let next_end = held
            .iter()
            .map(|(_, _, end)| *end)
            .filter(|end| *end < Millis::MAX)
            .min();
        let next_place = waiters.iter().map(|w| w.place).filter(|p| *p > t).min();
        match next_end.into_iter().chain(next_place).min() {
            Some(next) if next > t => t = next,
            // Windows of no length (no step recorded yet) end at once: play `t` again.
            Some(_) if held.iter().any(|(_, _, end)| *end <= t) => {}
            // Nothing can change any more: what is left never goes.
            _ => break,
        }
    }
    for waiter in waiters {
        plan.held_back.push((
            waiter.node,
            "no slot can come free for it under the concurrency".to_string(),
        ));
    }
    for (turn, window) in plan.windows.iter_mut().enumerate() {
        window.turn = turn + 1;
    }
    plan
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
