use proptest::prelude::*;

use super::*;

const NOW: Millis = 100_000;
const TAKE_UP: Millis = 30_000;

fn name(node: &str) -> NodeName {
    NodeName::new(node).expect("a valid node name")
}

/// A node queued at `place`, live, unblocked, with no grant.
fn queued(node: &str, place: Millis) -> NodeView {
    NodeView {
        node: name(node),
        queued: Some(place),
        blocked: false,
        alive: true,
        group: None,
        grant: None,
        taken_up: false,
        since: place,
    }
}

fn idle(node: &str) -> NodeView {
    NodeView {
        queued: None,
        ..queued(node, 0)
    }
}

/// `view` granted `slot` at `at`.
fn granted(view: NodeView, slot: u32, at: Millis) -> NodeView {
    NodeView {
        grant: Some(Granted { slot, at }),
        ..view
    }
}

/// `view` in its window of `slot`.
fn in_window(node: &str, slot: u32) -> NodeView {
    NodeView {
        taken_up: true,
        queued: None,
        ..granted(idle(node), slot, 0)
    }
}

fn leases(holders: &[Option<&str>]) -> Vec<LeaseView> {
    (0u32..)
        .zip(holders)
        .map(|(slot, holder)| LeaseView {
            slot,
            holder: holder.map(name),
            acquired_at: 0,
        })
        .collect()
}

fn grant(node: &str, slot: u32) -> Operation {
    Operation::Grant {
        node: name(node),
        slot,
    }
}

fn withdraw(node: &str, slot: u32, why: Withdrawal) -> Operation {
    Operation::Withdraw {
        node: name(node),
        slot,
        why,
    }
}

fn decided(nodes: &[NodeView], holders: &[Option<&str>]) -> Vec<Operation> {
    let limits = Limits::fleet(u32::try_from(holders.len()).expect("few slots"));
    decide(nodes, &leases(holders), &limits, NOW, TAKE_UP)
}

#[test]
fn the_free_slots_go_to_the_waiters_in_queue_order_lowest_slot_first() {
    let nodes = [queued("c", 30), queued("a", 10), queued("b", 20)];
    assert_eq!(
        decided(&nodes, &[None, None]),
        [grant("a", 0), grant("b", 1)]
    );
}

#[test]
fn a_slot_in_use_is_neither_granted_nor_taken_back() {
    let nodes = [in_window("a", 0), queued("b", 10)];
    assert_eq!(decided(&nodes, &[Some("a"), None]), [grant("b", 1)]);
    assert_eq!(decided(&nodes, &[Some("a")]), []);
}

#[test]
fn a_grant_not_taken_up_is_withdrawn_once_the_take_up_time_has_passed() {
    let waiting = granted(queued("a", 10), 0, NOW - TAKE_UP + 1);
    assert_eq!(decided(&[waiting, queued("b", 20)], &[Some("a")]), []);
    let late = granted(queued("a", 10), 0, NOW - TAKE_UP);
    assert_eq!(
        decided(&[late, queued("b", 20)], &[Some("a")]),
        [withdraw("a", 0, Withdrawal::NotTakenUp)],
        "the slot goes back first; the next read grants it"
    );
}

#[test]
fn a_grant_not_taken_up_by_a_node_that_became_blocked_is_withdrawn_at_once() {
    let blocked = NodeView {
        blocked: true,
        ..granted(queued("a", 10), 0, NOW)
    };
    assert_eq!(
        decided(&[blocked, queued("b", 20)], &[Some("a")]),
        [withdraw("a", 0, Withdrawal::Blocked)],
        "its agent takes no slot while blocked: the next read grants it to b"
    );
    let taken_up = NodeView {
        blocked: true,
        ..in_window("a", 0)
    };
    assert_eq!(
        decided(&[taken_up, queued("b", 20)], &[Some("a")]),
        [],
        "a window under way keeps its slot, blocked or not"
    );
}

