//! A rollout: the turns the fleet takes since it was last resumed (or ever), and the two rules
//! that make it progressive (docs/design.md §3): it starts narrow and widens by **batches** as
//! nodes end their windows healthy, and its **failure budget** pauses the fleet once too many
//! nodes failed.
//!
//! The batches are Ansible's `serial` and NodeWright's batch strategies: a width of `1, 2, 4, …`
//! (`exponential`), of `s, 2s, 3s, …` (`linear:s`), or a list whose last width repeats
//! (`1,5,10`). A width holds until as many nodes as it allows ended their windows healthy at
//! it: the first width until its nodes finished, the second until as many more finished, and so
//! on. Every width is capped by the fleet's concurrency, which is never exceeded. A node that
//! fails holds the rollout at its width (it is not counted as finished), and the failure budget
//! decides whether the fleet goes on at all.

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

/// How a rollout widens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Batches {
    /// The whole concurrency from the start.
    #[default]
    All,
    /// 1, 2, 4, 8, …
    Exponential,
    /// `step`, 2·`step`, 3·`step`, …
    Linear(NonZeroU32),
    /// These widths in turn; the last one repeats.
    List(Vec<NonZeroU32>),
}

/// Why a batches value does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "batches {value:?}: {problem}; expected `all`, `exponential`, `linear:<step>` or a list of \
     widths such as `1,5,10` (the last repeats), each a whole number of at least 1"
)]
pub struct BatchesError {
    pub value: String,
    pub problem: String,
}

impl Batches {
    /// The width of batch `k` (counted from 0), uncapped; `None` for [`Batches::All`].
    fn nth(&self, k: u32) -> Option<u32> {
        match self {
            Batches::All => None,
            Batches::Exponential => Some(1u32.checked_shl(k).unwrap_or(u32::MAX)),
            Batches::Linear(step) => Some(step.get().saturating_mul(k.saturating_add(1))),
            Batches::List(widths) => {
                let last = widths.len().saturating_sub(1);
                let at = usize::try_from(k).unwrap_or(usize::MAX).min(last);
                widths.get(at).map(|w| w.get())
            }
        }
    }

    /// How many nodes may be out at once, with `concurrency` slots, once `finished` nodes
    /// ended their windows healthy in this rollout: the width of the batch it reached, capped
    /// by the concurrency.
    pub fn width(&self, concurrency: u32, finished: u32) -> u32 {
        let mut passed: u32 = 0;
        for k in 0.. {
            let Some(width) = self.nth(k) else {
                return concurrency;
            };
            // A width the concurrency caps is the last: it no longer widens.
            if width >= concurrency {
                return concurrency;
            }
            passed = passed.saturating_add(width);
            if finished < passed || passed == u32::MAX {
                return width;
            }
        }
        concurrency
    }
}

impl FromStr for Batches {
    type Err = BatchesError;

    fn from_str(value: &str) -> Result<Batches, BatchesError> {
        let error = |problem: &str| BatchesError {
            value: value.to_owned(),
            problem: problem.to_owned(),
        };
        let width = |text: &str| {
            text.trim()
                .parse::<NonZeroU32>()
                .map_err(|_| error(&format!("{:?} is not a width", text.trim())))
        };
        match value.trim() {
            "all" => Ok(Batches::All),
            "exponential" => Ok(Batches::Exponential),
            "" => Err(error("empty")),
            other => match other.strip_prefix("linear:") {
                Some(step) => Ok(Batches::Linear(width(step)?)),
                None => {
                    let widths = other.split(',').map(width).collect::<Result<Vec<_>, _>>()?;
                    // A narrowing list would hold nodes back after healthy windows: a rollout
                    // that cannot widen is a mistake, not a rule.
                    if let Some(pair) = widths.windows(2).find(|pair| pair[1] < pair[0]) {
                        return Err(error(&format!(
                            "width {} after {}: a rollout only widens, so each width is at least \
                             the one before it",
                            pair[1], pair[0]
                        )));
                    }
                    Ok(Batches::List(widths))
                }
            },
        }
    }
}

impl fmt::Display for Batches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Batches::All => f.write_str("all"),
            Batches::Exponential => f.write_str("exponential"),
            Batches::Linear(step) => write!(f, "linear:{step}"),
            Batches::List(widths) => {
                let widths: Vec<String> = widths.iter().map(ToString::to_string).collect();
                f.write_str(&widths.join(","))
            }
        }
    }
}

