use std::num::NonZeroU32;

use proptest::prelude::*;

use super::*;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("not zero")
}

#[test]
fn a_rollout_widens_once_its_width_of_nodes_finished_healthy() {
    let list = Batches::List(vec![nz(1), nz(3)]);
    // (batches, concurrency, finished, width)
    let table = [
        (Batches::All, 4, 0, 4),
        (Batches::Exponential, 8, 0, 1),
        (Batches::Exponential, 8, 1, 2),
        (Batches::Exponential, 8, 2, 2),
        (Batches::Exponential, 8, 3, 4),
        (Batches::Exponential, 8, 6, 4),
        (Batches::Exponential, 8, 7, 8),
        (Batches::Exponential, 8, 1000, 8),
        (Batches::Exponential, 3, 3, 3),
        (Batches::Linear(nz(2)), 10, 0, 2),
        (Batches::Linear(nz(2)), 10, 2, 4),
        (Batches::Linear(nz(2)), 10, 5, 4),
        (Batches::Linear(nz(2)), 10, 6, 6),
        (list.clone(), 5, 0, 1),
        (list.clone(), 5, 1, 3),
        (list.clone(), 5, 3, 3),
        (list.clone(), 5, 100, 3),
        (list, 2, 1, 2),
        (Batches::Exponential, 0, 0, 0),
    ];
    for (batches, concurrency, finished, width) in table {
        assert_eq!(
            batches.width(concurrency, finished),
            width,
            "{batches} with concurrency {concurrency} after {finished} finished"
        );
    }
}

#[test]
fn batches_read_as_written_and_bad_ones_say_what_is_allowed() {
    for text in ["all", "exponential", "linear:3", "1,5,10", "2"] {
        let batches: Batches = text.parse().expect(text);
        assert_eq!(batches.to_string(), text);
    }
    assert_eq!(
        " 1, 2 ".parse::<Batches>(),
        Ok(Batches::List(vec![nz(1), nz(2)]))
    );
    for bad in [
        "", "linear:0", "linear:", "1,,2", "0", "-1", "fast", "1.5", "5,2", "1,4,3",
    ] {
        let error = bad.parse::<Batches>().expect_err(bad).to_string();
        assert!(
            error.contains(&format!("{bad:?}")) && error.contains("`exponential`"),
            "{error}"
        );
    }
}

#[test]
fn a_failure_budget_is_nodes_or_a_share_of_the_fleet_rounded_up() {
    let two: FailureBudget = "2".parse().expect("2");
    assert_eq!(two, FailureBudget::Nodes(nz(2)));
    assert!(!two.exhausted(1, 100));
    assert!(two.exhausted(2, 100));
    let tenth: FailureBudget = "10%".parse().expect("10%");
    assert_eq!(tenth.to_string(), "10%");
    assert_eq!(tenth.nodes(100), 10);
    assert_eq!(tenth.nodes(101), 11);
    // A share of a small fleet is still one node: the first failure pauses.
    assert_eq!(tenth.nodes(5), 1);
    assert_eq!(tenth.nodes(0), 1);
    assert_eq!("100%".parse::<FailureBudget>().map(|b| b.nodes(7)), Ok(7));
    for bad in ["0", "0%", "101%", "-1", "x", "", "5 %%"] {
        let error = bad.parse::<FailureBudget>().expect_err(bad).to_string();
        assert!(
            error.contains(&format!("{bad:?}")) && error.contains("`10%`"),
            "{error}"
        );
    }
}

#[test]
fn a_list_that_narrows_is_refused_naming_the_width_that_narrows() {
    let error = "1,4,3,8"
        .parse::<Batches>()
        .expect_err("narrows")
        .to_string();
    assert!(
        error.contains("width 3 after 4")
            && error.contains("each width is at least the one before"),
        "{error}"
    );
    assert_eq!(
        "2,2,5".parse::<Batches>(),
        Ok(Batches::List(vec![nz(2), nz(2), nz(5)]))
    );
}

