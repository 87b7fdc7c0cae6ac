//! `rota history --steps`: each node's steps (every state it entered, and how long it stayed
//! there), each procedure's run inside its maintenance, and where the rollout's time went:
//! wait, drain, maintenance, reboot and verify as p50 and p99 across the nodes, with the
//! slowest ones.
//!
//! A node runs its procedures one after the other in its maintenance step, and each one's end
//! is a history entry (`finished` or `failed`): a procedure starts when the maintenance does or
//! when the one before it ended.

use std::collections::BTreeMap;

use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use rota_store::{HistoryEntry, Millis, StepRecord};
use rota_timeline::summary::{PhaseSummary, summarize};
use serde::Serialize;

use crate::output;

/// How many of the slowest steps of each kind the summary names.
const SLOWEST: usize = 3;

/// One step as `rota history --steps` shows it; also the JSON output's element type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepRow {
    pub node: NodeName,
    pub state: NodeState,
    /// RFC 3339 UTC.
    pub at: String,
    /// How long the node stayed in this state: until its next step. `None` for a last step
    /// (idle, or a step still under way, whose `ongoing` is then set).
    pub duration_ms: Option<Millis>,
    /// The node is still in this state (or its agent died in it): no later step is known.
    pub ongoing: bool,
    /// What last held the node back in this step (a blocker, the pause, pods a drain waited
    /// for), if anything did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip)]
    at_millis: Millis,
}

/// Where the time went for one kind of step; the JSON output's summary element.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseRow {
    pub step: &'static str,
    pub count: usize,
    pub p50_ms: Millis,
    pub p99_ms: Millis,
    pub max_ms: Millis,
    pub slowest: Vec<SlowRow>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SlowRow {
    pub node: String,
    /// RFC 3339 UTC: when the step began.
    pub at: String,
    pub ms: Millis,
}

/// One procedure's run inside a node's maintenance step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcedureRow {
    pub node: NodeName,
    pub procedure: Process,
    /// `finished` or `failed`.
    pub outcome: HistoryEvent,
    /// RFC 3339 UTC: the maintenance step's start, or the end of the procedure before it.
    pub started: String,
    pub duration_ms: Millis,
    #[serde(skip)]
    started_millis: Millis,
}

/// The JSON output of `rota history --steps -o json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepsReport {
    pub steps: Vec<StepRow>,
    pub procedures: Vec<ProcedureRow>,
    pub summary: Vec<PhaseRow>,
}

/// Each procedure's run, from the history's ends of procedures (`finished`, `failed`) and the
/// maintenance steps they fall in; an end outside any known maintenance step is left out.
pub fn procedures(records: &[StepRecord], entries: &[HistoryEntry]) -> Vec<ProcedureRow> {
    let mut rows = Vec::new();
    let mut previous_end: BTreeMap<&NodeName, Millis> = BTreeMap::new();
    let ends = entries.iter().filter(|e| {
        matches!(e.process, Process::Mop(_))
            && matches!(e.event, HistoryEvent::Finished | HistoryEvent::Failed)
    });
    for end in ends {
        let Some(maintenance) = records
            .iter()
            .rfind(|r| r.node == end.node && r.at <= end.at)
            .filter(|r| r.state == NodeState::Maintaining)
        else {
            continue;
        };
        let started = previous_end
            .get(&end.node)
            .copied()
            .filter(|&at| at >= maintenance.at)
            .unwrap_or(maintenance.at);
        previous_end.insert(&end.node, end.at);
        rows.push(ProcedureRow {
            node: end.node.clone(),
            procedure: end.process.clone(),
            outcome: end.event,
            started: output::rfc3339(started),
            duration_ms: end.at.saturating_sub(started),
            started_millis: started,
        });
    }
    rows
}

/// The report of `records` (oldest first, as the stores give them: the nodes' steps
/// interleaved, each node's in the order they were taken) and of the procedures' ends in
/// `entries`, a step still under way measured up to `until`.
pub fn report(records: &[StepRecord], entries: &[HistoryEntry], until: Millis) -> StepsReport {
    // Each record's next of the same node, found in one pass from the end.
    let mut next_of = vec![None; records.len()];
    let mut later: BTreeMap<&NodeName, usize> = BTreeMap::new();
    for (i, record) in records.iter().enumerate().rev() {
        next_of[i] = later.insert(&record.node, i);
    }
    let mut steps = Vec::with_capacity(records.len());
    for (record, next) in records.iter().zip(next_of) {
        let next = next.map(|j| &records[j]);
        let ongoing = next.is_none() && record.state != NodeState::Idle;
        steps.push(StepRow {
            node: record.node.clone(),
            state: record.state,
            at: output::rfc3339(record.at),
            duration_ms: next.map(|n| n.at.saturating_sub(record.at)),
            ongoing,
            note: record.note.clone(),
            at_millis: record.at,
        });
    }
    let timeline =
        rota_timeline::from_steps(records.iter().map(|r| (&r.node, r.state, r.at)), until);
    let summary = summarize(timeline.segments(), SLOWEST)
        .iter()
        .map(phase_row)
        .collect();
    StepsReport {
        steps,
        procedures: procedures(records, entries),
        summary,
    }
}

