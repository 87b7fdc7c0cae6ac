//! What the two halves of the fault-injection soak share (`soak.rs` on SQLite and PostgreSQL,
//! `soak_kube.rs` on Kubernetes): the fleet's shape, where aimed kills land, when a run is
//! over, and the tally that `scripts/soak` prints.
#![allow(
    dead_code,
    reason = "each soak binary uses its own part of the helpers"
)]

use rota_core::NodeState;
use rota_store::NodeRecord;

pub const NODES: usize = 4;
pub const CONCURRENCY: usize = 2;
/// Where an aimed kill may land: every crash point of a reboot window.
pub const POINTS: [&str; 10] = [
    "after-write:idle->queued",
    "after-write:queued->draining",
    "after-write:draining->maintaining",
    "after-write:maintaining->rebooting",
    "before-reboot-command",
    "after-reboot-command",
    "after-reboot-marker",
    "after-write:rebooting->verifying",
    "after-write:verifying->idle",
    "after-write:queued->queued",
];

/// What one run did and found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub kills: u32,
    pub store_crashes: u32,
    /// Schedulers SIGKILLed (Kubernetes only).
    pub scheduler_kills: u32,
    pub violations: Vec<String>,
}

/// Every node idle, released, uncordoned and finished: the run is over.
pub fn all_done(records: &[NodeRecord]) -> bool {
    records.len() == NODES
        && records.iter().all(|r| {
            r.state == NodeState::Idle
                && r.slot.is_none()
                && !r.cordoned_by_rota
                && r.last_result.as_deref() == Some("finished")
        })
}

/// The runs' totals: one line per run as it ends, then `runs, kills, store crashes,
/// scheduler kills, violations` and each violation with its seed.
#[derive(Default)]
pub struct Tally {
    runs: u64,
    kills: u32,
    crashes: u32,
    scheduler_kills: u32,
    violations: Vec<(u64, String)>,
}

impl Tally {
    pub fn add(&mut self, kind: &str, seed: u64, outcome: Outcome, took: std::time::Duration) {
        eprintln!(
            "soak {kind} seed {seed}: {} kills, {} store crashes, {} scheduler kills, {} violations, {:.1}s",
            outcome.kills,
            outcome.store_crashes,
            outcome.scheduler_kills,
            outcome.violations.len(),
            took.as_secs_f64()
        );
        self.runs += 1;
        self.kills += outcome.kills;
        self.crashes += outcome.store_crashes;
        self.scheduler_kills += outcome.scheduler_kills;
        self.violations
            .extend(outcome.violations.into_iter().map(|v| (seed, v)));
    }

    /// Prints the summary; the violations, with their seeds.
    pub fn finish(self) -> Vec<(u64, String)> {
        println!(
            "runs {}, kills {}, store crashes {}, scheduler kills {}, violations {}",
            self.runs,
            self.kills,
            self.crashes,
            self.scheduler_kills,
            self.violations.len()
        );
        for (seed, violation) in &self.violations {
            println!("violation (seed {seed}): {violation}");
        }
        self.violations
    }
}

/// `ROTA_SOAK_FIRST_SEED` and `ROTA_SOAK_RUNS` (`scripts/soak`): the first seed and how many.
pub fn seeds_from_the_environment() -> (u64, u64) {
    let number = |name: &str, default: u64| {
        std::env::var(name).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: expected a whole number"))
        })
    };
    (
        number("ROTA_SOAK_FIRST_SEED", 1),
        number("ROTA_SOAK_RUNS", 20),
    )
}
