//! A pure model of `concurrency` slots shared by many nodes, each following its [`Lifecycle`].
//!
//! Used by property tests of the safety invariants (docs/design.md §4) and by `rota simulate`'s
//! bookkeeping; the stores enforce the same slot limit against real substrates.

use crate::lifecycle::{Effect, Event, Lifecycle, NodeState, TransitionError};

/// Nodes sharing a fixed number of slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    concurrency: u32,
    nodes: Vec<Lifecycle>,
}

/// An event the fleet refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetError {
    /// Every slot is held, so the node may not acquire one.
    #[error(
        "no free slot for node {node}: all {concurrency} slots are held (a node may acquire a slot only while fewer than {concurrency} are held)"
    )]
    NoFreeSlot {
        /// The node that asked.
        node: usize,
        /// The number of slots.
        concurrency: u32,
    },
    /// The node index is out of range.
    #[error("unknown node {node}: expected an index 0..{nodes}")]
    UnknownNode {
        /// The index given.
        node: usize,
        /// The number of nodes.
        nodes: usize,
    },
    /// The node's lifecycle refused the event.
    #[error(transparent)]
    Transition(#[from] TransitionError),
}

impl Fleet {
    /// `nodes` idle nodes sharing `concurrency` slots.
    pub fn new(concurrency: u32, nodes: usize) -> Fleet {
        Fleet {
            concurrency,
            nodes: vec![Lifecycle::idle(); nodes],
        }
    }

    /// Applies `event` to `node`, refusing a slot acquisition while every slot is held. Nothing
    /// changes when an error is returned.
    pub fn apply(&mut self, node: usize, event: &Event) -> Result<Vec<Effect>, FleetError> {
        let nodes = self.nodes.len();
        let current = self
            .nodes
            .get(node)
            .ok_or(FleetError::UnknownNode { node, nodes })?;
        let (next, effects) = current.apply(event)?;
        let acquires = !current.holds_slot() && next.holds_slot();
        if acquires && self.holders() >= self.slots() {
            return Err(FleetError::NoFreeSlot {
                node,
                concurrency: self.concurrency,
            });
        }
        if let Some(slot) = self.nodes.get_mut(node) {
            *slot = next;
        }
        Ok(effects)
    }

