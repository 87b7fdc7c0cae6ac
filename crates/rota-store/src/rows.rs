//! Reading rows of either SQL store: how stored values map to the model. The SQLite and
//! PostgreSQL schemas give these columns the same names and kinds, so one decoder serves both.

use std::str::FromStr;
use std::time::Duration;

use rota_core::NodeName;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Decode, Postgres, Row, Sqlite, Type};

use crate::audit::AuditRecord;
use crate::error::{Error, Result};
use crate::model::{
    BackoffRecord, Blocked, HistoryEntry, NodeOverview, NodeRecord, ProcedureRecord, RequestRecord,
    SlotHolder, StepRecord,
};

/// A value that both databases decode.
pub(crate) trait Value:
    for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

impl<T> Value for T where
    T: for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

/// A row of either database, read by column name.
pub(crate) trait SqlRow {
    fn try_column<T: Value>(&self, name: &str) -> std::result::Result<T, sqlx::Error>;

    /// Column `name`'s value; one that does not decode is an error that names the column.
    fn column<T: Value>(&self, name: &str) -> Result<T> {
        self.try_column(name).map_err(|source| Error::Database {
            context: "reading a row",
            source,
        })
    }
}

impl SqlRow for PgRow {
    fn try_column<T: Value>(&self, name: &str) -> std::result::Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

impl SqlRow for SqliteRow {
    fn try_column<T: Value>(&self, name: &str) -> std::result::Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

pub(crate) fn parse<T: FromStr>(column: &'static str, value: String) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e: T::Err| Error::Corrupt {
        column,
        reason: e.to_string(),
        value,
    })
}

/// The stored concurrency, which `set_concurrency` keeps within 1..=1000: another value (a hand
/// edit) is refused by name, since 0 would let no node take a slot without a word.
pub(crate) fn concurrency(column: &'static str, value: String) -> Result<u32> {
    match value.parse::<u32>() {
        Ok(concurrency) if (1..=1000).contains(&concurrency) => Ok(concurrency),
        _ => Err(Error::Corrupt {
            column,
            value,
            reason: "expected an integer 1..=1000".into(),
        }),
    }
}

/// A slot number as a record shows it: one that no slot can have (a hand edit, another
/// program's write) is refused by name, not read as another slot or as none.
pub(crate) fn stored_slot(column: &'static str, value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|_| Error::Corrupt {
        column,
        value: value.to_string(),
        reason: format!("expected a slot number from 0 to {}", u32::MAX),
    })
}

/// A slot number that may be absent (no slot held), as [`stored_slot`] reads it.
pub(crate) fn stored_slot_if_any(column: &'static str, value: Option<i64>) -> Result<Option<u32>> {
    value.map(|v| stored_slot(column, v)).transpose()
}

pub(crate) const NODE_COLUMNS: &str = "n.node, n.state, n.since, n.process, n.pre_cordoned, \
    n.cordoned_by_rota, n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, \
    n.queued_at, n.last_result, n.last_result_at, n.group_name, n.blocked_reason, n.blocked_since, s.slot";

/// A node's row with its open requests and backoffs, as JSON arrays in the columns `requests`
/// and `backoffs`.
pub(crate) fn overview(row: &impl SqlRow) -> Result<NodeOverview> {
    let record = node_record(row)?;
    let node = record.node.clone();
    let open_requests = json_rows("requests", row.column("requests")?)?
        .iter()
        .map(|r| {
            Ok(RequestRecord {
                id: field(r, "requests.id")?,
                node: node.clone(),
                process: parse("requests.process", field(r, "requests.process")?)?,
                source: field(r, "requests.source")?,
                created_at: field(r, "requests.created_at")?,
                state: parse("requests.state", field(r, "requests.state")?)?,
            })
        })
        .collect::<Result<_>>();
    let backoffs = json_rows("backoff", row.column("backoffs")?)?
        .iter()
        .map(|b| {
            Ok(BackoffRecord {
                node: node.clone(),
                process: parse("backoff.process", field(b, "backoff.process")?)?,
                until: field(b, "backoff.until")?,
                last_interval: interval_seconds(field(b, "backoff.last_interval_s")?)?,
                cause: field(b, "backoff.cause")?,
            })
        })
        .collect::<Result<_>>();
    let of_node = |e: Error| e.of_node(node.as_str());
    Ok(NodeOverview {
        open_requests: open_requests.map_err(of_node)?,
        backoffs: backoffs.map_err(of_node)?,
        record,
    })
}

/// Rows of `table` that a read aggregated into a JSON array, each an object of its columns.
pub(crate) fn json_rows(table: &'static str, text: String) -> Result<Vec<JsonRow>> {
    serde_json::from_str(&text).map_err(|e| Error::Corrupt {
        column: table,
        reason: e.to_string(),
        value: text,
    })
}

pub(crate) type JsonRow = serde_json::Map<String, serde_json::Value>;

