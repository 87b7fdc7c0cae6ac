//! `rota status --watch`: the status table kept live, with the rollout's progress and an ETA.
//!
//! The rollout is every node that had work (open requests, or a window) at any refresh since
//! the watch began; a node is done when it is idle again with nothing open. The ETA assumes the
//! remaining nodes go `concurrency` at a time, each taking as long as the mean window: of the
//! store's history, read once at start, and of the windows the watch saw end since.
//!
//! Each refresh reads the fleet at once (`Store::fleet`), so its cost does not grow with
//! the fleet: on Kubernetes two lists (RotaNodes and slot Leases) and the settings, never one
//! request per node, and never the history's RotaWindows again.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use rota_core::{HistoryEvent, NodeName, NodeState};
use rota_store::{HistoryEntry, HistoryFilter, Millis, StoreExt, now_millis};

use crate::cli::StatusArgs;
use crate::output;
use crate::status::{NodeFacts, gather, render_table, rows};

/// How far the rollout got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub eta: Option<Duration>,
}

impl Progress {
    pub fn line(&self) -> String {
        let eta = match (self.eta, self.total - self.done) {
            (_, 0) => "complete".to_string(),
            (Some(eta), _) => format!("ETA {}", output::compact_duration(eta.as_millis() as u64)),
            (None, _) => "ETA unknown (no finished window in history yet)".to_string(),
        };
        format!("rollout: {} of {} nodes done, {eta}", self.done, self.total)
    }
}

fn busy(facts: &NodeFacts) -> bool {
    facts.open_requests > 0 || facts.record.state != NodeState::Idle
}

fn in_window(state: NodeState) -> bool {
    matches!(
        state,
        NodeState::Draining | NodeState::Maintaining | NodeState::Rebooting | NodeState::Verifying
    )
}

/// The lengths of the windows that gave their slot back, summed and counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Windows {
    total: Millis,
    count: i64,
}

impl Windows {
    /// The windows in `history`: from a node's first `started` to the entry that gave its slot
    /// back.
    pub fn of(history: &[HistoryEntry]) -> Windows {
        let mut open: BTreeMap<&NodeName, Millis> = BTreeMap::new();
        let mut windows = Windows::default();
        for entry in history {
            if entry.event == HistoryEvent::Started {
                open.entry(&entry.node).or_insert(entry.at);
            }
            if entry.released
                && let Some(start) = open.remove(&entry.node)
            {
                windows.add(entry.at - start);
            }
        }
        windows
    }

    fn add(&mut self, length: Millis) {
        self.total = self.total.saturating_add(length);
        self.count += 1;
    }

    pub fn mean(&self) -> Option<Millis> {
        (self.count > 0).then(|| self.total / self.count)
    }
}

/// The nodes that took part in the rollout so far, and the windows seen.
#[derive(Debug, Default)]
pub struct Rollout {
    seen: BTreeSet<NodeName>,
    windows: Windows,
    /// The nodes seen in a window, from when the first state seen in it began.
    open: BTreeMap<NodeName, Millis>,
}

impl Rollout {
    /// A rollout whose ETA starts from `windows`, the history's.
    pub fn new(windows: Windows) -> Rollout {
        Rollout {
            windows,
            ..Rollout::default()
        }
    }

    /// Counts this refresh's busy nodes into the rollout and the windows that ended into the
    /// mean, and says how far it got.
    pub fn update(&mut self, facts: &[NodeFacts], concurrency: u32) -> Progress {
        for fact in facts {
            let record = &fact.record;
            if in_window(record.state) {
                self.open.entry(record.node.clone()).or_insert(record.since);
            } else if let Some(start) = self.open.remove(&record.node)
                && matches!(record.state, NodeState::Idle | NodeState::Queued)
            {
                self.windows.add(record.since - start);
            }
        }
        let busy: BTreeSet<&NodeName> = facts
            .iter()
            .filter(|f| busy(f))
            .map(|f| &f.record.node)
            .collect();
        self.seen.extend(busy.iter().map(|n| (*n).clone()));
        let remaining = busy.len();
        let total = self.seen.len();
        let rounds =
            u64::try_from(remaining.div_ceil(concurrency.max(1) as usize)).unwrap_or(u64::MAX);
        let eta = self
            .windows
            .mean()
            .and_then(|w| u64::try_from(w).ok())
            .map(|w| Duration::from_millis(w.saturating_mul(rounds)));
        Progress {
            done: total - remaining,
            total,
            eta,
        }
    }
}

