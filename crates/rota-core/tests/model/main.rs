//! rota's protocol, model-checked with stateright: `N` nodes take turns for a reboot through
//! `K` slots of a store with compare-and-swap, and every agent may crash and restart between
//! any two of its actions. The rules are rota-core's own: `Lifecycle::apply` decides every
//! transition, `NodeOverview::apply` what its write does to the node's record, and `schedule`
//! which slot a queued node may take; the model adds the store that keeps what they decide, the machines and
//! the agents' programs around them (docs/design.md §10).
//!
//! - [`store`]: each node's `NodeOverview` and the slots, with their compare-and-swaps;
//! - [`host`]: a machine: its boot id, the cordon, the sentinel, the reboot marker;
//! - [`agent`]: the agent's program, one action per write it persists (or read it acts on), and
//!   the two orders of the reboot's actions ([`RebootProtocol`]);
//! - [`system`]: the stateright model: the agents' actions, their crashes, the reboots;
//! - [`properties`]: what must hold, and why the liveness check is complete.

mod agent;
mod host;
mod properties;
mod store;
mod system;

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use rota_core::NodeState;
use stateright::{Checker, HasDiscoveries, Model, Path};

use agent::{Does, Flaw, RebootProtocol};
use properties::{AT_MOST_K, FINISHES, HOLDS_SLOT, ONE_REBOOT, PROGRESS};
use system::{Action, Rota, State};

type Discoveries = HashMap<&'static str, Path<State, Action>>;

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

/// The path's actions, one a line.
fn actions(path: &Path<State, Action>) -> String {
    path.clone()
        .into_actions()
        .iter()
        .enumerate()
        .map(|(i, action)| format!("{:3}. {action}\n", i + 1))
        .collect()
}

/// The counterexample `discoveries` holds for `property`, printed.
fn counterexample<'a>(
    discoveries: &'a Discoveries,
    property: &'static str,
) -> &'a Path<State, Action> {
    let Some(path) = discoveries.get(property) else {
        panic!("no counterexample to {property:?}");
    };
    eprintln!("counterexample to {property:?}:\n{}", actions(path));
    path
}

fn assert_none(discoveries: &Discoveries, properties: &[&'static str]) {
    for property in properties {
        if let Some(path) = discoveries.get(property) {
            panic!("counterexample to {property:?}:\n{}", actions(path));
        }
    }
}

const ALL: [&str; 5] = [AT_MOST_K, HOLDS_SLOT, ONE_REBOOT, FINISHES, PROGRESS];

#[test]
fn the_marker_after_the_command_keeps_every_property() {
    let discoveries = check(Rota::new(3, 2, RebootProtocol::MarkerAfterCommand), None);
    assert_none(&discoveries, &ALL);
}

#[test]
fn the_marker_after_the_command_keeps_every_property_with_one_slot() {
    let discoveries = check(Rota::new(3, 1, RebootProtocol::MarkerAfterCommand), None);
    assert_none(&discoveries, &ALL);
}

#[test]
fn the_marker_before_the_spawn_strands_a_node_whose_agent_dies_between_them() {
    let discoveries = check(Rota::new(3, 2, RebootProtocol::MarkerBeforeSpawn), None);
    let path = counterexample(&discoveries, FINISHES);
    assert_none(&discoveries, &[AT_MOST_K, HOLDS_SLOT, ONE_REBOOT, PROGRESS]);
    // The node failed closed on its first boot, holding its slot, its marker saying that the
    // reboot was started...
    let last = path.last_state();
    let Some(stranded) = (0..3u8).find(|&n| {
        let host = &last.hosts[usize::from(n)];
        last.store.record(n).state() == NodeState::Failed
            && host.boot == 0
            && host.marked()
            && last.store.holds_slot(n)
    }) else {
        panic!("no stranded node in {last:#?}");
    };
    // ...because its agent was killed after the marker and before the spawn. (The checker
    // keeps the last counterexample it finds, not the shortest: other crashes may come first.)
    let actions: Vec<Action> = path
        .clone()
        .into_actions()
        .into_iter()
        .filter(|action| match action {
            Action::Agent(node, does) => {
                *node == stranded && matches!(does, Does::WriteMarker | Does::Spawn)
            }
            Action::Crash { node, .. } => *node == stranded,
            Action::Reboot(_) => false,
        })
        .collect();
    assert!(
        matches!(
            actions[..],
            [
                ..,
                Action::Agent(_, Does::WriteMarker),
                Action::Crash { .. }
            ]
        ),
        "{actions:?}"
    );
}

#[test]
fn a_slot_written_without_compare_and_swap_lets_one_node_too_many_out() {
    let model = Rota::new(3, 2, RebootProtocol::MarkerAfterCommand).with_flaw(Flaw::BlindSlotWrite);
    counterexample(&check(model, Some(AT_MOST_K)), AT_MOST_K);
}

#[test]
fn a_reboot_started_before_it_is_recorded_reboots_twice() {
    let model =
        Rota::new(3, 2, RebootProtocol::MarkerAfterCommand).with_flaw(Flaw::SpawnBeforeRecord);
    counterexample(&check(model, Some(ONE_REBOOT)), ONE_REBOOT);
}
