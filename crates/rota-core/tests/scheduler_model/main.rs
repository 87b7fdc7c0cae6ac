//! The Kubernetes protocol of issue 40, model-checked with stateright: a leader-elected
//! scheduler grants the slots, and each agent follows only its own RotaNode.
//!
//! The objects, all on the API server, and who writes them:
//! - per node a `RotaNode` ([`cluster::RotaNode`]): `spec.grant`, the slot granted, written by
//!   a scheduler (or by an operator, by hand); `status`, written by the node's agent: queued
//!   (wants a turn), window (took a grant up), idle. Each node starts queued for one turn;
//! - per slot `i` the Lease `rota-slot-<i>` ([`cluster::Lease`]): its holder, a node;
//! - per node the Node ([`cluster::Host`]): out (cordoned, drained, rebooting), and whether its
//!   turn's work is done.
//!
//! Every write is a compare-and-swap on the resourceVersion of a read. A read is kept as
//! whether it is still current ([`system::State::write_node`]): that is all the comparison
//! decides, and it keeps the state space finite however many writes happen.
//!
//! The steps ([`scheduler`], [`agent`]):
//! - a scheduler reads every RotaNode and Lease and decides one operation on that read, then
//!   carries it out however much changed meanwhile. A grant, of a slot rota-core's `schedule`
//!   gives on the read: (1) the Lease from free to the node, (2) the RotaNode's `spec.grant`.
//!   A withdrawal of a Lease whose node was read other than in a window of it (its grant not
//!   taken up, or never written, or given up, or its node idle): (1) the RotaNode, removing
//!   the grant of a node still queued, (2) the Lease back to free. A scheduler may withdraw
//!   whenever a read allows it: the timeout is not modelled;
//! - the agent takes a grant up (status queued to window, against its read of its RotaNode),
//!   fences (reads the Lease the grant names; if it does not name the node, the agent gives
//!   the window up: queued, grant cleared), disrupts, does its work and puts the node back,
//!   writes idle (grant cleared), gives its Lease back. It never takes a Lease.
//!
//! The faults: two schedulers, either both leading all along (a partitioned old leader beside
//! the new one), one of them stopping at any step, or one leading until a failover hands the
//! lead over and the old leader carries out its last decision or stops ([`system::Leaders`]);
//! agents killed after any persisted step and restarted, resuming from their RotaNode and
//! their Node; withdrawals of grants a live agent was about to take up; an operator's grant
//! written by hand into a queued RotaNode without its Lease.
//!
//! Properties ([`properties`]): never more than `K` nodes out; a node out only while the Lease
//! its grant names names it; with two groups, never more of a group out than its limit, or never
//! two groups out at once when they go in turn; with one leader at a time, every node finishes, with a check
//! that the state graph has no cycle ([`acyclic`]), without which stateright's `eventually`
//! would miss endless runs; with both leading at once, only that every node can finish.
//!
//! Bounds: `N = 3` and `K = 2` (or `K = 1`), the faults spread over the tests so that each
//! explores at most about 1.5 million states (under 25 s each in the dev profile): crashes
//! (one or two per agent), withdrawals of grants not taken up (unbounded while both
//! schedulers lead; one, or none, with one leader at a time, where each can send a node back
//! to wait and so would make cycles) and the hand-written grant (one), which together would
//! be several times that. Left out: time (the timeouts, the leader Lease's duration),
//! sessions, Nodes deleted, the queue's order among nodes queued at once (`schedule` orders
//! them by name), and what a window does besides taking its node out (drain, reboot and
//! verify are one step of work).

mod acyclic;
mod agent;
mod cluster;
mod decisions;
mod properties;
mod scheduler;
mod system;

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model, Path};

use acyclic::Search;
use agent::Does;
use properties::{AT_MOST_K, CAN_FINISH, FINISHES, GROUP_LIMIT, IN_TURN, LEASED};
use scheduler::{Kind, Op, Step};
use system::{Action, Flaw, Groups, Leaders, Rota, State};

