//! `rota history`: the append-only record of work events, with the operators' audit records (who
//! ran which command, and why) among them.

use anyhow::{Result, bail};
use backon::Retryable;
use rota_core::{NodeName, Process};
use rota_store::{AuditRecord, HistoryEntry, HistoryFilter, Millis, StoreExt, now_millis};
use serde::Serialize;

use crate::cli::{Format, HistoryArgs};
use crate::output;
use crate::steps;

/// One history entry or audit record as `rota history` shows it; also the JSON output's
/// element type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryRow {
    /// `None` for an operator's command on the fleet (pause, resume, a procedure's submission).
    pub node: Option<NodeName>,
    pub process: Option<Process>,
    /// A history event (started, finished, …) or an operator's command (unlock, pause, …).
    pub event: String,
    /// RFC 3339 UTC.
    pub at: String,
    /// Why: the history event's cause, or the reason the operator gave.
    pub cause: Option<String>,
    /// The slot the node held at this event.
    pub slot: Option<u32>,
    /// Whether this event gave the slot back.
    pub released: bool,
    /// Who did it: the operator (the API user in Kubernetes, `user@host` on the SQL stores);
    /// `None` for what an agent did.
    pub by: Option<String>,
    #[serde(skip)]
    at_millis: Millis,
}

pub fn row(entry: &HistoryEntry) -> HistoryRow {
    HistoryRow {
        node: Some(entry.node.clone()),
        process: Some(entry.process.clone()),
        event: entry.event.to_string(),
        at: output::rfc3339(entry.at),
        cause: entry.cause.clone(),
        slot: entry.slot,
        released: entry.released,
        by: None,
        at_millis: entry.at,
    }
}

pub fn audit_row(record: &AuditRecord) -> HistoryRow {
    HistoryRow {
        node: record.node.clone(),
        process: record.process.clone(),
        event: record.command.to_string(),
        at: output::rfc3339(record.at),
        cause: record.reason.clone(),
        slot: None,
        released: false,
        by: Some(record.by.clone()),
        at_millis: record.at,
    }
}

/// The history's entries and the audit records in one list, by time; a command's record and the
/// entries the command caused share their millisecond, and the record comes first.
pub fn merged(entries: &[HistoryEntry], audit: &[AuditRecord]) -> Vec<HistoryRow> {
    let mut rows: Vec<HistoryRow> = audit.iter().map(audit_row).collect();
    rows.extend(entries.iter().map(row));
    // Stable: entries keep their store order within a millisecond.
    rows.sort_by_key(|r| r.at_millis);
    rows
}

pub fn render_table(rows: &[HistoryRow]) -> String {
    if rows.is_empty() {
        return "no history entries match\n".to_owned();
    }
    output::table(
        &[
            "AT", "NODE", "PROCESS", "EVENT", "SLOT", "RELEASED", "CAUSE", "BY",
        ],
        rows.iter().map(|r| {
            vec![
                output::rfc3339_seconds(r.at_millis),
                output::cell(r.node.as_ref()),
                output::cell(r.process.as_ref()),
                r.event.clone(),
                output::cell(r.slot),
                if r.released { "yes" } else { "no" }.to_owned(),
                output::cell(r.cause.as_deref()),
                output::cell(r.by.as_deref()),
            ]
        }),
    )
}

/// The store filter for the command line, relative times counted back from `now`.
pub fn filter(args: &HistoryArgs, now: Millis) -> Result<HistoryFilter> {
    let since = args.since.map(|t| t.resolve(now));
    let until = args.until.map(|t| t.resolve(now));
    if let (Some(since), Some(until)) = (since, until)
        && since > until
    {
        bail!(
            "--since ({}) is after --until ({}): no entry can match",
            output::rfc3339(since),
            output::rfc3339(until)
        );
    }
    Ok(HistoryFilter {
        node: args.node.clone(),
        process: args.process.clone(),
        event: args.event,
        since,
        until,
    })
}

