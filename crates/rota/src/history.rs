//! `rota history`: the append-only record of work events.

use anyhow::{Context, Result, bail};
use rota_core::{HistoryEvent, NodeName, Process};
use rota_store::{HistoryEntry, HistoryFilter, Millis, now_millis};
use serde::Serialize;

use crate::cli::{Format, HistoryArgs};
use crate::output;

/// One history entry as `rota history` shows it; also the JSON output's element type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryRow {
    pub node: NodeName,
    pub process: Process,
    pub event: HistoryEvent,
    /// RFC 3339 UTC.
    pub at: String,
    pub cause: Option<String>,
    /// The slot the node held at this event.
    pub slot: Option<u32>,
    /// Whether this event gave the slot back.
    pub released: bool,
    #[serde(skip)]
    at_millis: Millis,
}

pub fn row(entry: &HistoryEntry) -> HistoryRow {
    HistoryRow {
        node: entry.node.clone(),
        process: entry.process.clone(),
        event: entry.event,
        at: output::rfc3339(entry.at),
        cause: entry.cause.clone(),
        slot: entry.slot,
        released: entry.released,
        at_millis: entry.at,
    }
}

pub fn render_table(rows: &[HistoryRow]) -> String {
    if rows.is_empty() {
        return "no history entries match\n".to_owned();
    }
    output::table(
        &[
            "AT", "NODE", "PROCESS", "EVENT", "SLOT", "RELEASED", "CAUSE",
        ],
        rows.iter().map(|r| {
            vec![
                output::rfc3339_seconds(r.at_millis),
                r.node.to_string(),
                r.process.to_string(),
                r.event.to_string(),
                output::cell(r.slot),
                if r.released { "yes" } else { "no" }.to_owned(),
                output::cell(r.cause.as_deref()),
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
    let store = crate::open_store(&args.store).await?;
    let entries = store.history(&filter).await?;
    if let Some(path) = &args.svg {
        // A window still open is drawn up to the end of the filtered range.
        let until = filter.until.map_or(now, |until| until.min(now));
        let svg = rota_timeline::render_svg(&rota_timeline::from_history(&entries, until));
        std::fs::write(path, svg)
            .with_context(|| format!("--svg {}: writing the timeline", path.display()))?;
    }
    let rows: Vec<HistoryRow> = entries.iter().map(row).collect();
    let text = match args.output {
        Format::Table => render_table(&rows),
        Format::Json => output::json(&rows)?,
    };
    output::emit(&text)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

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
        [
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
        ]
        .iter()
        .map(row)
        .collect()
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
