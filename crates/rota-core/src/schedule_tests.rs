use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

/// The time every schedule is made at.
const NOW: Millis = 1_000;

fn name(node: &str) -> NodeName {
    NodeName::new(node).expect("valid node name")
}

/// An alive, unblocked, ungrouped waiter.
fn waiter(node: &str, place: Millis) -> Waiter {
    Waiter {
        node: name(node),
        place,
        blocked: false,
        alive: true,
        group: None,
    }
}

fn in_group(node: &str, place: Millis, group: &str) -> Waiter {
    Waiter {
        group: Some(group.into()),
        ..waiter(node, place)
    }
}

fn held(slot: u32) -> Held {
    Held { slot, group: None }
}

fn held_in(slot: u32, group: &str) -> Held {
    Held {
        slot,
        group: Some(group.into()),
    }
}

fn limits(concurrency: u32, groups: &[(&str, u32)]) -> Limits {
    Limits {
        concurrency,
        groups: groups.iter().map(|(g, l)| (g.to_string(), *l)).collect(),
        ..Limits::default()
    }
}

fn wait(changes: u64) -> Turn {
    Turn::Wait { changes }
}

/// Schedules at [`NOW`] and returns every named node's turn, in the order named.
fn turns(queue: &[Waiter], held: &[Held], limits: &Limits, nodes: &[&str]) -> Vec<Turn> {
    let schedule = schedule(queue, held, limits, NOW);
    assert_eq!(schedule.turns.len(), queue.len(), "every waiter has a turn");
    nodes
        .iter()
        .map(|node| schedule.turn(&name(node)).expect("a waiter"))
        .collect()
}

#[test]
fn first_come_first_served_by_place_then_name_into_the_lowest_free_slot() {
    let queue = [
        waiter("b", 5),
        waiter("a", 5),
        waiter("c", 1),
        waiter("d", 7),
        waiter("e", 8),
    ];
    let schedule = schedule(&queue, &[held(0), held(2)], &Limits::fleet(5), NOW);
    let grants: Vec<(&str, u32)> = schedule
        .grants
        .iter()
        .map(|g| (g.node.as_str(), g.slot))
        .collect();
    assert_eq!(grants, [("c", 1), ("a", 3), ("b", 4)]);
    assert_eq!(schedule.turn(&name("a")), Some(Turn::Granted(3)));
    assert_eq!(schedule.turn(&name("d")), Some(wait(1)));
    assert_eq!(schedule.turn(&name("e")), Some(wait(2)));
    assert_eq!(schedule.turn(&name("z")), None);
}

#[test]
fn each_waiter_behind_a_full_fleet_waits_one_more_change() {
    let queue = [waiter("c", 3), waiter("a", 1), waiter("b", 2)];
    let got = turns(&queue, &[held(0)], &Limits::fleet(1), &["a", "b", "c"]);
    assert_eq!(got, [wait(1), wait(2), wait(3)]);
    // Two slots in use of three: the first takes the free one, the others count from it.
    let got = turns(
        &queue,
        &[held(0), held(2)],
        &Limits::fleet(3),
        &["a", "b", "c"],
    );
    assert_eq!(got, [Turn::Granted(1), wait(1), wait(2)]);
    // No slot at all.
    let got = turns(&queue, &[], &Limits::fleet(0), &["a", "b", "c"]);
    assert_eq!(got, [wait(1), wait(2), wait(3)]);
}

#[test]
fn blocked_dead_and_early_waiters_wait_for_one_change_and_hold_nobody_up() {
    let queue = [
        Waiter {
            blocked: true,
            ..waiter("a", 1)
        },
        Waiter {
            alive: false,
            ..waiter("b", 2)
        },
        waiter("c", NOW + 1),
        waiter("d", 3),
        waiter("e", NOW),
        waiter("f", 5),
        waiter("g", 6),
    ];
    let got = turns(
        &queue,
        &[],
        &Limits::fleet(2),
        &["a", "b", "c", "d", "e", "f", "g"],
    );
    assert_eq!(
        got,
        [
            wait(1),
            wait(1),
            wait(1),
            Turn::Granted(0),
            wait(2),
            Turn::Granted(1),
            wait(1),
        ]
    );
}

