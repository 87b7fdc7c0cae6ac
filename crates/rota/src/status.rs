//! `rota status`: one row per node.

use anyhow::Result;
use rota_core::{GroupRules, NodeName, NodeState, Process, Rollout};
use rota_store::{BackoffRecord, Millis, NodeRecord, Pause, SlotHolder, Store, now_millis};
use serde::Serialize;

use crate::cli::{Format, StatusArgs};
use crate::output;

/// One node as `rota status` shows it; also the JSON output's element type (field names are a
/// stable interface).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusRow {
    pub node: NodeName,
    pub state: NodeState,
    pub holds_slot: bool,
    pub slot: Option<u32>,
    pub process: Option<Process>,
    /// When the node entered its state, RFC 3339 UTC.
    pub since: String,
    /// The number of open (pending or active) requests.
    pub queue: usize,
    /// The latest backoff deadline, RFC 3339 UTC, if it lies in the future.
    pub backoff: Option<String>,
    pub last_result: Option<String>,
    /// Why the node's agent holds back (a blocker, the fleet's pause), while it does.
    pub blocked: Option<BlockedRow>,
    /// The node's slot group, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip)]
    since_millis: Millis,
    #[serde(skip)]
    backoff_millis: Option<Millis>,
}

/// A node's blocked reason in the JSON output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockedRow {
    pub reason: String,
    /// Since when, RFC 3339 UTC.
    pub since: String,
}

/// Everything the store says about one node that `status` shows.
#[derive(Clone, Debug)]
pub struct NodeFacts {
    pub record: NodeRecord,
    pub open_requests: usize,
    pub backoffs: Vec<BackoffRecord>,
}

/// The fleet-wide line above the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub concurrency: Option<u32>,
    pub holders: Vec<SlotHolder>,
    pub paused: Option<Pause>,
    /// What holds every node's turn back, as the store says (no scheduler runs).
    pub notice: Option<String>,
    pub rollout: RolloutSummary,
    /// The slot groups' rules.
    pub groups: GroupRules,
}

/// The rollout's rules and how far it got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutSummary {
    pub rules: Rollout,
    /// When it began (the fleet's last resume), if ever.
    pub since: Option<Millis>,
    /// The nodes that ended their windows healthy in it.
    pub finished: u32,
}

impl RolloutSummary {
    /// The rollout's line, if it has rules of its own: its width now and its failure budget.
    fn line(&self, concurrency: Option<u32>) -> Option<String> {
        if self.rules.is_default() {
            return None;
        }
        let began = self.since.map_or_else(
            || "ever".to_string(),
            |at| format!("since {}", output::rfc3339_seconds(at)),
        );
        let mut line = format!("rollout {began}: batches {}", self.rules.batches);
        if let Some(concurrency) = concurrency {
            let width = self.rules.batches.width(concurrency, self.finished);
            line.push_str(&format!(
                ", {width} at once now ({} node{} finished healthy)",
                self.finished,
                if self.finished == 1 { "" } else { "s" }
            ));
        }
        if let Some(budget) = self.rules.failure_budget {
            line.push_str(&format!("; failure budget {budget}"));
        }
        Some(line)
    }
}

/// Builds a node's row. The slot comes from the slot holders when the node record does not
/// name one, so the two views cannot disagree silently.
pub fn row(facts: &NodeFacts, holders: &[SlotHolder], now: Millis) -> StatusRow {
    let record = &facts.record;
    let slot = record.slot.or_else(|| {
        holders
            .iter()
            .find(|h| h.node == record.node)
            .map(|h| h.slot)
    });
    let backoff_millis = facts
        .backoffs
        .iter()
        .map(|b| b.until)
        .max()
        .filter(|until| *until > now);
    StatusRow {
        node: record.node.clone(),
        state: record.state,
        holds_slot: slot.is_some(),
        slot,
        process: record.process.clone(),
        since: output::rfc3339(record.since),
        queue: facts.open_requests,
        backoff: backoff_millis.map(output::rfc3339),
        last_result: record.last_result.clone(),
        blocked: record.blocked.as_ref().map(|b| BlockedRow {
            reason: b.reason.clone(),
            since: output::rfc3339(b.since),
        }),
        group: record.group.clone(),
        since_millis: record.since,
        backoff_millis,
    }
}

/// Rows for every node, sorted by node name.
pub fn rows(facts: &[NodeFacts], holders: &[SlotHolder], now: Millis) -> Vec<StatusRow> {
    let mut rows: Vec<StatusRow> = facts.iter().map(|f| row(f, holders, now)).collect();
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    rows
}

