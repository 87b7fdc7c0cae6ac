use proptest::prelude::*;

use super::*;

const W: Millis = 10_000;

fn name(n: &str) -> NodeName {
    NodeName::new(n).expect("a valid name")
}

fn queued(n: &str, place: Millis) -> PlanNode {
    PlanNode {
        node: name(n),
        group: None,
        now: Now::Queued { place },
    }
}

/// A window of `W`: 2 s draining, 3 s maintaining, 4 s rebooting, 1 s verifying.
fn durations() -> StepDurations {
    StepDurations {
        by_state: BTreeMap::from([
            (NodeState::Draining, 2_000),
            (NodeState::Maintaining, 3_000),
            (NodeState::Rebooting, 4_000),
            (NodeState::Verifying, 1_000),
        ]),
    }
}

fn rules(concurrency: u32, batches: Batches) -> Rules {
    Rules {
        concurrency,
        batches,
        groups: GroupRules::default(),
        finished: 0,
    }
}

/// (node, start, finish) of each window, in the plan's order.
fn starts(plan: &Plan) -> Vec<(String, Millis, Millis)> {
    plan.windows
        .iter()
        .map(|w| (w.node.to_string(), w.start, w.finish))
        .collect()
}

#[test]
fn the_queue_goes_in_order_a_concurrency_at_a_time() {
    let nodes = [
        queued("d", 4),
        queued("b", 2),
        queued("a", 1),
        queued("c", 3),
    ];
    let plan = plan(&nodes, &rules(2, Batches::All), &durations(), 100);
    assert_eq!(
        starts(&plan),
        [
            ("a".into(), 100, 100 + W),
            ("b".into(), 100, 100 + W),
            ("c".into(), 100 + W, 100 + 2 * W),
            ("d".into(), 100 + W, 100 + 2 * W),
        ]
    );
    assert_eq!(plan.finish(), Some(100 + 2 * W));
    assert_eq!(
        plan.windows.iter().map(|w| w.turn).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert!(plan.held_back.is_empty());
}

#[test]
fn a_window_open_now_ends_when_its_remaining_states_are_done() {
    let nodes = [
        PlanNode {
            node: name("a"),
            group: None,
            // Rebooting for 1 s of its 4: 3 s, then 1 s verifying.
            now: Now::InWindow {
                slot: 0,
                state: NodeState::Rebooting,
                since: 100 - 1_000,
            },
        },
        queued("b", 50),
    ];
    let plan = plan(&nodes, &rules(1, Batches::All), &durations(), 100);
    assert_eq!(
        starts(&plan),
        [
            ("a".into(), 100 - 1_000, 100 + 4_000),
            ("b".into(), 100 + 4_000, 100 + 4_000 + W),
        ]
    );
    assert!(plan.windows[0].open && !plan.windows[1].open);
}

#[test]
fn a_node_in_backoff_waits_for_its_place_and_does_not_hold_the_others_up() {
    let nodes = [queued("late", 100 + 25_000), queued("b", 2), queued("c", 3)];
    let plan = plan(&nodes, &rules(1, Batches::All), &durations(), 100);
    assert_eq!(
        starts(&plan),
        [
            ("b".into(), 100, 100 + W),
            ("c".into(), 100 + W, 100 + 2 * W),
            ("late".into(), 100 + 25_000, 100 + 25_000 + W),
        ]
    );
}

#[test]
fn an_exponential_rollout_widens_as_its_windows_end() {
    let nodes: Vec<PlanNode> = (0..7).map(|i| queued(&format!("n{i}"), i)).collect();
    let plan = plan(&nodes, &rules(4, Batches::Exponential), &durations(), 0);
    let at: Vec<Millis> = plan.windows.iter().map(|w| w.start).collect();
    assert_eq!(at, [0, W, W, 2 * W, 2 * W, 2 * W, 2 * W]);
}

#[test]
fn nodes_held_back_are_named_and_not_planned() {
    let nodes = [
        PlanNode {
            node: name("paused"),
            group: None,
            now: Now::HeldBack {
                reason: "the fleet is paused".into(),
            },
        },
        queued("a", 0),
    ];
    let plan = plan(&nodes, &rules(1, Batches::All), &durations(), 0);
    assert_eq!(starts(&plan), [("a".into(), 0, W)]);
    assert_eq!(
        plan.held_back,
        [(name("paused"), "the fleet is paused".to_string())]
    );
    // A failed node keeps its slot: with one slot, nobody goes.
    let failed = PlanNode {
        node: name("failed"),
        group: None,
        now: Now::Failed { slot: 0 },
    };
    let stuck = super::plan(
        &[failed, queued("a", 0)],
        &rules(1, Batches::All),
        &durations(),
        0,
    );
    assert!(stuck.windows.is_empty());
    assert_eq!(stuck.held_back.len(), 2);
    assert!(
        stuck.held_back[0]
            .1
            .contains("holds slot 0 until `rota unlock`")
    );
    // Without any slot, nothing goes.
    let none = super::plan(&[queued("a", 1)], &rules(0, Batches::All), &durations(), 0);
    assert!(none.windows.is_empty());
    assert_eq!(none.held_back.len(), 1);
}

#[test]
fn without_any_step_recorded_the_plan_keeps_its_order_in_no_time() {
    let nodes = [queued("b", 2), queued("a", 1), queued("c", 3)];
    let plan = plan(
        &nodes,
        &rules(1, Batches::All),
        &StepDurations::default(),
        7,
    );
    assert_eq!(
        plan.windows
            .iter()
            .map(|w| w.node.to_string())
            .collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert!(plan.windows.iter().all(|w| w.start == 7 && w.finish == 7));
}

#[test]
fn step_durations_are_the_p50_of_each_window_state() {
    let a = name("a");
    let b = name("b");
    let steps = [
        (a.clone(), NodeState::Queued, 0),
        (a.clone(), NodeState::Draining, 10),
        (b.clone(), NodeState::Draining, 15),
        (a.clone(), NodeState::Maintaining, 30),
        (b.clone(), NodeState::Maintaining, 55),
        (a.clone(), NodeState::Idle, 40),
        (b.clone(), NodeState::Idle, 60),
        (a.clone(), NodeState::Draining, 100),
        (a.clone(), NodeState::Maintaining, 130),
    ];
    let durations = StepDurations::from_steps(&steps);
    // Draining: 20, 40, 30 -> 30; maintaining: 10, 5 -> 5 (the lower middle).
    assert_eq!(
        durations.by_state,
        BTreeMap::from([(NodeState::Draining, 30), (NodeState::Maintaining, 5)])
    );
    assert_eq!(durations.window(), 35);
    assert!(!StepDurations::default().known());
}

proptest! {
    /// Every queued node gets exactly one window, and no instant of the plan has more windows
    /// open than the concurrency.
    #[test]
    fn a_plan_plans_each_node_once_within_the_concurrency(
        places in prop::collection::vec(0i64..50_000, 1..12),
        concurrency in 1u32..4,
        exponential in any::<bool>(),
    ) {
        let nodes: Vec<PlanNode> = places
            .iter()
            .enumerate()
            .map(|(i, place)| queued(&format!("n{i}"), *place))
            .collect();
        let batches = if exponential { Batches::Exponential } else { Batches::All };
        let plan = plan(&nodes, &rules(concurrency, batches), &durations(), 0);
        prop_assert_eq!(plan.windows.len(), nodes.len());
        prop_assert!(plan.held_back.is_empty());
        for w in &plan.windows {
            prop_assert!(w.start >= 0);
            let open = plan
                .windows
                .iter()
                .filter(|o| o.start <= w.start && o.finish > w.start)
                .count();
            prop_assert!(open <= usize::try_from(concurrency).unwrap_or(usize::MAX));
        }
    }
}

#[test]
fn groups_in_turn_are_planned_one_after_the_other() {
    let in_zone = |n: &str, place: Millis, zone: &str| PlanNode {
        group: Some(zone.to_string()),
        ..queued(n, place)
    };
    let nodes = [
        in_zone("b1", 1, "zone-b"),
        in_zone("a1", 2, "zone-a"),
        in_zone("a2", 3, "zone-a"),
        in_zone("b2", 4, "zone-b"),
    ];
    let rules = Rules {
        groups: "in-turn".parse().expect("rules"),
        ..rules(2, Batches::All)
    };
    let plan = plan(&nodes, &rules, &durations(), 10);
    assert_eq!(
        starts(&plan),
        [
            ("a1".into(), 10, 10 + W),
            ("a2".into(), 10, 10 + W),
            ("b1".into(), 10 + W, 10 + 2 * W),
            ("b2".into(), 10 + W, 10 + 2 * W),
        ]
    );
}