    /// The number of slots.
    pub fn concurrency(&self) -> u32 {
        self.concurrency
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the fleet has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The number of nodes holding a slot.
    pub fn holders(&self) -> usize {
        self.nodes.iter().filter(|n| n.holds_slot()).count()
    }

    /// The number of nodes that rota has cordoned.
    pub fn cordoned_by_rota(&self) -> usize {
        self.nodes.iter().filter(|n| n.cordoned_by_rota).count()
    }

    /// The state of `node`.
    ///
    /// # Panics
    ///
    /// If `node` is not below [`Fleet::len`], like slice indexing.
    pub fn state(&self, node: usize) -> NodeState {
        self.nodes[node].state
    }

    /// The lifecycle of `node`, or `None` if there is no such node.
    pub fn lifecycle(&self, node: usize) -> Option<&Lifecycle> {
        self.nodes.get(node)
    }

    /// The slot count as a node count; `u32` always fits in `usize` on supported targets, and
    /// saturating keeps the comparison correct otherwise.
    fn slots(&self) -> usize {
        usize::try_from(self.concurrency).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refuses_a_slot_beyond_concurrency() {
        let mut fleet = Fleet::new(1, 2);
        let acquire = Event::SlotAcquired {
            pre_cordoned: false,
        };
        for node in 0..2 {
            assert_eq!(fleet.apply(node, &Event::Requested), Ok(vec![]));
        }
        assert_eq!(fleet.apply(0, &acquire), Ok(vec![Effect::Cordon]));
        assert_eq!(
            fleet.apply(1, &acquire),
            Err(FleetError::NoFreeSlot {
                node: 1,
                concurrency: 1
            })
        );
        assert_eq!(fleet.state(1), NodeState::Queued);
        assert!(fleet.apply(0, &Event::Unlock).is_ok());
        assert_eq!(fleet.apply(1, &acquire), Ok(vec![Effect::Cordon]));
        assert_eq!((fleet.holders(), fleet.cordoned_by_rota()), (1, 1));
    }

    #[test]
    fn invalid_transition_and_unknown_node_change_nothing() {
        let mut fleet = Fleet::new(1, 1);
        assert!(matches!(
            fleet.apply(0, &Event::Drained),
            Err(FleetError::Transition(_))
        ));
        assert_eq!(
            fleet.apply(5, &Event::Requested),
            Err(FleetError::UnknownNode { node: 5, nodes: 1 })
        );
        assert_eq!(fleet, Fleet::new(1, 1));
        assert_eq!(fleet.len(), 1);
        assert!(!fleet.is_empty());
        assert_eq!(fleet.concurrency(), 1);
        assert_eq!(fleet.lifecycle(3), None);
    }

    #[test]
    fn no_free_slot_message_names_node_and_limit() {
        let err = FleetError::NoFreeSlot {
            node: 3,
            concurrency: 2,
        };
        assert_eq!(
            err.to_string(),
            "no free slot for node 3: all 2 slots are held (a node may acquire a slot only while fewer than 2 are held)"
        );
    }

    fn arb_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            // Weight the forward path so that runs reach the later states often.
            3 => Just(Event::Requested),
            1 => Just(Event::Canceled),
            3 => any::<bool>().prop_map(|pre_cordoned| Event::SlotAcquired { pre_cordoned }),
            3 => Just(Event::Drained),
            1 => Just(Event::DrainFailed),
            2 => Just(Event::RebootStarted),
            2 => Just(Event::WorkDone),
            1 => Just(Event::WorkFailed),
            2 => Just(Event::BootChanged),
            1 => Just(Event::RebootTimedOut),
            3 => Just(Event::Healthy),
            1 => Just(Event::Unhealthy),
            1 => Just(Event::Retry),
            1 => Just(Event::Unlock),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn invariants_hold_under_any_event_sequence(
            concurrency in 1_u32..4,
            node_count in 1_usize..8,
            steps in prop::collection::vec((any::<usize>(), arb_event()), 0..300),
        ) {
            let mut fleet = Fleet::new(concurrency, node_count);
            let k = usize::try_from(concurrency).unwrap_or(usize::MAX);
            for (pick, event) in steps {
                let node = pick % node_count;
                let before = *fleet.lifecycle(node).ok_or_else(|| TestCaseError::fail("node"))?;
                let snapshot = fleet.clone();
                let Ok(effects) = fleet.apply(node, &event) else {
                    prop_assert_eq!(&fleet, &snapshot, "a refused event changed the fleet");
                    continue;
                };
                let after = *fleet.lifecycle(node).ok_or_else(|| TestCaseError::fail("node"))?;

                // Invariant 1: never more than k nodes disrupted.
                prop_assert!(fleet.holders() <= k);
                prop_assert!(fleet.cordoned_by_rota() <= k);
                for n in 0..node_count {
                    let l = fleet.lifecycle(n).ok_or_else(|| TestCaseError::fail("node"))?;
                    // Invariant 2: rota's cordon only while holding a slot.
                    prop_assert!(!l.cordoned_by_rota || l.holds_slot(), "{:?}", l);
                    prop_assert!(!(l.pre_cordoned && l.cordoned_by_rota), "{:?}", l);
                    if matches!(l.state, NodeState::Idle | NodeState::Queued) {
                        prop_assert!(!l.holds_slot() && !l.cordoned_by_rota && !l.pre_cordoned);
                    }
                }
                // A pre-existing cordon is never lifted; only rota's own is.
                if effects.contains(&Effect::Uncordon) {
                    prop_assert!(before.cordoned_by_rota && !before.pre_cordoned);
                }
                // Cordon happens only when acquiring a slot, and never on a pre-cordoned node.
                if effects.contains(&Effect::Cordon) {
                    prop_assert!(!before.holds_slot() && after.holds_slot());
                    prop_assert!(!after.pre_cordoned);
                }
                // Slots are released exactly when a holder stops holding.
                prop_assert_eq!(
                    effects.contains(&Effect::ReleaseSlot),
                    before.holds_slot() && !after.holds_slot()
                );
                // Invariant 3: a healthy node is returned to service and recorded.
                if event == Event::Healthy {
                    prop_assert!(effects.contains(&Effect::ReleaseSlot));
                    prop_assert!(effects.contains(&Effect::RecordFinished));
                    prop_assert_eq!(effects.contains(&Effect::Uncordon), before.cordoned_by_rota);
                    prop_assert_eq!(after.state, NodeState::Idle);
                }
            }
        }
    }
}