#[test]
fn a_full_group_waits_without_holding_up_other_groups() {
    let queue = [
        in_group("a1", 1, "rack-a"),
        in_group("b1", 2, "rack-b"),
        in_group("b2", 3, "rack-b"),
        in_group("b3", 4, "rack-b"),
        waiter("c", 5),
    ];
    let held = [held_in(0, "rack-a")];
    let limits = limits(3, &[("rack-a", 1), ("rack-b", 3)]);
    let got = turns(&queue, &held, &limits, &["a1", "b1", "b2", "b3", "c"]);
    assert_eq!(
        got,
        [
            wait(1),
            Turn::Granted(1),
            Turn::Granted(2),
            wait(1),
            wait(1)
        ]
    );
    // A group filled by this schedule's own grants.
    let queue = [
        in_group("g1", 1, "g"),
        in_group("g2", 2, "g"),
        waiter("x", 3),
    ];
    let got = turns(&queue, &[], &limits_of(2, "g", 1), &["g1", "g2", "x"]);
    assert_eq!(got, [Turn::Granted(0), wait(1), Turn::Granted(1)]);
    // A group over a lowered limit takes nothing; a group without a limit is not limited.
    let held = [held_in(0, "g"), held_in(1, "g")];
    let queue = [
        in_group("g1", 1, "g"),
        in_group("h1", 2, "h"),
        in_group("h2", 3, "h"),
    ];
    let got = turns(&queue, &held, &limits_of(5, "g", 1), &["g1", "h1", "h2"]);
    assert_eq!(got, [wait(1), Turn::Granted(2), Turn::Granted(3)]);
}

/// With groups' rules a waiter cannot count its turn in the fleet's handoffs: here `w` is third
/// in line, but the second end goes to it, not to `z0b`, whose group the first end's grant
/// filled. Told to wait for three changes, it slept through its turn.
#[test]
fn with_groups_every_waiter_looks_again_at_each_change() {
    let queue = [
        in_group("z0a", 1, "z0"),
        in_group("z0b", 2, "z0"),
        waiter("w", 3),
    ];
    let limits = limits_of(2, "z0", 1);
    assert!(!limits.counts_handoffs());
    let got = turns(&queue, &[held(0), held(1)], &limits, &["z0a", "z0b", "w"]);
    assert_eq!(got, [wait(1), wait(1), wait(1)]);
    // After the first end: z0a takes it, and w is next, whatever its count said.
    let got = turns(
        &queue[1..],
        &[held(0), held_in(1, "z0")],
        &limits,
        &["z0b", "w"],
    );
    assert_eq!(got, [wait(1), wait(1)]);
    let got = turns(&queue[1..], &[held_in(1, "z0")], &limits, &["z0b", "w"]);
    assert_eq!(got, [wait(1), Turn::Granted(0)]);
    assert!(Limits::fleet(2).counts_handoffs());
}

fn limits_of(concurrency: u32, group: &str, limit: u32) -> Limits {
    limits(concurrency, &[(group, limit)])
}

#[test]
fn slots_held_beyond_a_lowered_concurrency_lengthen_the_wait() {
    // Concurrency lowered to 1 while slots 0 and 4 are held: both must go back first.
    let queue = [waiter("a", 1), waiter("b", 2)];
    let got = turns(&queue, &[held(0), held(4)], &Limits::fleet(1), &["a", "b"]);
    assert_eq!(got, [wait(2), wait(3)]);
}

#[test]
fn slots_held_beyond_a_lowered_concurrency_leave_no_room() {
    // Concurrency lowered from 4 to 2 while slots 0 and 3 are held: two nodes hold slots, as
    // many as the concurrency allows. The old SQL rule (0 ahead - (2 - 2 held) + 1 = 1) and the
    // module's own comment ("they must go back first") say the waiter waits.
    let queue = [waiter("a", 1)];
    let got = turns(&queue, &[held(0), held(3)], &Limits::fleet(2), &["a"]);
    assert_eq!(got, [wait(1)]);
    // Lowered from 6 to 3 while slots 0 and 5 are held: one more may go, into slot 1.
    let queue = [waiter("a", 1), waiter("b", 2)];
    let got = turns(&queue, &[held(0), held(5)], &Limits::fleet(3), &["a", "b"]);
    assert_eq!(got, [Turn::Granted(1), wait(1)]);
}