type Discoveries = HashMap<&'static str, Path<State, Action>>;

/// `N = 3` nodes through `K = 2` slots, no fault but those the scheduler's program makes (a
/// stale read, a refused compare-and-swap), and one failover or one scheduler stopping.
fn rota(leaders: Leaders) -> Rota {
    Rota {
        nodes: 3,
        slots: 2,
        crashes: 0,
        leaders,
        timeouts: Some(0),
        hand_grants: 0,
        flaw: None,
        groups: None,
    }
}

/// Explores every state of `model` (or until `target` is found), printing how many.
fn check(model: Rota, target: Option<&'static str>) -> Discoveries {
    let name = model.to_string();
    let started = Instant::now();
    let mut checker = model.checker();
    if let Some(target) = target {
        checker = checker.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([target])));
    }
    let checker = checker.spawn_bfs().join();
    eprintln!(
        "{name}: {} states explored ({} generated, depth {}) in {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker.discoveries()
}

/// The actions, one a line.
fn listed(actions: Vec<Action>) -> String {
    (1..)
        .zip(actions)
        .map(|(i, action)| format!("{i:3}. {action}\n"))
        .collect()
}

/// The counterexample `discoveries` holds for `property`, printed: each state with the action
/// taken from it.
fn counterexample(discoveries: &Discoveries, property: &'static str) -> Vec<(State, Action)> {
    let Some(path) = discoveries.get(property) else {
        panic!("no counterexample to {property:?}");
    };
    eprintln!(
        "counterexample to {property:?}:\n{}",
        listed(path.clone().into_actions())
    );
    path.clone()
        .into_vec()
        .into_iter()
        .filter_map(|(state, action)| Some((state, action?)))
        .collect()
}