/// The value of `column` (`table.name`) in a row of [`json_rows`], refused by the column's
/// name when it is not a `T` (SQLite keeps any value in any column).
pub(crate) fn field<T: serde::de::DeserializeOwned>(
    row: &JsonRow,
    column: &'static str,
) -> Result<T> {
    let name = column.split_once('.').map_or(column, |(_, name)| name);
    let value = row.get(name).cloned().unwrap_or_default();
    serde_json::from_value(value.clone()).map_err(|e| Error::Corrupt {
        column,
        reason: e.to_string(),
        value: match value {
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        },
    })
}

/// A node's row with its slot, as [`NODE_COLUMNS`] selects them.
pub(crate) fn node_record(row: &impl SqlRow) -> Result<NodeRecord> {
    let name: String = row.column("node")?;
    node_fields(row, parse("nodes.node", name.clone())?).map_err(|e| e.of_node(&name))
}

fn node_fields(row: &impl SqlRow, node: NodeName) -> Result<NodeRecord> {
    Ok(NodeRecord {
        node,
        state: parse("nodes.state", row.column("state")?)?,
        since: row.column("since")?,
        process: row
            .column::<Option<String>>("process")?
            .map(|p| parse("nodes.process", p))
            .transpose()?,
        slot: stored_slot_if_any("slots.slot", row.column("slot")?)?,
        pre_cordoned: row.column("pre_cordoned")?,
        cordoned_by_rota: row.column("cordoned_by_rota")?,
        boot_id: row.column("boot_id")?,
        reboot_started_at: row.column("reboot_started_at")?,
        reboot_deadline: row.column("reboot_deadline")?,
        last_reboot_at: row.column("last_reboot_at")?,
        queued_at: row.column("queued_at")?,
        last_result: row.column("last_result")?,
        last_result_at: row.column("last_result_at")?,
        group: row.column("group_name")?,
        blocked: blocked(row.column("blocked_reason")?, row.column("blocked_since")?),
    })
}

/// A stored blocked reason: both columns are set together, or neither.
fn blocked(reason: Option<String>, since: Option<i64>) -> Option<Blocked> {
    Some(Blocked {
        reason: reason?,
        since: since.unwrap_or_default(),
    })
}

pub(crate) fn request_record(row: &impl SqlRow) -> Result<RequestRecord> {
    Ok(RequestRecord {
        id: row.column("id")?,
        node: parse("requests.node", row.column("node")?)?,
        process: parse("requests.process", row.column("process")?)?,
        source: row.column("source")?,
        created_at: row.column("created_at")?,
        state: parse("requests.state", row.column("state")?)?,
    })
}

fn interval_seconds(secs: i64) -> Result<Duration> {
    u64::try_from(secs)
        .map(Duration::from_secs)
        .map_err(|_| Error::Corrupt {
            column: "backoff.last_interval_s",
            value: secs.to_string(),
            reason: "expected a number of seconds, 0 or more".into(),
        })
}

pub(crate) fn procedure_record(row: &impl SqlRow) -> Result<ProcedureRecord> {
    let json: String = row.column("spec")?;
    ProcedureRecord::from_stored(&json, row.column("submitted_at")?)
}

pub(crate) fn slot_holder(row: &impl SqlRow) -> Result<SlotHolder> {
    Ok(SlotHolder {
        slot: stored_slot("slots.slot", row.column("slot")?)?,
        node: parse("slots.holder", row.column("holder")?)?,
        acquired_at: row.column("acquired_at")?,
    })
}

pub(crate) fn history_entry(row: &impl SqlRow) -> Result<HistoryEntry> {
    Ok(HistoryEntry {
        id: row.column("id")?,
        node: parse("history.node", row.column("node")?)?,
        process: parse("history.process", row.column("process")?)?,
        event: parse("history.event", row.column("event")?)?,
        at: row.column("at")?,
        cause: row.column("cause")?,
        slot: stored_slot_if_any("history.slot", row.column("slot")?)?,
        released: row.column("released")?,
    })
}

/// A row of `steps`.
pub(crate) fn step_record(row: &impl SqlRow) -> Result<StepRecord> {
    Ok(StepRecord {
        node: parse("steps.node", row.column("node")?)?,
        state: parse("steps.state", row.column("state")?)?,
        at: row.column("at")?,
        note: row.column("note")?,
    })
}

/// A row of `audit_records`.
pub(crate) fn audit_record(row: &impl SqlRow) -> Result<AuditRecord> {
    let node: Option<String> = row.column("node")?;
    let process: Option<String> = row.column("process")?;
    Ok(AuditRecord {
        at: row.column("at")?,
        command: parse("audit_records.command", row.column("command")?)?,
        node: node.map(|n| parse("audit_records.node", n)).transpose()?,
        process: process
            .map(|p| parse("audit_records.process", p))
            .transpose()?,
        by: row.column("by")?,
        reason: row.column("reason")?,
    })
}