/// The summary line: concurrency and the slots held, by whom.
pub fn summary_line(summary: &Summary) -> String {
    let held = summary.holders.len();
    let mut holders: Vec<&SlotHolder> = summary.holders.iter().collect();
    holders.sort_by_key(|h| h.slot);
    let who = holders
        .iter()
        .map(|h| format!("{} slot {}", h.node, h.slot))
        .collect::<Vec<_>>()
        .join(", ");
    let slots = match summary.concurrency {
        Some(c) => format!("concurrency {c}, {held} of {c} slots held"),
        None => format!("concurrency not set, {held} slots held"),
    };
    let mut line = if who.is_empty() {
        slots
    } else {
        format!("{slots} ({who})")
    };
    if !summary.groups.is_default() {
        line.push_str(&format!("\nslot groups: {}", summary.groups));
    }
    if let Some(rollout) = summary.rollout.line(summary.concurrency) {
        line.push('\n');
        line.push_str(&rollout);
    }
    if let Some(pause) = &summary.paused {
        line.push_str(&format!(
            "\nPAUSED since {}: {} (no node takes a slot or reboots until `rota resume`)",
            output::rfc3339_seconds(pause.since),
            pause.reason
        ));
    }
    if let Some(notice) = &summary.notice {
        line.push_str(&format!("\nNO GRANTS: {notice}"));
    }
    line
}

/// The human output: summary line, blank line, table.
pub fn render_table(summary: &Summary, rows: &[StatusRow], now: Millis) -> String {
    let mut text = summary_line(summary);
    text.push_str("\n\n");
    if rows.is_empty() {
        text.push_str("no nodes known to the store\n");
        return text;
    }
    // The GROUP column only in a fleet with groups.
    let grouped = rows.iter().any(|r| r.group.is_some());
    let mut header = vec!["NODE"];
    if grouped {
        header.push("GROUP");
    }
    header.extend([
        "STATE",
        "SLOT",
        "PROCESS",
        "SINCE",
        "QUEUE",
        "BACKOFF",
        "LAST RESULT",
        "BLOCKED",
    ]);
    text.push_str(&output::table(
        &header,
        rows.iter().map(|r| {
            let mut cells = vec![r.node.to_string()];
            if grouped {
                cells.push(output::cell(r.group.as_deref()));
            }
            cells.extend([
                r.state.to_string(),
                output::cell(r.slot),
                output::cell(r.process.as_ref()),
                output::relative(r.since_millis, now),
                r.queue.to_string(),
                output::cell(r.backoff_millis.map(|b| output::relative(b, now))),
                output::cell(r.last_result.as_deref()),
                output::cell(r.blocked.as_ref().map(|b| b.reason.as_str())),
            ]);
            cells
        }),
    ));
    text
}

pub async fn run(args: StatusArgs) -> Result<()> {
    let store = crate::open_store(&args.store).await?;
    let (facts, summary) = gather(&*store).await?;
    let now = now_millis();
    let rows = rows(&facts, &summary.holders, now);
    let text = match args.output {
        Format::Table => render_table(&summary, &rows, now),
        Format::Json => output::json(&rows)?,
    };
    output::emit(&text)
}