// Property tests over random queues.

const GROUPS: [&str; 3] = ["g0", "g1", "g2"];

#[derive(Clone, Debug)]
struct Case {
    queue: Vec<Waiter>,
    held: Vec<Held>,
    limits: Limits,
}

fn arb_group(grouped: bool) -> BoxedStrategy<Option<String>> {
    if grouped {
        proptest::option::of(proptest::sample::select(GROUPS.to_vec()))
            .prop_map(|g| g.map(str::to_string))
            .boxed()
    } else {
        Just(None).boxed()
    }
}

/// Random queues around [`NOW`] (with ties of place), with blocked and dead waiters, slots held
/// possibly beyond the concurrency, and, when `grouped`, groups and their limits.
fn arb_case(grouped: bool) -> impl Strategy<Value = Case> {
    let waiter = (
        0u32..40,
        -3i64..=2,
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.85),
        arb_group(grouped),
    )
        .prop_map(|(id, offset, blocked, alive, group)| Waiter {
            node: name(&format!("n{id}")),
            place: NOW + 10 * offset,
            blocked,
            alive,
            group,
        });
    let queue = proptest::collection::vec(waiter, 0..12)
        .prop_map(|mut queue| {
            let mut seen = BTreeSet::new();
            queue.retain(|w| seen.insert(w.node.clone()));
            queue
        })
        .prop_shuffle();
    let held =
        proptest::collection::btree_map(0u32..8, arb_group(grouped), 0..6).prop_map(|held| {
            held.into_iter()
                .map(|(slot, group)| Held { slot, group })
                .collect::<Vec<_>>()
        });
    let group_limits = if grouped {
        proptest::collection::vec(proptest::option::of(0u32..3), GROUPS.len()).boxed()
    } else {
        Just(vec![None; GROUPS.len()]).boxed()
    };
    let rules = if grouped {
        (proptest::option::of(0u32..3), proptest::bool::weighted(0.3)).boxed()
    } else {
        Just((None, false)).boxed()
    };
    (queue, held, 0u32..6, group_limits, rules).prop_map(
        |(queue, held, concurrency, group_limits, (each_group, in_turn))| {
            let groups = GROUPS
                .iter()
                .zip(group_limits)
                .filter_map(|(g, limit)| Some((g.to_string(), limit?)))
                .collect();
            Case {
                queue,
                held,
                limits: Limits {
                    concurrency,
                    groups,
                    each_group,
                    in_turn,
                    widens: false,
                },
            }
        },
    )
}

fn key(w: &Waiter) -> (Millis, &NodeName) {
    (w.place, &w.node)
}

fn eligible(w: &Waiter) -> bool {
    w.alive && !w.blocked && w.place <= NOW
}

/// What a case and its schedule say, computed apart from [`schedule`].
struct Facts<'a> {
    case: &'a Case,
    schedule: Schedule,
    /// The free slots: in `0..concurrency` and not held.
    free: Vec<u32>,
    /// The waiters in queue order.
    order: Vec<&'a Waiter>,
    granted: BTreeMap<&'a NodeName, u32>,
}