/// Refreshes until interrupted: on a terminal the screen is redrawn under a progress bar,
/// otherwise each refresh is printed after the last.
pub async fn run(args: StatusArgs) -> Result<()> {
    let store = crate::open_store(&args.store).await?;
    let terminal = std::io::stdout().is_terminal();
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} nodes done · {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let history = store.history(&HistoryFilter::default()).await?;
    let mut rollout = Rollout::new(Windows::of(&history));
    loop {
        let (facts, summary) = gather(&*store).await?;
        let progress = rollout.update(
            &facts,
            summary
                .concurrency
                .unwrap_or(rota_core::schedule::DEFAULT_CONCURRENCY),
        );
        let now = now_millis();
        let table = render_table(&summary, &rows(&facts, &summary.holders, now), now);
        let frame = format!("{}\n{table}", progress.line());
        if terminal {
            bar.suspend(|| output::emit(&format!("\x1b[2J\x1b[H{frame}")))?;
            bar.set_length(progress.total as u64);
            bar.set_position(progress.done as u64);
            bar.set_message(progress.line());
        } else {
            output::emit(&format!("{frame}\n"))?;
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            () = tokio::time::sleep(args.interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use rota_core::Process;
    use rota_store::NodeRecord;

    use super::*;

    fn facts(node: &str, state: NodeState, open: usize, since: Millis) -> NodeFacts {
        NodeFacts {
            record: NodeRecord::new(NodeName::new(node).expect("name"), state, since),
            open_requests: open,
            backoffs: Vec::new(),
        }
    }

    fn entry(node: &str, event: HistoryEvent, at: Millis, released: bool) -> HistoryEntry {
        HistoryEntry {
            id: at,
            node: NodeName::new(node).expect("name"),
            process: Process::Reboot,
            event,
            at,
            cause: None,
            slot: Some(0),
            released,
        }
    }

    #[test]
    fn a_node_counts_once_it_had_work_and_is_done_when_idle_again() {
        let mut rollout = Rollout::new(Windows {
            total: 60_000,
            count: 1,
        });
        let first = rollout.update(
            &[
                facts("a", NodeState::Draining, 1, 1_000),
                facts("b", NodeState::Queued, 1, 0),
                facts("c", NodeState::Queued, 1, 0),
                facts("idle", NodeState::Idle, 0, 0),
            ],
            2,
        );
        assert_eq!(
            first,
            Progress {
                done: 0,
                total: 3,
                eta: Some(Duration::from_secs(120))
            }
        );
        assert_eq!(first.line(), "rollout: 0 of 3 nodes done, ETA 2m");
        // a's window took 30 s: the mean of the history's and the rollout's is 45 s.
        let later = rollout.update(
            &[
                facts("a", NodeState::Idle, 0, 31_000),
                facts("b", NodeState::Rebooting, 1, 20_000),
                facts("c", NodeState::Queued, 1, 0),
                facts("idle", NodeState::Idle, 0, 0),
            ],
            2,
        );
        assert_eq!(
            later,
            Progress {
                done: 1,
                total: 3,
                eta: Some(Duration::from_secs(45))
            }
        );
        let end = rollout.update(&[facts("a", NodeState::Idle, 0, 31_000)], 2);
        assert_eq!(end.line(), "rollout: 3 of 3 nodes done, complete");
    }

    #[test]
    fn a_window_seen_to_end_counts_from_its_first_state_seen_and_a_failure_not_at_all() {
        let mut rollout = Rollout::default();
        let none = rollout.update(&[facts("a", NodeState::Maintaining, 1, 5_000)], 1);
        assert_eq!(none.eta, None, "no window ended yet");
        rollout.update(&[facts("a", NodeState::Rebooting, 1, 9_000)], 1);
        rollout.update(
            &[
                facts("a", NodeState::Idle, 0, 25_000),
                facts("b", NodeState::Draining, 1, 26_000),
            ],
            1,
        );
        let failed = rollout.update(
            &[
                facts("b", NodeState::Failed, 1, 90_000),
                facts("c", NodeState::Queued, 1, 0),
            ],
            1,
        );
        assert_eq!(
            failed.eta,
            Some(Duration::from_secs(40)),
            "a's 20 s, twice; b's failed window is not a length"
        );
    }

    #[test]
    fn the_mean_window_runs_from_the_first_start_to_the_release() {
        let history = [
            entry("a", HistoryEvent::Started, 1_000, false),
            entry("a", HistoryEvent::Started, 2_000, false),
            entry("b", HistoryEvent::Started, 1_500, false),
            entry("a", HistoryEvent::Finished, 11_000, true),
            entry("b", HistoryEvent::Finished, 21_500, true),
        ];
        assert_eq!(Windows::of(&history).mean(), Some(15_000));
        assert_eq!(Windows::of(&history[..3]).mean(), None);
    }
}
