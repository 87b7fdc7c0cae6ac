//! What the checker checks in every reachable state (docs/design.md §4), and the measure that
//! makes its liveness check complete.

use rota_core::{NodeState, RequestState};
use stateright::{Model, Property};

use crate::agent::Pc;
use crate::system::{Rota, State};

/// Invariant 1.
pub const AT_MOST_K: &str = "never more than K nodes disrupted";
/// Invariant 2, without sessions: an agent is never superseded in this model.
pub const HOLDS_SLOT: &str = "a node is disrupted only while it holds a slot";
/// Each node has one request, so its machine boots once more at most.
pub const ONE_REBOOT: &str = "no request reboots its node twice";
/// Invariant 3: every node ends idle, its request done, uncordoned and holding no slot.
pub const FINISHES: &str = "every request finishes";
/// See [`rank`].
pub const PROGRESS: &str = "every action makes progress";

pub fn all() -> Vec<Property<Rota>> {
    vec![
        Property::always(AT_MOST_K, |model, state| {
            let disrupted = (0..model.nodes).filter(|&n| disrupted(state, n)).count();
            disrupted <= usize::from(model.slots)
        }),
        Property::always(HOLDS_SLOT, |model, state| {
            (0..model.nodes).all(|n| !disrupted(state, n) || state.store.holds_slot(n))
        }),
        Property::always(ONE_REBOOT, |_, state: &State| {
            state.hosts.iter().all(|host| host.boot <= 1)
        }),
        Property::eventually(FINISHES, |model, state| {
            (0..model.nodes).all(|n| finished(state, n))
        }),
        Property::always(PROGRESS, |model, state| {
            let before = rank(state);
            model
                .next_states(state)
                .iter()
                .all(|next| rank(next) > before)
        }),
    ]
}

/// Cordoned, or going down for a reboot (one due, or its command running).
pub fn disrupted(state: &State, node: u8) -> bool {
    let n = usize::from(node);
    let host = &state.hosts[n];
    host.cordoned || host.reboot_due || state.agents[n].pc.child_running()
}

fn finished(state: &State, node: u8) -> bool {
    let record = state.store.record(node);
    record.state() == NodeState::Idle
        && record.request() == Some(RequestState::Done)
        && !state.hosts[usize::from(node)].cordoned
        && !state.store.holds_slot(node)
}

/// A measure that every action increases, compared in order:
/// 1. crashes and reboots, after which an agent starts its handler again;
/// 2. how far each node's lifecycle went (a slot taken counts within queued);
/// 3. how far each agent is within its handler, with the marker of this boot and a reboot
///    due on its host; a claim on a slot someone else took counts lowest, as it can only fail.
///
/// Checked on every action ([`PROGRESS`]), it shows the state graph has no cycle, so every run
/// ends in a state with no action left. The checker judges `eventually` by those last states
/// and does not see cycles (stateright's `Property::eventually`); without one there is no
/// endless run it could miss, and no unfair one: a run ends only when nothing can happen.
fn rank(state: &State) -> (u32, u32, u32) {
    let mut rank = (0, 0, 0);
    for (node, ((record, host), agent)) in (0u8..).zip(
        state
            .store
            .records
            .iter()
            .zip(&state.hosts)
            .zip(&state.agents),
    ) {
        rank.0 += u32::from(agent.crashes) + u32::from(host.boot);
        rank.1 += match record.state() {
            NodeState::Idle if record.request() == Some(RequestState::Done) => 7,
            NodeState::Idle => 0,
            NodeState::Queued => 1 + u32::from(state.store.holds_slot(node)),
            NodeState::Draining => 3,
            NodeState::Maintaining => 4,
            NodeState::Rebooting => 5,
            NodeState::Verifying => 6,
            NodeState::Failed => 7,
        };
        rank.2 += match agent.pc {
            Pc::Claim(slot) if state.store.slots[usize::from(slot)].is_some() => 0,
            Pc::Top => 1,
            Pc::Claim(_) | Pc::Cordoned | Pc::Marked | Pc::Uncordoned | Pc::SpawnedUnrecorded => 2,
            Pc::Running => 3,
            Pc::Exited | Pc::Waiting => 4,
        } + 10 * u32::from(host.marked())
            + 10 * u32::from(host.reboot_due);
    }
    rank
}
