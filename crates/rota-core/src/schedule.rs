//! Who takes a slot next: the one statement of the queue's rule (docs/design.md §3, §4).
//!
//! The queue is first come, first served by place (the time a node became eligible, then its
//! name). A node takes no slot while it is blocked (a blocker, the fleet's pause), before its
//! place comes (its backoff runs until then), or while its agent's session is dead; such a
//! node does not hold up the nodes behind it either, and keeps its place. Slots are numbered
//! `0..concurrency`; each grant takes the lowest free one, and no more are granted than the
//! concurrency less the slots held (a lowered concurrency takes no slot away: those held
//! beyond it go back before anyone else takes one).
//!
//! A node may belong to a group (a zone, a pool), and a group may have a limit of its own
//! beside the fleet's (named, or one for every group): a node is granted only when both allow
//! it, and a node whose group is full does not hold up the nodes of other groups behind it.
//! With groups in turn, one group goes at a time: the group that holds slots (the first by
//! name, if several do), or when none does, the first group by name with a node that may go;
//! the nodes of the other groups wait, keeping their places, until it holds none. A node of no
//! group counts as a group of its own, before every named one.

use std::collections::BTreeMap;

use crate::decision::Millis;
use crate::groups::GroupRules;
use crate::names::NodeName;
use crate::rollout::Batches;

/// One queued node that holds no slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub node: NodeName,
    /// Its place in the queue: the time from which it may take a slot (`queued_at`).
    pub place: Millis,
    /// Something holds it back (its recorded blocked reason).
    pub blocked: bool,
    /// Its agent's session is current and unexpired.
    pub alive: bool,
    /// The group it belongs to, if any.
    pub group: Option<String>,
}

impl Waiter {
    /// Its place in the queue's order.
    pub fn place_in_order(&self) -> Place<'_> {
        Place {
            at: self.place,
            node: &self.node,
        }
    }
}

/// A place in the queue's order: first come (the time a node became eligible), first served,
/// then by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place<'a> {
    pub at: Millis,
    pub node: &'a NodeName,
}

/// Whether the queue goes by place alone: without group rules and with batches that never
/// narrow the concurrency, a waiter further back never goes before one ahead.
pub fn by_place_alone(groups: &GroupRules, batches: &Batches) -> bool {
    groups.is_default() && *batches == Batches::All
}

/// The turn of a waiter behind another in a queue that goes by place alone: a waiter whose
/// turn cannot come before change count `turn`, at `ahead`, holds one at `behind` (later in
/// the order) back one change longer, since each change moves a waiter at most one place
/// forward. `None` when `behind` is not behind.
pub fn turn_behind(ahead: Place<'_>, turn: u64, behind: Place<'_>) -> Option<u64> {
    (behind > ahead).then(|| turn.saturating_add(1))
}

/// The fleet's concurrency until one is set: one node at a time.
pub const DEFAULT_CONCURRENCY: u32 = 1;

/// One slot in use, and the group of the node that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub slot: u32,
    pub group: Option<String>,
}

/// How many nodes may hold a slot at once: the fleet's concurrency, and the groups' own limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub concurrency: u32,
    /// The limits of named groups.
    pub groups: BTreeMap<String, u32>,
    /// The limit of every group not named in `groups`.
    pub each_group: Option<u32>,
    /// One group at a time.
    pub in_turn: bool,
    /// The concurrency is a rollout's width that widens as windows end (see
    /// [`Limits::counts_handoffs`]).
    pub widens: bool,
}

impl Limits {
    /// The fleet's concurrency and no group limit.
    pub fn fleet(concurrency: u32) -> Limits {
        Limits {
            concurrency,
            ..Limits::default()
        }
    }

    /// Whether a waiter's turn can be counted in the fleet's handoffs: every end frees one
    /// slot for the first waiter that may take it. Not when the width widens (an end may let
    /// several go), nor with groups' rules (an end frees a slot for its own group first, and a
    /// waiter of another group would sleep through it): waiters then look at every change.
    pub fn counts_handoffs(&self) -> bool {
        !self.widens && !self.in_turn && self.groups.is_empty() && self.each_group.is_none()
    }

    /// The limit of `group`, if it has one.
    pub fn of_group(&self, group: &str) -> Option<u32> {
        self.groups.get(group).copied().or(self.each_group)
    }

