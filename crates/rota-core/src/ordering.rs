//! The per-node procedure priority rule (docs/design.md §5).
//!
//! Procedure P may start when no other procedure Q on the node, running or waiting, has
//! `Q.priority < P.priority`, or `Q.priority == P.priority` and Q arrived first. A more important
//! procedure is therefore never blocked by a less important one (they may overlap), equal
//! priorities run one after another in arrival order, and a less important one waits until every
//! more important one has finished.

use crate::priority::Priority;

/// One procedure on one node, as the priority rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcedureEntry {
    /// Identifies the entry; an entry never blocks itself.
    pub id: u64,
    /// Lower is more important.
    pub priority: Priority,
    /// Monotonically increasing arrival sequence on the node; smaller arrived earlier.
    pub arrival: u64,
    /// Whether the procedure is running (otherwise it is waiting).
    pub running: bool,
    /// Never overlaps another procedure on the node: it starts only when nothing runs, and
    /// nothing starts while it runs.
    pub exclusive: bool,
}

impl ProcedureEntry {
    /// The order in which entries are served. The id only breaks ties between entries that
    /// (wrongly) share an arrival number, so that two of them can never both be cleared.
    fn rank(&self) -> (Priority, u64, u64) {
        (self.priority, self.arrival, self.id)
    }
}

/// Whether `candidate` may start now given the `others` on its node (running or waiting). An
/// entry in `others` with the candidate's id is the candidate itself and is skipped.
pub fn may_start(candidate: &ProcedureEntry, others: &[ProcedureEntry]) -> bool {
    others
        .iter()
        .filter(|other| other.id != candidate.id)
        .all(|other| other.rank() > candidate.rank())
}