#[test]
fn a_lease_whose_node_is_in_no_window_of_it_goes_back_at_once() {
    // Its grant never written (a scheduler stopped between its writes), a node gone idle, a
    // node whose RotaNode grants another slot, a node the scheduler does not know.
    let cases = [
        vec![queued("a", 10)],
        vec![idle("a")],
        vec![granted(queued("a", 10), 1, NOW)],
        vec![],
    ];
    for nodes in cases {
        assert_eq!(
            decided(&nodes, &[Some("a"), Some("z")]),
            [
                withdraw("a", 0, Withdrawal::Unused),
                withdraw("z", 1, Withdrawal::Unused)
            ],
            "{nodes:?}"
        );
    }
}

#[test]
fn a_lease_not_in_use_waits_a_moment_for_its_agent_to_give_it_back() {
    // The node just left its window (its agent gives the Lease back a moment later), or the
    // Lease was just taken and its grant's write is not read yet.
    let left = NodeView {
        since: NOW - 1,
        ..idle("a")
    };
    assert_eq!(decided(&[left], &[Some("a")]), []);
    let mut just_taken = leases(&[Some("a")]);
    just_taken[0].acquired_at = NOW - 1;
    let node = [queued("a", 10)];
    assert_eq!(
        decide(&node, &just_taken, &Limits::fleet(1), NOW, TAKE_UP),
        []
    );
    just_taken[0].acquired_at = NOW - RELEASE_GRACE;
    assert_eq!(
        decide(&node, &just_taken, &Limits::fleet(1), NOW, TAKE_UP),
        [withdraw("a", 0, Withdrawal::Unused)]
    );
}

#[test]
fn a_node_a_lease_names_or_a_grant_names_is_not_granted_again() {
    let orphan = queued("a", 10);
    let granted_elsewhere = granted(queued("b", 20), 1, NOW - RELEASE_GRACE);
    let ops = decided(
        &[orphan, granted_elsewhere, queued("c", 30)],
        &[Some("a"), None, None],
    );
    assert_eq!(
        ops,
        [grant("c", 1), withdraw("a", 0, Withdrawal::Unused)],
        "b's grant of slot 1 has no Lease yet: slot 1 is free, and b is no waiter"
    );
}

#[test]
fn blocked_dead_and_backing_off_waiters_are_passed_over() {
    let blocked = NodeView {
        blocked: true,
        ..queued("a", 10)
    };
    let dead = NodeView {
        alive: false,
        ..queued("b", 20)
    };
    let backing_off = queued("c", NOW + 1);
    let nodes = [blocked, dead, backing_off, queued("d", 40)];
    assert_eq!(decided(&nodes, &[None, None]), [grant("d", 0)]);
}

#[test]
fn a_group_full_of_slots_held_waits_while_the_others_go_on() {
    let zone = |view: NodeView, zone: &str| NodeView {
        group: Some(zone.to_string()),
        ..view
    };
    let nodes = [
        zone(in_window("a", 0), "east"),
        zone(queued("b", 10), "east"),
        zone(queued("c", 20), "west"),
    ];
    let mut limits = Limits::fleet(3);
    limits.groups.insert("east".into(), 1);
    let ops = decide(
        &nodes,
        &leases(&[Some("a"), None, None]),
        &limits,
        NOW,
        TAKE_UP,
    );
    assert_eq!(ops, [grant("c", 1)]);
}

fn arb_node(index: usize) -> impl Strategy<Value = NodeView> {
    let node = name(&format!("n{index}"));
    (
        prop::option::of(0..NOW + 10),
        any::<bool>(),
        any::<bool>(),
        prop::option::of((0u32..4, 0..NOW)),
        any::<bool>(),
        0..NOW,
    )
        .prop_map(
            move |(queued, blocked, alive, grant, taken_up, since)| NodeView {
                node: node.clone(),
                queued,
                blocked,
                alive,
                group: None,
                grant: grant.map(|(slot, at)| Granted { slot, at }),
                taken_up,
                since,
            },
        )
}

fn arb_read() -> impl Strategy<Value = (Vec<NodeView>, Vec<LeaseView>, u32)> {
    (0usize..6, 1u32..4).prop_flat_map(|(count, slots)| {
        let nodes: Vec<_> = (0..count).map(arb_node).collect();
        let holders = prop::collection::vec(prop::option::of(0usize..8), slots as usize);
        (nodes, holders, 1u32..5).prop_map(move |(nodes, holders, concurrency)| {
            let leases = (0u32..)
                .zip(holders)
                .map(|(slot, holder)| LeaseView {
                    slot,
                    holder: holder.map(|i| name(&format!("n{i}"))),
                    // Even slots taken long ago, odd ones a moment ago.
                    acquired_at: if slot % 2 == 0 {
                        NOW - 2 * TAKE_UP
                    } else {
                        NOW - TAKE_UP / 2
                    },
                })
                .collect();
            (nodes, leases, concurrency)
        })
    })
}