impl<'a> Facts<'a> {
    fn of(case: &'a Case) -> Facts<'a> {
        let schedule = schedule(&case.queue, &case.held, &case.limits, NOW);
        let free = (0..case.limits.concurrency)
            .filter(|s| !case.held.iter().any(|h| h.slot == *s))
            .collect();
        let mut order: Vec<&Waiter> = case.queue.iter().collect();
        order.sort_by(|a, b| key(a).cmp(&key(b)));
        let granted = schedule
            .grants
            .iter()
            .map(|g| {
                let w = case.queue.iter().find(|w| w.node == g.node);
                (&w.expect("a grant goes to a waiter").node, g.slot)
            })
            .collect();
        Facts {
            case,
            schedule,
            free,
            order,
            granted,
        }
    }

    fn is_granted(&self, w: &Waiter) -> bool {
        self.granted.contains_key(&w.node)
    }

    /// Slots of `group` held before and granted now.
    fn in_group(&self, group: &str) -> (usize, usize) {
        let of = |g: &Option<String>| g.as_deref() == Some(group);
        let held = self.case.held.iter().filter(|h| of(&h.group)).count();
        let granted = self
            .case
            .queue
            .iter()
            .filter(|w| of(&w.group) && self.is_granted(w))
            .count();
        (held, granted)
    }

    /// With groups in turn, the group whose turn it is, found apart from [`schedule`]: the
    /// first held group by name, else the first eligible waiter's group by name.
    fn in_turn(&self) -> Option<Option<&'a str>> {
        if !self.case.limits.in_turn {
            return None;
        }
        let held = self.case.held.iter().map(|h| h.group.as_deref()).min();
        held.or_else(|| {
            self.case
                .queue
                .iter()
                .filter(|w| eligible(w))
                .map(|w| w.group.as_deref())
                .min()
        })
    }

    /// Whether `w` may not go for its group: out of turn, or its group has a limit and is at
    /// or over it after this schedule.
    fn group_full(&self, w: &Waiter) -> bool {
        if self
            .in_turn()
            .is_some_and(|group| group != w.group.as_deref())
        {
            return true;
        }
        let Some(group) = w.group.as_deref() else {
            return false;
        };
        let Some(limit) = self.case.limits.of_group(group) else {
            return false;
        };
        let (held, granted) = self.in_group(group);
        held + granted >= usize::try_from(limit).expect("small")
    }

    /// How many slots may be granted: the free ones, but no more than the concurrency leaves
    /// beside every held slot (those held beyond a lowered concurrency count against it).
    fn capacity(&self) -> usize {
        let concurrency = usize::try_from(self.case.limits.concurrency).expect("small");
        self.free
            .len()
            .min(concurrency.saturating_sub(self.case.held.len()))
    }
}

/// What holds for every queue, grouped or not.
fn check_common(case: &Case) -> Result<(), TestCaseError> {
    let f = Facts::of(case);
    let grants = &f.schedule.grants;
    prop_assert!(grants.len() <= f.free.len());
    prop_assert!(
        grants.len() <= f.capacity(),
        "more holders than the concurrency"
    );
    let slots: BTreeSet<u32> = grants.iter().map(|g| g.slot).collect();
    prop_assert_eq!(slots.len(), grants.len(), "granted slots are distinct");
    for slot in &slots {
        prop_assert!(f.free.contains(slot), "slot {} is not free", slot);
    }
    // Grants in queue order, each into the lowest slot still free.
    let granted_order: Vec<&NodeName> = f
        .order
        .iter()
        .filter(|w| f.is_granted(w))
        .map(|w| &w.node)
        .collect();
    let grant_nodes: Vec<&NodeName> = grants.iter().map(|g| &g.node).collect();
    prop_assert_eq!(grant_nodes, granted_order);
    prop_assert_eq!(
        grants.iter().map(|g| g.slot).collect::<Vec<_>>(),
        f.free[..grants.len()].to_vec()
    );
    // Every waiter has exactly its turn.
    let names: BTreeSet<&NodeName> = case.queue.iter().map(|w| &w.node).collect();
    let turned: BTreeSet<&NodeName> = f.schedule.turns.keys().collect();
    prop_assert_eq!(turned, names);
    for w in &case.queue {
        let turn = f.schedule.turn(&w.node);
        match f.granted.get(&w.node) {
            Some(slot) => prop_assert_eq!(turn, Some(Turn::Granted(*slot))),
            None => prop_assert!(
                matches!(turn, Some(Turn::Wait { changes }) if changes >= 1),
                "{:?}: {:?}",
                w,
                turn
            ),
        }
        if !eligible(w) {
            prop_assert_eq!(turn, Some(wait(1)), "{:?} waits on itself", w);
        }
    }
    // Group limits hold, and a group already over its limit takes nothing.
    for (group, limit) in GROUPS
        .iter()
        .filter_map(|g| Some((*g, case.limits.of_group(g)?)))
    {
        let limit = usize::try_from(limit).expect("small");
        let (held, granted) = f.in_group(group);
        if held <= limit {
            prop_assert!(held + granted <= limit, "{} over its limit", group);
        } else {
            prop_assert_eq!(granted, 0, "{} was over its limit", group);
        }
    }
    // A waiter not granted while eligible was only passed over for its full group.
    for b in f.order.iter().filter(|w| eligible(w) && !f.is_granted(w)) {
        for a in f.order.iter().filter(|w| f.is_granted(w)) {
            if key(b) < key(a) {
                prop_assert!(f.group_full(b), "{:?} passed over for {:?}", b, a);
            }
        }
        // And one passed over for lack of a slot found none left.
        if !f.group_full(b) {
            prop_assert_eq!(grants.len(), f.capacity(), "{:?} waits with a slot free", b);
        }
    }
    // With groups in turn, every grant goes to the group whose turn it is.
    if let Some(group) = f.in_turn() {
        for g in grants {
            let w = case
                .queue
                .iter()
                .find(|w| w.node == g.node)
                .expect("a waiter");
            prop_assert_eq!(w.group.as_deref(), group, "{:?} granted out of turn", w);
        }
    }
    // The queue's order is its places', not the order given.
    let mut reversed = case.queue.clone();
    reversed.reverse();
    let again = schedule(&reversed, &case.held, &case.limits, NOW);
    prop_assert_eq!(again, f.schedule.clone());
    Ok(())
}