proptest! {
    /// Every list read is one that never narrows.
    #[test]
    fn every_list_read_widens_or_holds(widths in prop::collection::vec(1u32..6, 1..5)) {
        let text = widths.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let narrows = widths.windows(2).any(|pair| pair[1] < pair[0]);
        prop_assert_eq!(text.parse::<Batches>().is_ok(), !narrows);
    }
}

fn arb_batches() -> impl Strategy<Value = Batches> {
    prop_oneof![
        Just(Batches::All),
        Just(Batches::Exponential),
        (1u32..5).prop_map(|s| Batches::Linear(nz(s))),
        prop::collection::vec(1u32..6, 1..4).prop_map(|mut widths| {
            widths.sort_unstable();
            Batches::List(widths.into_iter().map(nz).collect())
        }),
    ]
}

proptest! {
    /// The width never exceeds the concurrency, is at least one node while there is a slot,
    /// and never narrows as more nodes finish (for widths that do not shrink).
    #[test]
    fn the_width_stays_within_the_concurrency_and_only_widens(
        batches in arb_batches(),
        concurrency in 0u32..12,
        finished in 0u32..60,
    ) {
        let width = batches.width(concurrency, finished);
        prop_assert!(width <= concurrency);
        prop_assert!(concurrency == 0 || width >= 1);
        prop_assert!(batches.width(concurrency, finished + 1) >= width);
        prop_assert_eq!(batches.to_string().parse::<Batches>(), Ok(batches));
    }

    /// A rollout run batch by batch, each node finishing healthy, widens to the concurrency
    /// (or to a list's last width, if smaller), and no sooner than its batches allow: each
    /// width it runs at is one of the batches' (or the cap).
    #[test]
    fn a_healthy_rollout_reaches_its_widest(
        batches in arb_batches(),
        concurrency in 1u32..12,
    ) {
        let widest = match &batches {
            Batches::List(widths) => widths.last().map_or(concurrency, |w| w.get().min(concurrency)),
            _ => concurrency,
        };
        let allowed: Vec<u32> = (0..40).filter_map(|k| batches.nth(k)).collect();
        let mut finished = 0;
        let mut width = batches.width(concurrency, finished);
        for _ in 0..64 {
            prop_assert!(width == concurrency || allowed.contains(&width));
            if width == widest {
                break;
            }
            finished += width;
            width = batches.width(concurrency, finished);
        }
        prop_assert_eq!(width, widest);
    }
}

#[test]
fn a_rollout_reads_as_stored_and_a_bad_part_is_named() {
    let rollout: Rollout = "batches=1,5;failure-budget=10%".parse().expect("reads");
    assert_eq!(
        rollout,
        Rollout {
            batches: Batches::List(vec![nz(1), nz(5)]),
            failure_budget: Some(FailureBudget::Percent(10)),
        }
    );
    assert_eq!(rollout.to_string(), "batches=1,5;failure-budget=10%");
    assert_eq!("".parse::<Rollout>(), Ok(Rollout::default()));
    assert!(Rollout::default().is_default());
    assert_eq!(Rollout::default().to_string(), "batches=all");
    let error = "batches=all;speed=fast"
        .parse::<Rollout>()
        .expect_err("bad");
    assert!(error.to_string().contains("\"speed=fast\""), "{error}");
    let error = "batches=zero".parse::<Rollout>().expect_err("bad");
    assert!(error.to_string().contains("\"zero\""), "{error}");
}

#[test]
fn only_nodes_that_finished_since_the_rollout_began_count() {
    let node = |name: &str, result: Option<&str>, at: Option<i64>| {
        let mut record =
            crate::NodeRecord::new(name.parse().expect("a name"), crate::NodeState::Idle, 0);
        record.last_result = result.map(str::to_owned);
        record.last_result_at = at;
        record
    };
    let records = [
        node("a", Some("finished"), Some(100)),
        node("b", Some("finished"), Some(50)),
        node("c", Some("failed: boom"), Some(120)),
        node("d", None, None),
        node("e", Some("finished"), Some(101)),
    ];
    assert_eq!(finished(&records, None), 3);
    assert_eq!(finished(&records, Some(100)), 2);
    assert_eq!(finished(&records, Some(102)), 0);
}