/// The fleet as `rota status` shows it: its nodes and slots read at once (a fixed number of
/// requests or statements whatever the fleet's size), then its settings.
pub async fn gather(store: &dyn Store) -> Result<(Vec<NodeFacts>, Summary)> {
    let fleet = store.fleet().await?;
    let settings = store.settings().await?;
    let rollout = RolloutSummary {
        finished: rota_core::rollout::finished(
            fleet.nodes.iter().map(|n| &n.record),
            settings.resumed_at,
        ),
        rules: settings.rollout,
        since: settings.resumed_at,
    };
    let facts = fleet
        .nodes
        .into_iter()
        .map(|node| NodeFacts {
            record: node.record,
            open_requests: node.open_requests.len(),
            backoffs: node.backoffs,
        })
        .collect();
    Ok((
        facts,
        Summary {
            concurrency: settings.concurrency,
            holders: fleet.slots,
            paused: settings.pause,
            notice: fleet.notice,
            rollout,
            groups: settings.groups,
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NOW: Millis = 1_714_557_600_000; // 2024-05-01T10:00:00Z

    fn name(s: &str) -> NodeName {
        NodeName::new(s).expect("valid node name")
    }

    fn record(node: &str, state: NodeState, since_ago_s: i64) -> NodeRecord {
        NodeRecord::new(name(node), state, NOW - since_ago_s * 1000)
    }

    fn backoff(node: &str, until: Millis) -> BackoffRecord {
        BackoffRecord {
            node: name(node),
            process: Process::Reboot,
            until,
            last_interval: Duration::from_secs(60),
            cause: "drain timed out".into(),
        }
    }

    fn fleet() -> (Vec<NodeFacts>, Summary) {
        let failed = NodeRecord {
            process: Some(Process::Mop("kernel-update".into())),
            slot: Some(0),
            cordoned_by_rota: true,
            last_result: Some("failed: script exited 3".into()),
            ..record("node-3", NodeState::Failed, 192)
        };
        let draining = NodeRecord {
            process: Some(Process::Reboot),
            slot: None, // only the holders table knows it
            cordoned_by_rota: true,
            ..record("node-1", NodeState::Draining, 5)
        };
        let queued = NodeRecord {
            queued_at: Some(NOW - 600_000),
            last_result: Some("failed: drain timed out".into()),
            blocked: Some(rota_store::Blocked {
                reason: "pods matching app=backup run on the node: default/backup-0".into(),
                since: NOW - 120_000,
            }),
            ..record("node-2", NodeState::Queued, 600)
        };
        let idle = NodeRecord {
            last_result: Some("finished".into()),
            ..record("node-4", NodeState::Idle, 90_061)
        };
        let facts = vec![
            NodeFacts {
                record: failed,
                open_requests: 1,
                backoffs: vec![backoff("node-3", NOW + 30_000)],
            },
            NodeFacts {
                record: queued,
                open_requests: 2,
                // the latest deadline counts
                backoffs: vec![
                    backoff("node-2", NOW + 20_000),
                    backoff("node-2", NOW + 90_000),
                ],
            },
            NodeFacts {
                record: draining,
                open_requests: 1,
                backoffs: vec![],
            },
            NodeFacts {
                record: idle,
                open_requests: 0,
                // an expired backoff is not shown
                backoffs: vec![backoff("node-4", NOW - 1)],
            },
        ];
        let holders = vec![
            SlotHolder {
                slot: 1,
                node: name("node-1"),
                acquired_at: NOW - 5000,
            },
            SlotHolder {
                slot: 0,
                node: name("node-3"),
                acquired_at: NOW - 400_000,
            },
        ];
        (
            facts,
            Summary {
                concurrency: Some(2),
                holders,
                paused: None,
                notice: None,
                rollout: RolloutSummary::default(),
                groups: GroupRules::default(),
            },
        )
    }

    #[test]
    fn rows_as_json() {
        let (facts, summary) = fleet();
        insta::assert_json_snapshot!(rows(&facts, &summary.holders, NOW));
    }

    #[test]
    fn rows_as_table() {
        let (facts, summary) = fleet();
        let rows = rows(&facts, &summary.holders, NOW);
        insta::assert_snapshot!(render_table(&summary, &rows, NOW));
    }

    #[test]
    fn an_empty_store() {
        let summary = Summary {
            concurrency: None,
            holders: vec![],
            paused: None,
            notice: None,
            rollout: RolloutSummary::default(),
            groups: GroupRules::default(),
        };
        insta::assert_snapshot!(render_table(&summary, &[], NOW), @r"
        concurrency not set, 0 slots held

        no nodes known to the store
        ");
    }

    #[test]
    fn a_fleet_whose_store_grants_nothing_says_why() {
        let summary = Summary {
            concurrency: Some(1),
            holders: vec![],
            paused: None,
            notice: Some(
                "no scheduler runs: the leader Lease rota-system/rota-scheduler does not exist"
                    .into(),
            ),
            rollout: RolloutSummary::default(),
            groups: GroupRules::default(),
        };
        insta::assert_snapshot!(render_table(&summary, &[], NOW), @r"
        concurrency 1, 0 of 1 slots held
        NO GRANTS: no scheduler runs: the leader Lease rota-system/rota-scheduler does not exist

        no nodes known to the store
        ");
    }

    #[test]
    fn a_paused_fleet_says_so_and_why() {
        let summary = Summary {
            concurrency: Some(1),
            holders: vec![],
            paused: Some(Pause {
                reason: "kernel CVE triage".into(),
                since: NOW - 60_000,
            }),
            notice: None,
            rollout: RolloutSummary::default(),
            groups: GroupRules::default(),
        };
        insta::assert_snapshot!(render_table(&summary, &[], NOW), @r"
        concurrency 1, 0 of 1 slots held
        PAUSED since 2024-05-01T09:59:00Z: kernel CVE triage (no node takes a slot or reboots until `rota resume`)

        no nodes known to the store
        ");
    }

    #[test]
    fn a_progressive_rollout_shows_its_width_and_budget() {
        let summary = Summary {
            concurrency: Some(4),
            holders: vec![],
            paused: None,
            notice: None,
            rollout: RolloutSummary {
                rules: "batches=exponential;failure-budget=10%"
                    .parse()
                    .expect("a rollout"),
                since: Some(NOW - 3_600_000),
                finished: 1,
            },
            groups: "*=1;in-turn".parse().expect("rules"),
        };
        insta::assert_snapshot!(render_table(&summary, &[], NOW), @r"
        concurrency 4, 0 of 4 slots held
        slot groups: *=1;in-turn
        rollout since 2024-05-01T09:00:00Z: batches exponential, 2 at once now (1 node finished healthy); failure budget 10%

        no nodes known to the store
        ");
    }
}