/// What holds without groups: exact FIFO, and the old SQL rule's wait.
fn check_ungrouped(case: &Case) -> Result<(), TestCaseError> {
    let f = Facts::of(case);
    let line: Vec<&&Waiter> = f.order.iter().filter(|w| eligible(w)).collect();
    // The grants are the front of the eligible waiters.
    let front: Vec<&NodeName> = line
        .iter()
        .take(f.schedule.grants.len())
        .map(|w| &w.node)
        .collect();
    let grant_nodes: Vec<&NodeName> = f.schedule.grants.iter().map(|g| &g.node).collect();
    prop_assert_eq!(grant_nodes, front);
    prop_assert_eq!(f.schedule.grants.len(), line.len().min(f.capacity()));
    let concurrency = i64::from(case.limits.concurrency);
    let held = i64::try_from(case.held.len()).expect("small");
    for (ahead, w) in line.iter().enumerate() {
        if f.is_granted(w) {
            continue;
        }
        let ahead = i64::try_from(ahead).expect("small");
        let changes = u64::try_from((ahead - (concurrency - held) + 1).max(1)).expect("positive");
        prop_assert_eq!(f.schedule.turn(&w.node), Some(wait(changes)), "{:?}", w);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ungrouped_queues_are_served_first_come_first_served(case in arb_case(false)) {
        check_common(&case)?;
        check_ungrouped(&case)?;
    }

    #[test]
    fn grouped_queues_keep_every_limit_and_the_order(case in arb_case(true)) {
        check_common(&case)?;
    }

    #[test]
    fn never_more_holders_than_the_concurrency_allows(case in arb_case(true)) {
        let schedule = schedule(&case.queue, &case.held, &case.limits, NOW);
        let concurrency = usize::try_from(case.limits.concurrency).expect("small");
        prop_assert!(
            case.held.len() + schedule.grants.len() <= concurrency.max(case.held.len()),
            "{} held, {} granted, concurrency {}",
            case.held.len(),
            schedule.grants.len(),
            concurrency
        );
    }
}

#[test]
fn a_limit_for_every_group_holds_each_group_apart() {
    let queue = [
        in_group("a1", 1, "zone-a"),
        in_group("a2", 2, "zone-a"),
        in_group("b1", 3, "zone-b"),
        in_group("c1", 4, "zone-c"),
        in_group("c2", 5, "zone-c"),
    ];
    let limits = Limits {
        each_group: Some(1),
        ..limits(4, &[("zone-c", 2)])
    };
    let got = turns(&queue, &[], &limits, &["a1", "a2", "b1", "c1", "c2"]);
    assert_eq!(
        got,
        [
            Turn::Granted(0),
            wait(1),
            Turn::Granted(1),
            Turn::Granted(2),
            Turn::Granted(3),
        ]
    );
}

#[test]
fn groups_in_turn_finish_one_group_before_the_next_starts() {
    let queue = [
        in_group("b1", 1, "zone-b"),
        in_group("a1", 2, "zone-a"),
        in_group("a2", 3, "zone-a"),
        in_group("a3", 4, "zone-a"),
        waiter("none", 5),
    ];
    let limits = Limits {
        in_turn: true,
        ..Limits::fleet(2)
    };
    let names = ["b1", "a1", "a2", "a3", "none"];
    // Nothing held: the first group by name with a node that may go... is the group of no
    // name, before zone-a.
    let got = turns(&queue, &[], &limits, &names);
    assert_eq!(got, [wait(1), wait(1), wait(1), wait(1), Turn::Granted(0)]);
    // zone-a holds a slot: zone-a goes on, zone-b (first in the queue) waits; with groups'
    // rules every waiter looks again at the next change.
    let got = turns(&queue, &[held_in(0, "zone-a")], &limits, &names);
    assert_eq!(got, [wait(1), Turn::Granted(1), wait(1), wait(1), wait(1)]);
    // Without the node of no group and nothing held, zone-a starts before zone-b.
    let got = turns(&queue[..4], &[], &limits, &names[..4]);
    assert_eq!(got, [wait(1), Turn::Granted(0), Turn::Granted(1), wait(1)]);
    // A blocked group does not hold the next one up.
    let mut blocked = queue[..4].to_vec();
    for w in &mut blocked[1..] {
        w.blocked = true;
    }
    let got = turns(&blocked, &[], &limits, &names[..4]);
    assert_eq!(got, [Turn::Granted(0), wait(1), wait(1), wait(1)]);
}

#[test]
fn in_a_rollout_that_widens_every_waiter_looks_again_at_each_change() {
    // Width 1 of a concurrency of 4 (nothing finished yet): the one slot taken, the others
    // told to look again at the next change, since an end may widen the rollout.
    let queue = [waiter("a", 1), waiter("b", 2), waiter("c", 3)];
    let limits = Limits::rollout(4, &crate::Batches::Exponential, 0);
    assert!(limits.widens);
    let got = turns(&queue, &[], &limits, &["a", "b", "c"]);
    assert_eq!(got, [Turn::Granted(0), wait(1), wait(1)]);
    // At its widest, the count of handoffs comes back.
    let limits = Limits::rollout(2, &crate::Batches::Exponential, 1);
    assert!(!limits.widens);
    let got = turns(&queue, &[], &limits, &["a", "b", "c"]);
    assert_eq!(got, [Turn::Granted(0), Turn::Granted(1), wait(1)]);
    let got = turns(&queue, &[held(0), held(1)], &limits, &["a", "b", "c"]);
    assert_eq!(got, [wait(1), wait(2), wait(3)]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// `turn_behind` is a lower bound: in a queue that goes by place alone, an eligible waiter
    /// behind an eligible one told to wait is told to wait at least one change longer.
    #[test]
    fn a_waiter_behind_another_waits_at_least_one_change_longer(case in arb_case(false)) {
        prop_assume!(!case.limits.widens);
        let turns = schedule(&case.queue, &case.held, &case.limits, NOW);
        let eligible: Vec<&Waiter> = case
            .queue
            .iter()
            .filter(|w| !w.blocked && w.alive && w.place <= NOW)
            .collect();
        for ahead in &eligible {
            let Some(Turn::Wait { changes }) = turns.turn(&ahead.node) else { continue };
            for behind in &eligible {
                let Some(bound) = turn_behind(ahead.place_in_order(), changes, behind.place_in_order())
                else {
                    continue;
                };
                match turns.turn(&behind.node) {
                    Some(Turn::Wait { changes }) => prop_assert!(changes >= bound, "{behind:?} behind {ahead:?}"),
                    other => prop_assert!(false, "{behind:?} behind the waiting {ahead:?}: {other:?}"),
                }
            }
        }
    }
}