proptest! {
    /// Whatever the read: no slot a Lease names is granted, no more grants than the free
    /// slots, no node granted twice or granted while a Lease names it or its RotaNode holds a
    /// grant, and no Lease taken from a node in a window of it or from a grant younger than
    /// the take-up time.
    #[test]
    fn no_read_makes_a_scheduler_grant_a_slot_in_use_or_take_one_back_early(
        (nodes, leases, concurrency) in arb_read()
    ) {
        let ops = decide(&nodes, &leases, &Limits::fleet(concurrency), NOW, TAKE_UP);
        let held = leases.iter().filter(|l| l.holder.is_some()).count();
        let mut granted_nodes = Vec::new();
        let mut granted_slots = Vec::new();
        for op in &ops {
            match op {
                Operation::Grant { node, slot } => {
                    prop_assert!(!leases.iter().any(|l| l.slot == *slot && l.holder.is_some()));
                    prop_assert!(!leases.iter().any(|l| l.holder.as_ref() == Some(node)));
                    let view = nodes.iter().find(|n| &n.node == node).expect("a known node");
                    prop_assert!(view.grant.is_none() && view.queued.is_some_and(|p| p <= NOW));
                    prop_assert!(!view.blocked && view.alive);
                    prop_assert!(!granted_nodes.contains(node) && !granted_slots.contains(slot));
                    granted_nodes.push(node.clone());
                    granted_slots.push(*slot);
                }
                Operation::Withdraw { node, slot, why } => {
                    let lease = leases.iter().find(|l| l.slot == *slot).expect("a Lease");
                    prop_assert_eq!(lease.holder.as_ref(), Some(node));
                    let view = nodes.iter().find(|n| &n.node == node);
                    prop_assert!(!view.is_some_and(|n| n.in_window_of(*slot)));
                    match why {
                        Withdrawal::NotTakenUp => {
                            let at = view.and_then(|n| n.grant).expect("a grant").at;
                            prop_assert!(NOW - at >= TAKE_UP);
                        }
                        Withdrawal::Blocked => {
                            prop_assert!(view.is_some_and(|n| n.blocked));
                        }
                        Withdrawal::Unused => {
                            let since = view.map_or(0, |n| n.since).max(lease.acquired_at);
                            prop_assert!(NOW - since >= TAKE_UP.min(RELEASE_GRACE));
                        }
                    }
                }
            }
        }
        let free = usize::try_from(concurrency).expect("small").saturating_sub(held);
        prop_assert!(granted_slots.len() <= free);
    }
}

#[test]
fn a_read_whose_leases_are_behind_a_fresh_grant_decides_no_grant() {
    // b was granted slot 0 a moment ago, and the read's Leases do not show it yet: its group
    // (and the fleet) would be counted without b, so nothing is granted; a withdrawal still is.
    let in_a = |node: NodeView| NodeView {
        group: Some("a".into()),
        ..node
    };
    let fresh = in_a(granted(queued("b", 20), 0, NOW - 10));
    let limits = Limits {
        each_group: Some(1),
        ..Limits::fleet(3)
    };
    let nodes = [fresh.clone(), in_a(queued("c", 30)), queued("stale", 40)];
    let mut read = leases(&[None, None, Some("stale")]);
    read[2].acquired_at = NOW - RELEASE_GRACE;
    assert_eq!(
        decide(&nodes, &read, &limits, NOW, TAKE_UP),
        [withdraw("stale", 2, Withdrawal::Unused)]
    );
    // Once the read shows b's Lease, c waits for its group, and the fleet's other slot goes on.
    let caught_up = leases(&[Some("b"), None, None]);
    let nodes = [fresh, in_a(queued("c", 30)), queued("d", 40)];
    assert_eq!(
        decide(&nodes, &caught_up, &limits, NOW, TAKE_UP),
        [grant("d", 1)]
    );
}