fn phase_row(phase: &PhaseSummary) -> PhaseRow {
    PhaseRow {
        step: phase.kind.as_str(),
        count: phase.count,
        p50_ms: phase.p50_ms,
        p99_ms: phase.p99_ms,
        max_ms: phase.max_ms,
        slowest: phase
            .slowest
            .iter()
            .map(|s| SlowRow {
                node: s.node.clone(),
                at: output::rfc3339(s.start),
                ms: s.ms,
            })
            .collect(),
    }
}

/// A step's length: to the millisecond below a second and to a tenth below ten, as a
/// simulated or fast rollout's steps are that short; whole seconds and up above.
pub(crate) fn duration(ms: Millis) -> String {
    match ms {
        ..1_000 => format!("{}ms", ms.max(0)),
        1_000..10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => output::compact_duration(u64::try_from(ms).unwrap_or(0)),
    }
}

/// The steps, then the summary, as tables.
pub fn render_table(report: &StepsReport) -> String {
    if report.steps.is_empty() {
        return "no steps match\n".to_owned();
    }
    let steps = output::table(
        &["AT", "NODE", "STEP", "FOR", "HELD BY"],
        report.steps.iter().map(|s| {
            let stayed = match (s.duration_ms, s.ongoing) {
                (Some(ms), _) => duration(ms),
                (None, true) => "ongoing".to_owned(),
                (None, false) => String::new(),
            };
            vec![
                output::rfc3339_seconds(s.at_millis),
                s.node.to_string(),
                s.state.to_string(),
                stayed,
                s.note.clone().unwrap_or_default(),
            ]
        }),
    );
    let steps = if report.procedures.is_empty() {
        steps
    } else {
        let procedures = output::table(
            &["STARTED", "NODE", "PROCEDURE", "OUTCOME", "TOOK"],
            report.procedures.iter().map(|p| {
                vec![
                    output::rfc3339_seconds(p.started_millis),
                    p.node.to_string(),
                    p.procedure.to_string(),
                    p.outcome.to_string(),
                    duration(p.duration_ms),
                ]
            }),
        );
        format!("{steps}\nprocedures, inside their node's maintenance:\n{procedures}")
    };
    if report.summary.is_empty() {
        return format!("{steps}\nno step has ended yet: nothing to summarise\n");
    }
    let summary = output::table(
        &["STEP", "COUNT", "P50", "P99", "MAX", "SLOWEST"],
        report.summary.iter().map(|p| {
            let slowest = p
                .slowest
                .iter()
                .map(|s| format!("{} {}", s.node, duration(s.ms)))
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                p.step.to_owned(),
                p.count.to_string(),
                duration(p.p50_ms),
                duration(p.p99_ms),
                duration(p.max_ms),
                slowest,
            ]
        }),
    );
    format!("{steps}\nwhere the time went:\n{summary}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Millis = 1_714_557_600_000; // 2024-05-01T10:00:00Z

    fn step(node: &str, state: NodeState, at: Millis) -> StepRecord {
        StepRecord {
            node: NodeName::new(node).expect("valid"),
            state,
            at,
            note: None,
        }
    }

    fn records() -> Vec<StepRecord> {
        use NodeState::{Draining, Idle, Maintaining, Queued, Rebooting, Verifying};
        vec![
            step("node-a", Queued, T),
            StepRecord {
                note: Some("the drain is held: waiting for 1 pod to complete: ci/job-x".into()),
                ..step("node-a", Draining, T + 2_000)
            },
            step("node-a", Maintaining, T + 14_000),
            step("node-a", Rebooting, T + 15_000),
            step("node-a", Verifying, T + 95_000),
            step("node-a", Idle, T + 100_000),
            step("node-b", Queued, T),
            step("node-b", Draining, T + 100_000),
            step("node-b", Maintaining, T + 103_000),
            step("node-b", Rebooting, T + 104_000),
        ]
    }

    fn entry(id: i64, process: Process, event: HistoryEvent, at: Millis) -> HistoryEntry {
        HistoryEntry {
            id,
            node: NodeName::new("node-a").expect("valid"),
            process,
            event,
            at,
            cause: None,
            slot: Some(0),
            released: false,
        }
    }

    /// node-a's two procedures in its maintenance (T+14s to T+15s), and its reboot's end.
    fn entries() -> Vec<HistoryEntry> {
        vec![
            entry(
                1,
                Process::Mop("firmware".into()),
                HistoryEvent::Started,
                T + 2_000,
            ),
            entry(
                2,
                Process::Mop("firmware".into()),
                HistoryEvent::Finished,
                T + 14_300,
            ),
            HistoryEntry {
                node: NodeName::new("node-b").expect("valid"),
                ..entry(
                    9,
                    Process::Mop("other".into()),
                    HistoryEvent::Finished,
                    T + 14_500,
                )
            },
            entry(
                3,
                Process::Mop("kernel".into()),
                HistoryEvent::Failed,
                T + 14_900,
            ),
            entry(4, Process::Reboot, HistoryEvent::Finished, T + 100_000),
        ]
    }

    #[test]
    fn each_procedure_runs_from_the_maintenance_or_the_one_before() {
        let rows = report(&records(), &entries(), T + 200_000).procedures;
        let runs: Vec<(&str, HistoryEvent, Millis)> = rows
            .iter()
            .map(|p| match &p.procedure {
                Process::Mop(name) => (name.as_str(), p.outcome, p.duration_ms),
                other => panic!("not a procedure: {other}"),
            })
            .collect();
        assert_eq!(
            runs,
            [
                ("firmware", HistoryEvent::Finished, 300),
                ("kernel", HistoryEvent::Failed, 600)
            ]
        );
    }

    #[test]
    fn each_step_lasts_until_the_nodes_next_and_the_last_is_ongoing_unless_idle() {
        let report = report(&records(), &entries(), T + 200_000);
        let a: Vec<(Option<Millis>, bool)> = report.steps[..6]
            .iter()
            .map(|s| (s.duration_ms, s.ongoing))
            .collect();
        assert_eq!(a[0], (Some(2_000), false));
        assert_eq!(a[5], (None, false), "idle ends the window");
        let b_last = report.steps.last().expect("a step");
        assert_eq!((b_last.duration_ms, b_last.ongoing), (None, true));
    }

    /// The stores give every node's steps oldest first, interleaved; a step lasts until its
    /// own node's next, not until the next record (which showed every step of a fleet's
    /// rollout as `ongoing`).
    #[test]
    fn interleaved_nodes_steps_last_until_their_own_nodes_next() {
        let mut interleaved = records();
        interleaved.sort_by_key(|r| r.at);
        let grouped = report(&records(), &entries(), T + 200_000);
        let mut grouped_steps = grouped.steps;
        grouped_steps.sort_by_key(|s| s.at_millis);
        let from_interleaved = report(&interleaved, &entries(), T + 200_000);
        assert_eq!(from_interleaved.steps, grouped_steps);
        let ongoing: Vec<(&str, NodeState)> = from_interleaved
            .steps
            .iter()
            .filter(|s| s.ongoing)
            .map(|s| (s.node.as_str(), s.state))
            .collect();
        assert_eq!(ongoing, [("node-b", NodeState::Rebooting)]);
    }

    #[test]
    fn the_summary_says_where_the_time_went() {
        let report = report(&records(), &entries(), T + 200_000);
        let steps: Vec<&str> = report.summary.iter().map(|p| p.step).collect();
        assert_eq!(steps, ["wait", "drain", "maintenance", "reboot", "verify"]);
        let drain = &report.summary[1];
        assert_eq!((drain.count, drain.max_ms), (2, 12_000));
        assert_eq!(drain.slowest[0].node, "node-a");
        let reboot = &report.summary[3];
        assert_eq!(reboot.count, 1, "node-b's reboot has not ended");
        assert_eq!(reboot.max_ms, 80_000);
    }

    #[test]
    fn steps_as_table() {
        insta::assert_snapshot!(render_table(&report(&records(), &entries(), T + 200_000)));
    }

    #[test]
    fn steps_as_json() {
        insta::assert_json_snapshot!(report(&records(), &entries(), T + 200_000));
    }

    #[test]
    fn no_steps() {
        assert_eq!(render_table(&report(&[], &[], T)), "no steps match\n");
    }
}
