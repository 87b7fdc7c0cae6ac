//! Reading rows: how stored values map to the model, and the queries both readers and
//! writers need.

use std::str::FromStr;

use rota_core::NodeName;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::error::{Context, Error, Result};
use crate::model::{Blocked, NodeRecord, ProcedureRecord, RequestRecord, RequestState, now_millis};

pub(super) fn parse<T: FromStr>(column: &'static str, value: String) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e: T::Err| Error::Corrupt {
        column,
        reason: e.to_string(),
        value,
    })
}

pub(super) fn request_state(value: String) -> Result<RequestState> {
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

pub(super) fn slot_index(value: Option<i64>) -> Option<u32> {
    value.and_then(|v| u32::try_from(v).ok())
}

pub(super) const NODE_COLUMNS: &str = "n.node, n.state, n.since, n.process, n.pre_cordoned, \
    n.cordoned_by_rota, n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, \
    n.queued_at, n.last_result, n.blocked_reason, n.blocked_since, s.slot";

pub(super) fn node_record(row: &SqliteRow) -> Result<NodeRecord> {
    let get = |e: sqlx::Error| Error::Database {
        context: "reading a node",
        source: e,
    };
    Ok(NodeRecord {
        node: parse("nodes.node", row.try_get("node").map_err(get)?)?,
        state: parse("nodes.state", row.try_get("state").map_err(get)?)?,
        since: row.try_get("since").map_err(get)?,
        process: row
            .try_get::<Option<String>, _>("process")
            .map_err(get)?
            .map(|p| parse("nodes.process", p))
            .transpose()?,
        slot: slot_index(row.try_get("slot").map_err(get)?),
        pre_cordoned: row.try_get("pre_cordoned").map_err(get)?,
        cordoned_by_rota: row.try_get("cordoned_by_rota").map_err(get)?,
        boot_id: row.try_get("boot_id").map_err(get)?,
        reboot_started_at: row.try_get("reboot_started_at").map_err(get)?,
        reboot_deadline: row.try_get("reboot_deadline").map_err(get)?,
        last_reboot_at: row.try_get("last_reboot_at").map_err(get)?,
        queued_at: row.try_get("queued_at").map_err(get)?,
        last_result: row.try_get("last_result").map_err(get)?,
        blocked: blocked(
            row.try_get("blocked_reason").map_err(get)?,
            row.try_get("blocked_since").map_err(get)?,
        ),
    })
}

/// A stored blocked reason: both columns are set together, or neither.
pub(super) fn blocked(reason: Option<String>, since: Option<i64>) -> Option<Blocked> {
    Some(Blocked {
        reason: reason?,
        since: since.unwrap_or_default(),
    })
}

pub(super) fn request_record(row: &SqliteRow) -> Result<RequestRecord> {
    let get = |e: sqlx::Error| Error::Database {
        context: "reading a request",
        source: e,
    };
    Ok(RequestRecord {
        id: row.try_get("id").map_err(get)?,
        node: parse("requests.node", row.try_get("node").map_err(get)?)?,
        process: parse("requests.process", row.try_get("process").map_err(get)?)?,
        source: row.try_get("source").map_err(get)?,
        created_at: row.try_get("created_at").map_err(get)?,
        state: request_state(row.try_get("state").map_err(get)?)?,
    })
}

pub(super) async fn fetch_node(
    conn: &mut sqlx::SqliteConnection,
    node: &NodeName,
) -> Result<Option<NodeRecord>> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM nodes n LEFT JOIN slots s ON s.holder = n.node WHERE n.node = ?"
    );
    let row = sqlx::query(&sql)
        .bind(node.as_str())
        .fetch_optional(conn)
        .await
        .context("reading a node")?;
    row.as_ref().map(node_record).transpose()
}

pub(super) async fn read_concurrency(conn: &mut sqlx::SqliteConnection) -> Result<u32> {
    let value: Option<String> =
        sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'concurrency'")
            .fetch_optional(&mut *conn)
            .await
            .context("reading the concurrency")?;
    Ok(value
        .map(|v| parse("rota_meta.concurrency", v))
        .transpose()?
        .unwrap_or(1))
}

/// How many wake-ups of `Store::changes` must happen at least before `node` can take a slot:
/// 0 when it may take one now (queued, eligible, and fewer live waiters ahead of it than free
/// slots). Queued nodes whose session has expired, or that are blocked, do not hold the queue
/// up. A node that is not
/// queued or still in backoff waits for its own timer, counted as one.
pub(super) async fn changes_before_turn(
    conn: &mut sqlx::SqliteConnection,
    node: &NodeName,
) -> Result<u64> {
    let concurrency = i64::from(read_concurrency(conn).await?);
    let now = now_millis();
    let row = sqlx::query(
        "SELECT me.queued_at AS queued_at, \
           (SELECT COUNT(*) FROM slots) AS held, \
           (SELECT COUNT(*) FROM nodes n JOIN sessions s ON s.id = n.session_id \
              WHERE n.state = 'queued' AND n.queued_at IS NOT NULL AND n.queued_at <= ?2 \
                AND (n.queued_at < me.queued_at OR (n.queued_at = me.queued_at AND n.node < me.node)) \
                AND s.superseded = 0 AND s.deadline > ?2 AND n.blocked_reason IS NULL \
                AND n.node NOT IN (SELECT holder FROM slots)) AS ahead \
         FROM nodes me WHERE me.node = ?1 AND me.state = 'queued'",
    )
    .bind(node.as_str())
    .bind(now)
    .fetch_optional(&mut *conn)
    .await
    .context("reading the queue")?;
    let Some(row) = row else {
        return Ok(1);
    };
    let get = |e| Error::Database {
        context: "reading the queue",
        source: e,
    };
    let queued_at: Option<i64> = row.try_get("queued_at").map_err(get)?;
    let held: i64 = row.try_get("held").map_err(get)?;
    let ahead: i64 = row.try_get("ahead").map_err(get)?;
    if queued_at.is_none_or(|q| q > now) {
        return Ok(1);
    }
    let free = concurrency - held;
    Ok(u64::try_from(ahead - free + 1).unwrap_or(0))
}

pub(super) fn procedure_record(row: &SqliteRow) -> Result<ProcedureRecord> {
    let get = |e: sqlx::Error| Error::Database {
        context: "reading a procedure",
        source: e,
    };
    let json: String = row.try_get("spec").map_err(get)?;
    ProcedureRecord::from_stored(&json, row.try_get("submitted_at").map_err(get)?)
}
