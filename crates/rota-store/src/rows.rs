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
    RequestState, SlotHolder, StepRecord,
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
    fn column<T: Value>(&self, name: &str) -> std::result::Result<T, sqlx::Error>;
}

impl SqlRow for PgRow {
    fn column<T: Value>(&self, name: &str) -> std::result::Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

impl SqlRow for SqliteRow {
    fn column<T: Value>(&self, name: &str) -> std::result::Result<T, sqlx::Error> {
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

pub(crate) fn request_state(value: String) -> Result<RequestState> {
    match value.as_str() {
        "pending" => Ok(RequestState::Pending),
        "active" => Ok(RequestState::Active),
        "done" => Ok(RequestState::Done),
        "canceled" => Ok(RequestState::Canceled),
        _ => Err(Error::Corrupt {
            column: "requests.state",
            value,
            reason: "expected pending, active, done or canceled".into(),
        }),
    }
}

/// A slot number as a record shows it: one that no slot can have (a hand edit, another
/// program's write) is refused by name, not read as another slot or as none.
fn stored_slot(column: &'static str, value: i64) -> Result<u32> {
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

pub(crate) fn getter(context: &'static str) -> impl Fn(sqlx::Error) -> Error {
    move |source| Error::Database { context, source }
}

pub(crate) const NODE_COLUMNS: &str = "n.node, n.state, n.since, n.process, n.pre_cordoned, \
    n.cordoned_by_rota, n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, \
    n.queued_at, n.last_result, n.blocked_reason, n.blocked_since, s.slot";

/// The rows of a node's (or every node's) three reads as their records.
pub(crate) fn overview<R: SqlRow>(
    nodes: &[R],
    requests: &[R],
    backoffs: &[R],
) -> Result<Vec<NodeOverview>> {
    Ok(NodeOverview::group(
        nodes.iter().map(node_record).collect::<Result<_>>()?,
        requests.iter().map(request_record).collect::<Result<_>>()?,
        backoffs.iter().map(backoff_record).collect::<Result<_>>()?,
    ))
}

/// A node's row with its slot, as [`NODE_COLUMNS`] selects them.
pub(crate) fn node_record(row: &impl SqlRow) -> Result<NodeRecord> {
    let get = getter("reading a node");
    let name: String = row.column("node").map_err(&get)?;
    node_fields(row, parse("nodes.node", name.clone())?).map_err(|e| e.of_node(&name))
}

fn node_fields(row: &impl SqlRow, node: NodeName) -> Result<NodeRecord> {
    let get = getter("reading a node");
    Ok(NodeRecord {
        node,
        state: parse("nodes.state", row.column("state").map_err(&get)?)?,
        since: row.column("since").map_err(&get)?,
        process: row
            .column::<Option<String>>("process")
            .map_err(&get)?
            .map(|p| parse("nodes.process", p))
            .transpose()?,
        slot: stored_slot_if_any("slots.slot", row.column("slot").map_err(&get)?)?,
        pre_cordoned: row.column("pre_cordoned").map_err(&get)?,
        cordoned_by_rota: row.column("cordoned_by_rota").map_err(&get)?,
        boot_id: row.column("boot_id").map_err(&get)?,
        reboot_started_at: row.column("reboot_started_at").map_err(&get)?,
        reboot_deadline: row.column("reboot_deadline").map_err(&get)?,
        last_reboot_at: row.column("last_reboot_at").map_err(&get)?,
        queued_at: row.column("queued_at").map_err(&get)?,
        last_result: row.column("last_result").map_err(&get)?,
        blocked: blocked(
            row.column("blocked_reason").map_err(&get)?,
            row.column("blocked_since").map_err(&get)?,
        ),
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
    let get = getter("reading a request");
    Ok(RequestRecord {
        id: row.column("id").map_err(&get)?,
        node: parse("requests.node", row.column("node").map_err(&get)?)?,
        process: parse("requests.process", row.column("process").map_err(&get)?)?,
        source: row.column("source").map_err(&get)?,
        created_at: row.column("created_at").map_err(&get)?,
        state: request_state(row.column("state").map_err(&get)?)?,
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
    let get = getter("reading a procedure");
    let json: String = row.column("spec").map_err(&get)?;
    ProcedureRecord::from_stored(&json, row.column("submitted_at").map_err(&get)?)
}

pub(crate) fn slot_holder(row: &impl SqlRow) -> Result<SlotHolder> {
    let get = getter("reading slots");
    Ok(SlotHolder {
        slot: stored_slot("slots.slot", row.column("slot").map_err(&get)?)?,
        node: parse("slots.holder", row.column("holder").map_err(&get)?)?,
        acquired_at: row.column("acquired_at").map_err(&get)?,
    })
}

pub(crate) fn backoff_record(row: &impl SqlRow) -> Result<BackoffRecord> {
    let get = getter("reading backoff");
    let secs: i64 = row.column("last_interval_s").map_err(&get)?;
    Ok(BackoffRecord {
        node: parse("backoff.node", row.column("node").map_err(&get)?)?,
        process: parse("backoff.process", row.column("process").map_err(&get)?)?,
        until: row.column("until").map_err(&get)?,
        last_interval: interval_seconds(secs)?,
        cause: row.column("cause").map_err(&get)?,
    })
}

pub(crate) fn history_entry(row: &impl SqlRow) -> Result<HistoryEntry> {
    let get = getter("reading history");
    Ok(HistoryEntry {
        id: row.column("id").map_err(&get)?,
        node: parse("history.node", row.column("node").map_err(&get)?)?,
        process: parse("history.process", row.column("process").map_err(&get)?)?,
        event: parse("history.event", row.column("event").map_err(&get)?)?,
        at: row.column("at").map_err(&get)?,
        cause: row.column("cause").map_err(&get)?,
        slot: stored_slot_if_any("history.slot", row.column("slot").map_err(&get)?)?,
        released: row.column("released").map_err(&get)?,
    })
}

/// A row of `steps`.
pub(crate) fn step_record(row: &impl SqlRow) -> Result<StepRecord> {
    let get = getter("reading steps");
    Ok(StepRecord {
        node: parse("steps.node", row.column("node").map_err(&get)?)?,
        state: parse("steps.state", row.column("state").map_err(&get)?)?,
        at: row.column("at").map_err(&get)?,
    })
}

/// A row of `audit_records`.
pub(crate) fn audit_record(row: &impl SqlRow) -> Result<AuditRecord> {
    let get = getter("reading audit records");
    let node: Option<String> = row.column("node").map_err(&get)?;
    let process: Option<String> = row.column("process").map_err(&get)?;
    Ok(AuditRecord {
        at: row.column("at").map_err(&get)?,
        command: parse(
            "audit_records.command",
            row.column("command").map_err(&get)?,
        )?,
        node: node.map(|n| parse("audit_records.node", n)).transpose()?,
        process: process
            .map(|p| parse("audit_records.process", p))
            .transpose()?,
        by: row.column("by").map_err(&get)?,
        reason: row.column("reason").map_err(&get)?,
    })
}
