//! The past as both SQL stores read it: one statement for each [`Part`] of [`History`], with
//! the filter's node, process, event, since and until as `$1` to `$5` (a filter that is not
//! set, or that names a column the part does not have, lets every row through).

use crate::error::Result;
use crate::model::{History, HistoryFilter, Part};
use crate::rows::{SqlRow, audit_record, history_entry, request_record, step_record};

/// The statement that reads `part` in the order it was written; `None` when `filter` lets
/// nothing through (an operator's command is no history event).
pub(crate) fn history_sql(part: Part, filter: &HistoryFilter) -> Option<String> {
    let (columns, table) = match part {
        Part::Entries => (
            "id, node, process, event, at, cause, slot, released",
            "history",
        ),
        Part::Steps => ("node, state, at, note", "steps"),
        Part::Audit if filter.event.is_some() => return None,
        Part::Audit => ("at, command, node, process, by, reason", "audit_records"),
        Part::Requests => ("id, node, process, source, created_at, state", "requests"),
    };
    let test = |n: u8, kind: &str, column: &str, test: &str| {
        let has = columns.split(", ").any(|c| c == column);
        format!(
            "(CAST(${n} AS {kind}) IS NULL OR {})",
            if has { test } else { "TRUE" }
        )
    };
    // Every part has a node: one that is set is a plain equality, so that a plan made for any
    // value still uses the index on the node.
    let node = match filter.node {
        Some(_) => "node = $1",
        None => "CAST($1 AS TEXT) IS NULL",
    };
    Some(format!(
        "SELECT {columns} FROM {table} WHERE {node} AND {} AND {} AND {} AND {} ORDER BY id",
        test(2, "TEXT", "process", "process = $2"),
        test(3, "TEXT", "event", "event = $3"),
        test(4, "BIGINT", "at", "at >= $4"),
        test(5, "BIGINT", "at", "at <= $5"),
    ))
}

/// The rows [`history_sql`] read, as the part of the past they are.
pub(crate) fn history_of(part: Part, rows: &[impl SqlRow]) -> Result<History> {
    let mut history = History::default();
    match part {
        Part::Entries => history.entries = rows.iter().map(history_entry).collect::<Result<_>>()?,
        Part::Steps => history.steps = rows.iter().map(step_record).collect::<Result<_>>()?,
        Part::Audit => history.audit = rows.iter().map(audit_record).collect::<Result<_>>()?,
        Part::Requests => {
            history.requests = rows.iter().map(request_record).collect::<Result<_>>()?;
        }
    }
    Ok(history)
}