/// Ids of the waiting entries that may start now, most important first. An exclusive entry
/// starts only if nothing runs and nothing was cleared before it; while one runs, or once one
/// is cleared, nothing else is.
pub fn startable(entries: &[ProcedureEntry]) -> Vec<u64> {
    let mut ready: Vec<&ProcedureEntry> = entries
        .iter()
        .filter(|entry| !entry.running && may_start(entry, entries))
        .collect();
    ready.sort_by_key(|entry| entry.rank());
    let mut anything_running = entries.iter().any(|entry| entry.running);
    let mut exclusive_running = entries.iter().any(|entry| entry.running && entry.exclusive);
    let mut cleared = Vec::new();
    for entry in ready {
        if exclusive_running || (entry.exclusive && anything_running) {
            continue;
        }
        anything_running = true;
        exclusive_running |= entry.exclusive;
        cleared.push(entry.id);
    }
    cleared
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn prio(value: u8) -> Priority {
        Priority::new(value).unwrap_or(Priority::DEFAULT)
    }

    fn entry(id: u64, priority: u8, arrival: u64, running: bool) -> ProcedureEntry {
        ProcedureEntry {
            id,
            priority: prio(priority),
            arrival,
            running,
            exclusive: false,
        }
    }

    fn exclusive(entry: ProcedureEntry) -> ProcedureEntry {
        ProcedureEntry {
            exclusive: true,
            ..entry
        }
    }

    fn start(entries: &mut [ProcedureEntry], ids: &[u64]) {
        for e in entries.iter_mut().filter(|e| ids.contains(&e.id)) {
            e.running = true;
        }
    }

    #[test]
    fn important_arrival_starts_at_once_beside_running_unimportant() {
        let entries = [entry(1, 99, 0, true), entry(2, 0, 1, false)];
        assert_eq!(startable(&entries), vec![2]);
        assert!(may_start(&entries[1], &entries));
    }

    #[test]
    fn unimportant_arrival_waits_for_running_important() {
        let entries = [entry(1, 0, 0, true), entry(2, 99, 1, false)];
        assert!(startable(&entries).is_empty());
        assert!(!may_start(&entries[1], &entries));
    }

    #[test]
    fn equal_priorities_start_one_after_another_in_arrival_order() {
        let mut entries = vec![
            entry(3, 50, 2, false),
            entry(1, 50, 0, false),
            entry(2, 50, 1, false),
        ];
        let mut order: Vec<u64> = Vec::new();
        while !entries.is_empty() {
            let ready = startable(&entries);
            assert_eq!(ready.len(), 1, "exactly one at a time: {entries:?}");
            start(&mut entries, &ready);
            assert!(startable(&entries).is_empty(), "none while it runs");
            order.extend(&ready);
            entries.retain(|e| !ready.contains(&e.id));
        }
        assert_eq!(order, vec![1, 2, 3]);
    }

    #[test]
    fn less_important_waits_for_every_more_important() {
        let mut entries = vec![
            entry(1, 10, 0, true),
            entry(2, 20, 1, false),
            entry(3, 90, 2, false),
        ];
        assert!(startable(&entries).is_empty());
        entries.retain(|e| e.id != 1);
        assert_eq!(startable(&entries), vec![2]);
        start(&mut entries, &[2]);
        assert!(startable(&entries).is_empty());
        entries.retain(|e| e.id != 2);
        assert_eq!(startable(&entries), vec![3]);
    }

    #[test]
    fn an_entry_does_not_block_itself() {
        let candidate = entry(1, 50, 0, false);
        assert!(may_start(&candidate, &[candidate]));
        assert!(may_start(&candidate, &[]));
    }

    #[test]
    fn shared_arrival_numbers_still_serialise() {
        let entries = [entry(1, 50, 7, false), entry(2, 50, 7, false)];
        assert_eq!(startable(&entries), vec![1]);
    }

    #[test]
    fn exclusive_never_overlaps() {
        let entries = [entry(1, 99, 0, true), entry(2, 0, 1, false)];
        assert_eq!(startable(&entries), vec![2]);
        let all_exclusive = entries.map(exclusive);
        assert!(startable(&all_exclusive).is_empty());
        let waiting = [entry(1, 99, 0, false), entry(2, 0, 1, false)].map(exclusive);
        assert_eq!(startable(&waiting), vec![2]);
        assert!(startable(&[]).is_empty());
    }

    #[test]
    fn an_exclusive_procedure_waits_for_any_running_and_holds_every_other() {
        let beside_running = [entry(1, 99, 0, true), exclusive(entry(2, 0, 1, false))];
        assert!(
            startable(&beside_running).is_empty(),
            "waits for a running one"
        );
        let running_exclusive = [exclusive(entry(1, 99, 0, true)), entry(2, 0, 1, false)];
        assert!(
            startable(&running_exclusive).is_empty(),
            "holds a more important one"
        );
        let alone_and_first = [exclusive(entry(1, 0, 0, false)), entry(2, 50, 1, true)];
        assert!(
            startable(&alone_and_first).is_empty(),
            "waits for a less important one"
        );
        let exclusive_first = [exclusive(entry(1, 0, 0, false)), entry(2, 0, 1, false)];
        assert_eq!(startable(&exclusive_first), vec![1]);
    }

    fn arb_entry() -> impl Strategy<Value = ProcedureEntry> {
        (0_u64..20, 0_u8..=99, 0_u64..20, any::<bool>())
            .prop_map(|(id, p, arrival, running)| entry(id, p, arrival, running))
    }

    /// One move of a simulated node: a procedure arrives, one running procedure finishes (chosen
    /// by index), or the node starts whatever the rule clears.
    #[derive(Debug, Clone)]
    enum Move {
        /// A procedure of this priority arrives; exclusive if the flag says so.
        Arrive(u8, bool),
        Finish(usize),
        Start,
    }

    fn arb_move() -> impl Strategy<Value = Move> {
        prop_oneof![
            // Few distinct priorities so that equal priorities meet often.
            (0_u8..4, prop::bool::weighted(0.2)).prop_map(|(p, alone)| Move::Arrive(p * 33, alone)),
            any::<usize>().prop_map(Move::Finish),
            Just(Move::Start),
        ]
    }

    proptest! {
        #[test]
        fn never_blocked_by_less_important(
            candidate in arb_entry(),
            others in prop::collection::vec(arb_entry(), 0..8),
            less_priority in 0_u8..=99,
            less_arrival in any::<u64>(),
            less_running in any::<bool>(),
        ) {
            prop_assume!(less_priority > candidate.priority.value());
            let less = entry(1000, less_priority, less_arrival, less_running);
            let mut with_less = others.clone();
            with_less.push(less);
            prop_assert_eq!(may_start(&candidate, &others), may_start(&candidate, &with_less));
            prop_assert!(may_start(&candidate, &[less]));
        }

        #[test]
        fn simulated_node_follows_the_rule(
            moves in prop::collection::vec(arb_move(), 0..200),
            exclusive in any::<bool>(),
        ) {
            let mut entries: Vec<ProcedureEntry> = Vec::new();
            let mut next_id = 0_u64;
            let mut last_started: HashMap<Priority, u64> = HashMap::new();
            for next_move in moves {
                match next_move {
                    Move::Arrive(p, alone) => {
                        let arrived = entry(next_id, p, next_id, false);
                        entries.push(ProcedureEntry { exclusive: exclusive || alone, ..arrived });
                        next_id += 1;
                    }
                    Move::Finish(pick) => {
                        let running: Vec<u64> =
                            entries.iter().filter(|e| e.running).map(|e| e.id).collect();
                        if !running.is_empty() {
                            let id = running[pick % running.len()];
                            entries.retain(|e| e.id != id);
                        }
                    }
                    Move::Start => {
                        let ready = startable(&entries);
                        for id in &ready {
                            let Some(started) = entries.iter().find(|e| e.id == *id).copied()
                            else {
                                return Err(TestCaseError::fail("unknown id returned"));
                            };
                            prop_assert!(!started.running);
                            for other in entries.iter().filter(|e| e.id != *id) {
                                prop_assert!(
                                    other.priority >= started.priority,
                                    "{:?} started while more important {:?} present",
                                    started, other
                                );
                                prop_assert!(
                                    other.priority != started.priority
                                        || other.arrival > started.arrival,
                                    "{:?} started while equal, earlier {:?} present",
                                    started, other
                                );
                            }
                            if let Some(previous) = last_started.insert(started.priority, started.arrival) {
                                prop_assert!(previous < started.arrival, "arrival order broken");
                            }
                        }
                        start(&mut entries, &ready);
                    }
                }
                let mut running_per_priority: HashMap<Priority, usize> = HashMap::new();
                for e in entries.iter().filter(|e| e.running) {
                    *running_per_priority.entry(e.priority).or_default() += 1;
                }
                prop_assert!(running_per_priority.values().all(|n| *n <= 1));
                let running = entries.iter().filter(|e| e.running).count();
                if entries.iter().any(|e| e.running && e.exclusive) {
                    prop_assert!(running <= 1, "an exclusive procedure overlapped: {entries:?}");
                }
                if exclusive {
                    prop_assert!(running <= 1);
                }
            }
        }
    }
}
