//! A node's agent: it follows its own RotaNode, takes a grant up, fences on the Lease the grant
//! names, and gives that Lease back at the end. It never takes a Lease.
//!
//! From its RotaNode, read afresh after every crash ([`Pc::Top`]):
//!
//! | RotaNode | actions, in order |
//! |---|---|
//! | queued, no grant | none: a waiting node writes nothing |
//! | queued, grant `i` | read it; compare-and-swap the status to window (fails if the RotaNode was written since the read) |
//! | window `i`, work not done | fence: read Lease `i`; if it names the node, disrupt; do the work and put the node back in service. If it does not, undisrupt if out, and give the window up: queued, the grant cleared |
//! | window `i`, work done | write idle, the grant cleared; give Lease `i` back if it still names the node |
//! | idle | none |
//!
//! The work and the return to service are one action: nothing can crash between them that the
//! model keeps (the agent's restart on a machine that comes back finds the work done).
//!
//! The writes after the take-up, and the Lease given back, are each one action: the agent
//! repeats a compare-and-swap refused for a conflict with a fresh read until it succeeds or
//! finds the object no longer as it expects, so only the write's outcome at some instant
//! matters. The take-up keeps its read apart, because the withdrawal races it.
//!
//! Idle is written before the Lease goes back: a crash between the two leaves a Lease that
//! names an idle node, which the scheduler reclaims like any Lease not in use. The other order
//! would leave a node in its window without its Lease, whose agent, restarted, would give the
//! window up and queue for a turn it already had.

use std::fmt;

use crate::cluster::{Host, Lease, RotaNode, Status};
use crate::system::{Flaw, State};

/// Where the agent is within its handler: all it holds in memory, lost when it crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    /// Next, a read of its RotaNode, and the first action of what it finds.
    Top,
    /// Read its RotaNode queued with a grant of `slot`; `current` while nobody wrote it since.
    TakeUp { slot: u8, current: bool },
    /// The fence passed; next, the disruption.
    Fenced,
    /// Disrupted; next, the work and the return to service.
    Disrupted,
    /// The fence failed; next, undisrupt if out, then give the window up.
    Refused,
    /// Wrote idle; next, give Lease `slot` back.
    Release(u8),
}

impl Pc {
    /// Whether a crash here makes a state that no run without it reaches. After a read alone,
    /// the restarted agent is where it was before the read, in a world that went on without
    /// looking at the agent's memory: where a slow agent is. A node refused its window while
    /// out, the one other write followed by more, is already a violation of fencing.
    pub fn crash_matters(self) -> bool {
        matches!(self, Pc::Disrupted | Pc::Release(_))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Agent {
    pub pc: Pc,
    /// Crashes so far, against the model's budget.
    pub crashes: u8,
}

/// One action of an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Does {
    ReadGrant(u8),
    TakeUp(u8),
    Fence(u8),
    Disrupt,
    Work,
    Undisrupt,
    GiveUp,
    End,
    Release(u8),
}

impl fmt::Display for Does {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Does::ReadGrant(slot) => write!(f, "reads its grant of slot {slot}"),
            Does::TakeUp(slot) => write!(f, "compare-and-swaps window for its grant of {slot}"),
            Does::Fence(slot) => write!(f, "fences on Lease {slot}"),
            Does::Disrupt => f.write_str("disrupts its node"),
            Does::Work => f.write_str("does its work and puts its node back in service"),
            Does::Undisrupt => f.write_str("undisrupts its node"),
            Does::GiveUp => f.write_str("gives its window up: queued, no grant"),
            Does::End => f.write_str("writes idle, its grant cleared"),
            Does::Release(slot) => write!(f, "gives Lease {slot} back"),
        }
    }
}

/// What node `node`'s agent does next, or `None` while it waits for the scheduler.
pub fn next(flaw: Option<Flaw>, state: &State, node: u8) -> Option<Does> {
    let n = usize::from(node);
    let (rota_node, host) = (state.nodes[n], state.hosts[n]);
    match state.agents[n].pc {
        Pc::Top => match rota_node.status {
            Status::Queued => rota_node.grant.map(Does::ReadGrant),
            Status::Window if host.done => Some(Does::End),
            Status::Window if flaw == Some(Flaw::Unfenced) => Some(Does::Disrupt),
            Status::Window => Some(Does::Fence(window_slot(rota_node, node))),
            Status::Idle => None,
        },
        Pc::TakeUp { slot, .. } => Some(Does::TakeUp(slot)),
        Pc::Fenced => Some(Does::Disrupt),
        Pc::Disrupted => Some(Does::Work),
        Pc::Refused if host.out => Some(Does::Undisrupt),
        Pc::Refused => Some(Does::GiveUp),
        Pc::Release(slot) => Some(Does::Release(slot)),
    }
}

/// Only a take-up, of a grant, writes window, and every write of a grant is refused once the
/// status is window (the scheduler's compare-and-swaps were read from a queued node; a hand edit
/// is made to a queued one), so a window always has its grant.
fn window_slot(rota_node: RotaNode, node: u8) -> u8 {
    rota_node
        .grant
        .unwrap_or_else(|| panic!("node {node}: a window without a grant"))
}

/// Carries out `does`, node `node`'s agent's action.
pub fn carry_out(state: &mut State, node: u8, does: Does) {
    let n = usize::from(node);
    let rota_node = state.nodes[n];
    state.agents[n].pc = match does {
        Does::ReadGrant(slot) => Pc::TakeUp {
            slot,
            current: true,
        },
        Does::TakeUp(_) => {
            if let Pc::TakeUp { current: true, .. } = state.agents[n].pc {
                let window = RotaNode {
                    status: Status::Window,
                    ..rota_node
                };
                state.write_node(node, window, None);
            }
            // Taken up or refused, the next action reads the RotaNode again.
            Pc::Top
        }
        Does::Fence(slot) => {
            if state.leases[usize::from(slot)].holder == Some(node) {
                Pc::Fenced
            } else {
                Pc::Refused
            }
        }
        Does::Disrupt => {
            state.hosts[n].out = true;
            Pc::Disrupted
        }
        Does::Work => {
            state.hosts[n] = Host {
                out: false,
                done: true,
            };
            Pc::Top
        }
        Does::Undisrupt => {
            state.hosts[n].out = false;
            state.agents[n].pc
        }
        Does::GiveUp => {
            let queued = RotaNode {
                grant: None,
                status: Status::Queued,
            };
            state.write_node(node, queued, None);
            Pc::Top
        }
        Does::End => {
            let idle = RotaNode {
                grant: None,
                status: Status::Idle,
            };
            state.write_node(node, idle, None);
            Pc::Release(window_slot(rota_node, node))
        }
        Does::Release(slot) => {
            if state.leases[usize::from(slot)].holder == Some(node) {
                state.write_lease(slot, Lease { holder: None }, None);
            }
            Pc::Top
        }
    };
}
