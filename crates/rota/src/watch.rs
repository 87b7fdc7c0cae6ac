//! `rota status --watch`: the status table kept live, with the rollout's progress and an ETA.
//!
//! The rollout is every node that had work (open requests, or a window) at any refresh since
//! the watch began; a node is done when it is idle again with nothing open. The ETA assumes the
//! remaining nodes go `concurrency` at a time, each taking as long as the mean window in the
//! store's history.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use rota_core::{HistoryEvent, NodeName, NodeState};
use rota_store::{HistoryEntry, HistoryFilter, Millis, now_millis};

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

/// The nodes that took part in the rollout so far.
#[derive(Debug, Default)]
pub struct Rollout {
    seen: BTreeSet<NodeName>,
}

impl Rollout {
    /// Counts this refresh's busy nodes into the rollout and says how far it got.
    pub fn update(
        &mut self,
        facts: &[NodeFacts],
        mean_window: Option<Millis>,
        concurrency: u32,
    ) -> Progress {
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
        let eta = mean_window
            .and_then(|w| u64::try_from(w).ok())
            .map(|w| Duration::from_millis(w.saturating_mul(rounds)));
        Progress {
            done: total - remaining,
            total,
            eta,
        }
    }
}

/// The mean length of the windows in `history`: from a node's first `started` to the entry
/// that gave its slot back.
pub fn mean_window(history: &[HistoryEntry]) -> Option<Millis> {
    let mut open: BTreeMap<&NodeName, Millis> = BTreeMap::new();
    let mut lengths = Vec::new();
    for entry in history {
        if entry.event == HistoryEvent::Started {
            open.entry(&entry.node).or_insert(entry.at);
        }
        if entry.released
            && let Some(start) = open.remove(&entry.node)
        {
            lengths.push(entry.at - start);
        }
    }
    let count = i64::try_from(lengths.len()).ok().filter(|n| *n > 0)?;
    Some(lengths.iter().sum::<Millis>() / count)
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
    let mut rollout = Rollout::default();
    loop {
        let (facts, summary) = gather(&*store).await?;
        let history = store.history(&HistoryFilter::default()).await?;
        let progress = rollout.update(
            &facts,
            mean_window(&history),
            summary.concurrency.unwrap_or(1),
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

    fn facts(node: &str, state: NodeState, open: usize) -> NodeFacts {
        NodeFacts {
            record: NodeRecord::new(NodeName::new(node).expect("name"), state, 0),
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
        let mut rollout = Rollout::default();
        let first = rollout.update(
            &[
                facts("a", NodeState::Draining, 1),
                facts("b", NodeState::Queued, 1),
                facts("c", NodeState::Queued, 1),
                facts("idle", NodeState::Idle, 0),
            ],
            Some(60_000),
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
        let later = rollout.update(
            &[
                facts("a", NodeState::Idle, 0),
                facts("b", NodeState::Rebooting, 1),
                facts("c", NodeState::Queued, 1),
                facts("idle", NodeState::Idle, 0),
            ],
            Some(60_000),
            2,
        );
        assert_eq!(
            later,
            Progress {
                done: 1,
                total: 3,
                eta: Some(Duration::from_secs(60))
            }
        );
        let end = rollout.update(&[facts("a", NodeState::Idle, 0)], None, 2);
        assert_eq!(end.line(), "rollout: 3 of 3 nodes done, complete");
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
        assert_eq!(mean_window(&history), Some(15_000));
        assert_eq!(mean_window(&history[..3]), None);
    }
}
