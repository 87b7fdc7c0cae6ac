//! What a scheduler does on its read of the fleet: the slots it grants, by [`schedule`], and
//! the Leases it takes back (docs/design.md §7; model-checked in `tests/scheduler_model`).
//!
//! The scheduler carries each [`Operation`] out by compare-and-swap, on the read it decided
//! on. A grant writes the Lease of the slot from free to the node, then the grant in the node's
//! RotaNode. A withdrawal writes the node's RotaNode first, removing a grant not taken up (a
//! write that fails if the agent took the grant up since the read), then the Lease back to
//! free. This module only decides.

use crate::decision::Millis;
use crate::names::NodeName;
use crate::schedule::{Held, Limits, Waiter, schedule};

/// The scheduler's read of one node's RotaNode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub node: NodeName,
    /// Its place while it asks for a turn (its agent wrote it queued); `None` otherwise.
    pub queued: Option<Millis>,
    /// Something holds it back (a blocker, the fleet's pause).
    pub blocked: bool,
    /// Its agent's session is live.
    pub alive: bool,
    pub group: Option<String>,
    /// The slot its RotaNode grants it, if any.
    pub grant: Option<Granted>,
    /// Its agent took the grant up: the node is in its window.
    pub taken_up: bool,
    /// When its state last changed.
    pub since: Millis,
}

/// A grant as a RotaNode records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    pub slot: u32,
    /// When the scheduler wrote it.
    pub at: Millis,
}

impl NodeView {
    /// Whether the node is in a window of `slot`: the one state in which that slot's Lease is
    /// in use rather than to be given back.
    pub fn in_window_of(&self, slot: u32) -> bool {
        self.taken_up && self.grant.is_some_and(|grant| grant.slot == slot)
    }
}

/// The scheduler's read of one slot's Lease: the node it names, if any, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    pub slot: u32,
    pub holder: Option<NodeName>,
    pub acquired_at: Millis,
}

/// How long a Lease not in use is left to its node's agent to give back: long enough for the
/// agent's own release after it writes idle, short enough that a Lease it could not give back
/// (the API server was out of reach, the agent died) holds its slot only briefly.
pub const RELEASE_GRACE: Millis = 5_000;

/// One thing a scheduler does, as one decision on one read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// The Lease of `slot` from free to `node`, then `node`'s grant.
    Grant { node: NodeName, slot: u32 },
    /// `node`'s RotaNode, then the Lease of `slot` back to free.
    Withdraw {
        node: NodeName,
        slot: u32,
        why: Withdrawal,
    },
}

/// Why a Lease goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    /// The node's agent did not take its grant up in time (it is dead, or hangs): the grant is
    /// removed, and the node waits for its turn again.
    NotTakenUp,
    /// The node is in no window of the Lease: its grant was never written (a scheduler stopped
    /// between its two writes), or was given up, or the window ended without the Lease.
    Unused,
    /// The node became blocked (a blocker, the fleet's pause) before its agent took the grant
    /// up: its agent will not take it up while it is, and the slot goes to the next waiter.
    Blocked,
}

/// The operations a read of `nodes` and `leases` calls for at `now`: the grants [`schedule`]
/// makes among the nodes queued without a grant and named by no Lease, in queue order, then
/// the withdrawals, by slot. A grant is withdrawn once `take_up` has passed since it was
/// written, or at once when its node is blocked. A Lease whose node is in no window of it goes
/// back once [`RELEASE_GRACE`] (or `take_up`, if shorter) has passed since it was taken and
/// since its node last changed: the node's agent gives it back itself right after it leaves
/// its window, and a read that shows a Lease just taken without its grant may be older than
/// the grant's write.
pub fn decide(
    nodes: &[NodeView],
    leases: &[LeaseView],
    limits: &Limits,
    now: Millis,
    take_up: Millis,
) -> Vec<Operation> {
    let named = |node: &NodeName| leases.iter().any(|l| l.holder.as_ref() == Some(node));
    let view = |node: &NodeName| nodes.iter().find(|n| &n.node == node);
    let queue: Vec<Waiter> = nodes
        .iter()
        .filter(|n| n.grant.is_none() && !named(&n.node))
        .filter_map(|n| {
            Some(Waiter {
                node: n.node.clone(),
                place: n.queued?,
                blocked: n.blocked,
                alive: n.alive,
                group: n.group.clone(),
            })
        })
        .collect();
    let held: Vec<Held> = leases
        .iter()
        .filter_map(|lease| {
            let holder = lease.holder.as_ref()?;
            Some(Held {
                slot: lease.slot,
                group: view(holder).and_then(|n| n.group.clone()),
            })
        })
        .collect();
    // A grant written a moment ago whose Lease the read does not show naming its node means
    // the read of the Leases is behind the read of the RotaNodes (two watches, each at its own
    // pace; a grant's Lease is written first): granting on it could count a group without the
    // node just granted. No grant is decided on such a read; the next one catches up. (A grant
    // written by hand, with no Lease, holds the grants back only that moment.)
    let behind = nodes.iter().any(|n| {
        n.grant.is_some_and(|g| {
            now.saturating_sub(g.at) < RELEASE_GRACE.min(take_up)
                && !leases
                    .iter()
                    .any(|l| l.slot == g.slot && l.holder.as_ref() == Some(&n.node))
        })
    });
    let grants = if behind {
        Vec::new()
    } else {
        schedule(&queue, &held, limits, now).grants
    };
    let grants = grants.into_iter();
    let grants = grants.map(|grant| Operation::Grant {
        node: grant.node,
        slot: grant.slot,
    });
    let withdrawals = leases.iter().filter_map(|lease| {
        let node = lease.holder.as_ref()?;
        let why = match view(node) {
            Some(n) if n.in_window_of(lease.slot) => return None,
            Some(NodeView {
                queued: Some(_),
                grant: Some(Granted { slot, .. }),
                blocked: true,
                ..
            }) if *slot == lease.slot => Withdrawal::Blocked,
            Some(NodeView {
                queued: Some(_),
                grant: Some(Granted { slot, at }),
                ..
            }) if *slot == lease.slot => {
                if now.saturating_sub(*at) < take_up {
                    return None;
                }
                Withdrawal::NotTakenUp
            }
            other => {
                let since = other.map_or(0, |n| n.since).max(lease.acquired_at);
                if now.saturating_sub(since) < take_up.min(RELEASE_GRACE) {
                    return None;
                }
                Withdrawal::Unused
            }
        };
        Some(Operation::Withdraw {
            node: node.clone(),
            slot: lease.slot,
            why,
        })
    });
    grants.chain(withdrawals).collect()
}

#[cfg(test)]
#[path = "grants_tests.rs"]
mod tests;