/// The failure budget: how many failed nodes pause the fleet, as a number of nodes or a share
/// of the fleet (Ansible's `max_fail_percentage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureBudget {
    Nodes(NonZeroU32),
    /// Percent of the fleet's nodes, 1..=100.
    Percent(u8),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "failure budget {value:?}: expected a number of nodes of at least 1 (such as `2`), or a \
     share of the fleet from 1% to 100% (such as `10%`)"
)]
pub struct FailureBudgetError {
    pub value: String,
}

impl FailureBudget {
    /// How many failed nodes pause a fleet of `fleet` nodes: a share is rounded up, and is at
    /// least one node.
    pub fn nodes(self, fleet: u32) -> u32 {
        match self {
            FailureBudget::Nodes(n) => n.get(),
            FailureBudget::Percent(p) => {
                let share = (u64::from(fleet) * u64::from(p)).div_ceil(100);
                u32::try_from(share).unwrap_or(u32::MAX).max(1)
            }
        }
    }

    /// Whether `failed` failed nodes of a fleet of `fleet` use the budget up.
    pub fn exhausted(self, failed: u32, fleet: u32) -> bool {
        failed >= self.nodes(fleet)
    }
}

impl FromStr for FailureBudget {
    type Err = FailureBudgetError;

    fn from_str(value: &str) -> Result<FailureBudget, FailureBudgetError> {
        let error = || FailureBudgetError {
            value: value.to_owned(),
        };
        let text = value.trim();
        match text.strip_suffix('%') {
            Some(percent) => match percent.trim().parse::<u8>() {
                Ok(p @ 1..=100) => Ok(FailureBudget::Percent(p)),
                _ => Err(error()),
            },
            None => text.parse().map(FailureBudget::Nodes).map_err(|_| error()),
        }
    }
}

impl fmt::Display for FailureBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureBudget::Nodes(n) => write!(f, "{n}"),
            FailureBudget::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A fleet's rollout rules: how it widens, and how many failures pause it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    pub batches: Batches,
    pub failure_budget: Option<FailureBudget>,
}

/// Why a stored rollout does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Batches(#[from] BatchesError),
    #[error(transparent)]
    FailureBudget(#[from] FailureBudgetError),
    #[error("rollout {value:?}: {part:?} is not `batches=<batches>` or `failure-budget=<budget>`")]
    Part { value: String, part: String },
}

impl Rollout {
    /// Whether the rollout is the default: the whole concurrency from the start, and no budget.
    pub fn is_default(&self) -> bool {
        *self == Rollout::default()
    }
}

/// One line, as the stores keep it: `batches=exponential;failure-budget=10%`.
impl fmt::Display for Rollout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batches={}", self.batches)?;
        if let Some(budget) = self.failure_budget {
            write!(f, ";failure-budget={budget}")?;
        }
        Ok(())
    }
}

impl FromStr for Rollout {
    type Err = RolloutError;

    fn from_str(value: &str) -> Result<Rollout, RolloutError> {
        let mut rollout = Rollout::default();
        for part in value.split(';').filter(|p| !p.trim().is_empty()) {
            match part.trim().split_once('=') {
                Some(("batches", batches)) => rollout.batches = batches.parse()?,
                Some(("failure-budget", budget)) => {
                    rollout.failure_budget = Some(budget.parse()?);
                }
                _ => {
                    return Err(RolloutError::Part {
                        value: value.to_owned(),
                        part: part.to_owned(),
                    });
                }
            }
        }
        Ok(rollout)
    }
}

/// How many nodes of `records` ended their last window healthy since the rollout began at
/// `since` (the fleet's last resume; `None`: ever): what [`Batches::width`] widens by.
pub fn finished<'a>(
    records: impl IntoIterator<Item = &'a crate::NodeRecord>,
    since: Option<crate::Millis>,
) -> u32 {
    let since = since.unwrap_or(i64::MIN);
    let count = records
        .into_iter()
        .filter(|r| {
            r.last_result.as_deref() == Some(FINISHED)
                && r.last_result_at.is_some_and(|at| at >= since)
        })
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// The `last_result` of a window that ended healthy (`record::window_result`).
pub const FINISHED: &str = "finished";

#[cfg(test)]
#[path = "rollout_tests.rs"]
mod tests;