pub async fn run(args: HistoryArgs) -> Result<()> {
    let now = now_millis();
    let filter = filter(&args, now)?;
    let (svg, html) = crate::report_file::pair(args.svg.as_deref(), args.html.as_deref())?;
    let store = crate::open_store(&args.store).await?;
    let entries = store.history(&filter).await?;
    // A RotaAuditRecord CRD installed a moment ago answers 429 until its storage is ready: a
    // few growing pauses, as the agents' calls take.
    let audit = (|| store.audit_records(&filter))
        .retry(rota_store::retry_pauses().with_max_times(6))
        .when(rota_store::Error::is_unavailable)
        .await?;
    // A window or step still under way is drawn (and measured) up to the end of the range.
    let until = filter.until.map_or(now, |until| until.min(now));
    let drawn = svg.is_some() || html.is_some();
    let steps = if drawn || args.steps {
        store.steps(&filter).await?
    } else {
        Vec::new()
    };
    if drawn {
        let timeline = rota_timeline::from_history(&entries, until).merged(
            rota_timeline::from_steps(steps.iter().map(|s| (&s.node, s.state, s.at)), until),
        );
        if let Some(file) = svg {
            file.write(&rota_timeline::render_svg(&timeline))?;
        }
        if let Some(file) = html {
            file.write(&rota_timeline::render_html(
                &timeline,
                "rota rollout timeline",
            ))?;
        }
    }
    let text = if args.steps {
        let report = steps::report(&steps, &entries, until);
        match args.output {
            Format::Table => steps::render_table(&report),
            Format::Json => output::json(&report)?,
        }
    } else {
        let rows = merged(&entries, &audit);
        match args.output {
            Format::Table => render_table(&rows),
            Format::Json => output::json(&rows)?,
        }
    };
    output::emit(&text)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use rota_core::HistoryEvent;
    use rota_store::OperatorCommand;

    use super::*;
    use crate::cli::{Cli, Command};

    const NOW: Millis = 1_714_557_600_000; // 2024-05-01T10:00:00Z

    fn entry(
        id: i64,
        event: HistoryEvent,
        at: Millis,
        cause: Option<&str>,
        released: bool,
    ) -> HistoryEntry {
        HistoryEntry {
            id,
            node: NodeName::new("node-3").expect("valid"),
            process: Process::Mop("kernel-update".into()),
            event,
            at,
            cause: cause.map(str::to_owned),
            slot: Some(0),
            released,
        }
    }

    fn entries() -> Vec<HistoryRow> {
        let history = [
            entry(1, HistoryEvent::Started, NOW - 3_600_000, None, false),
            entry(
                2,
                HistoryEvent::Failed,
                NOW - 1_800_123,
                Some("script exited 3"),
                false,
            ),
            entry(
                3,
                HistoryEvent::Canceled,
                NOW,
                Some("unlocked by operator: replaced the disk"),
                true,
            ),
        ];
        let audit = [
            AuditRecord {
                at: NOW,
                command: OperatorCommand::Unlock,
                node: Some(NodeName::new("node-3").expect("valid")),
                process: Some(Process::Mop("kernel-update".into())),
                by: "alice@admin-1".into(),
                reason: Some("replaced the disk".into()),
            },
            AuditRecord {
                at: NOW - 7_200_000,
                command: OperatorCommand::Pause,
                node: None,
                process: None,
                by: "alice@admin-1".into(),
                reason: Some("change freeze".into()),
            },
        ];
        merged(&history, &audit)
    }

    #[test]
    fn rows_as_json() {
        insta::assert_json_snapshot!(entries());
    }

    #[test]
    fn rows_as_table() {
        insta::assert_snapshot!(render_table(&entries()));
    }

    #[test]
    fn no_rows() {
        assert_eq!(render_table(&[]), "no history entries match\n");
    }

    fn history_args(argv: &[&str]) -> HistoryArgs {
        let cli = Cli::try_parse_from(argv).expect("valid command line");
        match cli.command {
            Command::History(args) => args,
            other => panic!("not history: {other:?}"),
        }
    }

    #[test]
    fn filters_resolve_relative_times() -> Result<()> {
        let args = history_args(&[
            "rota",
            "history",
            "node-3",
            "--process",
            "reboot",
            "--event",
            "failed",
            "--since",
            "2h",
            "--until",
            "2024-05-01T09:30:00Z",
        ]);
        assert_eq!(
            filter(&args, NOW)?,
            HistoryFilter {
                node: Some(NodeName::new("node-3")?),
                process: Some(Process::Reboot),
                event: Some(HistoryEvent::Failed),
                since: Some(NOW - 7_200_000),
                until: Some(NOW - 1_800_000),
            }
        );
        Ok(())
    }

    #[test]
    fn since_after_until_is_refused() {
        let args = history_args(&["rota", "history", "--since", "1h", "--until", "2h"]);
        let err = filter(&args, NOW).expect_err("empty range").to_string();
        assert!(err.contains("--since") && err.contains("--until"), "{err}");
    }
}