fn assert_none(discoveries: &Discoveries, properties: &[&'static str]) {
    for property in properties {
        if let Some(path) = discoveries.get(property) {
            panic!(
                "counterexample to {property:?}:\n{}",
                listed(path.clone().into_actions())
            );
        }
    }
}

/// The safety properties hold, and some run finishes every node.
fn assert_safe(model: Rota) {
    let discoveries = check(model, None);
    assert_none(&discoveries, &[AT_MOST_K, LEASED]);
    assert!(
        discoveries.contains_key(CAN_FINISH),
        "no run in which every node finishes"
    );
}

/// Every property holds, and the state graph has no cycle, so that every run ends and
/// [`FINISHES`] is judged on all of them.
fn assert_live(model: Rota) {
    assert_live_with(model, &[]);
}

/// [`assert_live`], with `more` properties checked too.
fn assert_live_with(model: Rota, more: &[&'static str]) {
    let started = Instant::now();
    match acyclic::search(&model) {
        Search::Acyclic(states) => {
            eprintln!(
                "{model}: no cycle among {states} states, in {:.1?}",
                started.elapsed()
            );
        }
        Search::Cycle(path) => panic!("a cycle:\n{}", listed(path)),
    }
    let mut properties = vec![AT_MOST_K, LEASED, FINISHES];
    properties.extend_from_slice(more);
    assert_none(&check(model, None), &properties);
}

#[test]
fn two_schedulers_leading_at_once_never_put_more_than_k_nodes_out() {
    assert_safe(Rota {
        crashes: 1,
        timeouts: None,
        ..rota(Leaders::Both)
    });
}

#[test]
fn two_schedulers_leading_at_once_never_put_more_than_one_node_out_with_one_slot() {
    assert_safe(Rota {
        slots: 1,
        crashes: 2,
        timeouts: None,
        hand_grants: 1,
        ..rota(Leaders::Both)
    });
}

#[test]
fn a_grant_written_by_hand_puts_no_node_out_beside_two_schedulers_leading() {
    assert_safe(Rota {
        hand_grants: 1,
        ..rota(Leaders::Both)
    });
}

#[test]
fn every_node_finishes_across_a_failover() {
    assert_live(Rota {
        crashes: 1,
        timeouts: Some(1),
        ..rota(Leaders::Failover)
    });
}

#[test]
fn every_node_finishes_across_a_failover_despite_a_grant_written_by_hand() {
    assert_live(Rota {
        hand_grants: 1,
        ..rota(Leaders::Failover)
    });
}

#[test]
fn every_node_finishes_across_a_failover_with_one_slot() {
    assert_live(Rota {
        slots: 1,
        crashes: 2,
        timeouts: Some(1),
        hand_grants: 1,
        ..rota(Leaders::Failover)
    });
}

#[test]
fn a_withdrawal_without_its_compare_and_swap_on_the_rota_node_puts_k_plus_one_out() {
    let model = Rota {
        timeouts: None,
        ..rota(Leaders::Both)
    }
    .with_flaw(Flaw::BlindWithdrawal);
    let path = counterexample(&check(model, Some(AT_MOST_K)), AT_MOST_K);
    // A withdrawal took the Lease from a node that had taken its grant up and was out.
    let withdrawn_from_out = path.iter().any(|(state, action)| match *action {
        Action::Scheduler(_, Step::Next { op, .. }) => {
            let Op { kind, node, slot } = op;
            kind != Kind::Grant
                && state.hosts[usize::from(node)].out
                && state.leases[usize::from(slot)].holder == Some(node)
        }
        _ => false,
    });
    assert!(withdrawn_from_out, "no Lease withdrawn from a node out");
}

#[test]
fn a_take_up_without_the_fence_puts_k_plus_one_out_on_a_grant_written_by_hand() {
    let model = Rota {
        hand_grants: 1,
        ..rota(Leaders::Both)
    }
    .with_flaw(Flaw::Unfenced);
    let path = counterexample(&check(model, Some(AT_MOST_K)), AT_MOST_K);
    // A node went out on a grant whose Lease names another.
    let unleased = path.iter().any(|(state, action)| match *action {
        Action::Agent(node, Does::Disrupt) => {
            let grant = state.nodes[usize::from(node)].grant;
            grant.is_some_and(|slot| state.leases[usize::from(slot)].holder != Some(node))
        }
        _ => false,
    });
    assert!(unleased, "no node out without its Lease");
}

/// Two groups (nodes 0 and 1 in `a`, node 2 in `b`) with a limit of one node each, and two
/// slots: with one scheduler, a crash and a grant withdrawn, never two nodes of `a` out, and
/// every node finishes.
#[test]
fn two_groups_of_one_node_each_at_a_time_under_one_scheduler() {
    assert_live_with(
        Rota {
            crashes: 1,
            timeouts: Some(1),
            groups: Some(Groups::OneEach),
            ..rota(Leaders::One)
        },
        &[GROUP_LIMIT],
    );
}

/// Two groups in turn: with one scheduler, never a node of `a` and one of `b` out at once,
/// and every node finishes.
#[test]
fn two_groups_in_turn_under_one_scheduler() {
    assert_live_with(
        Rota {
            crashes: 1,
            timeouts: Some(1),
            groups: Some(Groups::InTurn),
            ..rota(Leaders::One)
        },
        &[IN_TURN],
    );
}

/// Two groups with two schedulers leading at once and grants withdrawn without limit.
#[test]
fn two_groups_of_one_node_each_at_a_time_beside_two_schedulers_leading() {
    let model = Rota {
        crashes: 1,
        timeouts: None,
        groups: Some(Groups::OneEach),
        ..rota(Leaders::Both)
    };
    let discoveries = check(model, None);
    assert_none(&discoveries, &[AT_MOST_K, LEASED, GROUP_LIMIT]);
}

#[test]
fn two_groups_in_turn_beside_two_schedulers_leading() {
    let model = Rota {
        crashes: 1,
        timeouts: None,
        groups: Some(Groups::InTurn),
        ..rota(Leaders::Both)
    };
    let discoveries = check(model, None);
    assert_none(&discoveries, &[AT_MOST_K, LEASED, IN_TURN]);
}