    /// The fleet's `concurrency`, narrowed to the width `batches` reached once `finished`
    /// nodes ended their windows healthy in this rollout (see [`Batches::width`]).
    pub fn rollout(concurrency: u32, batches: &Batches, finished: u32) -> Limits {
        let width = batches.width(concurrency, finished);
        Limits {
            widens: width < concurrency,
            ..Limits::fleet(width)
        }
    }
}

/// A slot given to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub node: NodeName,
    pub slot: u32,
}

/// What [`schedule`] decided for one waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// It takes this slot now.
    Granted(u32),
    /// Not yet. At least this many wake-ups (a slot given back, a waiter leaving the queue)
    /// must happen before its turn, since each moves a waiter at most one place forward; a
    /// node that waits for its own place, its block or its session counts one.
    Wait { changes: u64 },
}

/// The answer of [`schedule`]: the grants, in queue order, and every waiter's turn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    pub grants: Vec<Grant>,
    pub turns: BTreeMap<NodeName, Turn>,
}

impl Schedule {
    /// The turn of `node`, or `None` if it was not among the waiters.
    pub fn turn(&self, node: &NodeName) -> Option<Turn> {
        self.turns.get(node).copied()
    }
}

/// Grants the free slots to the waiters in queue order, at `now`, and tells every other
/// waiter how far its turn is.
pub fn schedule(queue: &[Waiter], held: &[Held], limits: &Limits, now: Millis) -> Schedule {
    let mut order: Vec<&Waiter> = queue.iter().collect();
    order.sort_by_key(|w| w.place_in_order());
    // Slots held beyond a lowered concurrency count against it: they must go back first.
    let free_at_start =
        i64::from(limits.concurrency) - i64::try_from(held.len()).unwrap_or(i64::MAX);
    let mut free: Vec<u32> = (0..limits.concurrency)
        .filter(|slot| !held.iter().any(|h| h.slot == *slot))
        .take(usize::try_from(free_at_start).unwrap_or(0))
        .collect();
    free.reverse();
    let mut in_group: BTreeMap<&str, u32> = BTreeMap::new();
    for group in held.iter().filter_map(|h| h.group.as_deref()) {
        *in_group.entry(group).or_default() += 1;
    }
    let eligible = |w: &Waiter| !w.blocked && w.alive && w.place <= now;
    // With groups in turn, the one group that may take slots (`None` within: no group).
    let in_turn: Option<Option<&str>> = if limits.in_turn {
        held.iter().map(|h| h.group.as_deref()).min().or_else(|| {
            order
                .iter()
                .filter(|w| eligible(w))
                .map(|w| w.group.as_deref())
                .min()
        })
    } else {
        None
    };
    let mut schedule = Schedule::default();
    // The eligible waiters ahead of the one at hand that were not granted.
    let mut ahead: i64 = 0;
    for waiter in order {
        if !eligible(waiter) {
            schedule
                .turns
                .insert(waiter.node.clone(), Turn::Wait { changes: 1 });
            continue;
        }
        let out_of_turn = in_turn.is_some_and(|group| group != waiter.group.as_deref());
        let group_full = out_of_turn
            || waiter.group.as_deref().is_some_and(|group| {
                limits
                    .of_group(group)
                    .is_some_and(|limit| in_group.get(group).copied().unwrap_or(0) >= limit)
            });
        let turn = match free.last() {
            Some(&slot) if !group_full => {
                free.pop();
                if let Some(group) = waiter.group.as_deref() {
                    *in_group.entry(group).or_default() += 1;
                }
                schedule.grants.push(Grant {
                    node: waiter.node.clone(),
                    slot,
                });
                Turn::Granted(slot)
            }
            _ if group_full => Turn::Wait { changes: 1 },
            _ if !limits.counts_handoffs() => Turn::Wait { changes: 1 },
            _ => {
                let granted = i64::try_from(schedule.grants.len()).unwrap_or(i64::MAX);
                let changes = ahead + granted + 1 - free_at_start;
                ahead += 1;
                Turn::Wait {
                    changes: u64::try_from(changes).unwrap_or(0).max(1),
                }
            }
        };
        schedule.turns.insert(waiter.node.clone(), turn);
    }
    schedule
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
