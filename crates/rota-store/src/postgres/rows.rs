//! Reading rows: how stored values map to the model, and the node and request queries the
//! writes share.

use std::str::FromStr;
use std::time::Duration;

use rota_core::{NodeName, NodeState, Process};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::error::{Context, Error, Result};
use crate::model::{
    Blocked, Millis, NodeRecord, ProcedureRecord, RequestRecord, RequestState, Session,
};

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

pub(super) fn millis(d: Duration) -> i64 {
    // Capped far below i64::MAX so that `now + ttl` cannot overflow in SQL.
    i64::try_from(d.as_millis())
        .unwrap_or(i64::MAX)
        .min(1 << 52)
}

pub(super) fn getter(context: &'static str) -> impl Fn(sqlx::Error) -> Error {
    move |source| Error::Database { context, source }
}

pub(super) const NODE_COLUMNS: &str = "n.node, n.state, n.since, n.process, n.pre_cordoned, \
    n.cordoned_by_rota, n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, \
    n.queued_at, n.last_result, n.blocked_reason, n.blocked_since, s.slot";

pub(super) fn node_record(row: &PgRow) -> Result<NodeRecord> {
    let get = getter("reading a node");
    Ok(NodeRecord {
        node: parse("nodes.node", row.try_get("node").map_err(&get)?)?,
        state: parse("nodes.state", row.try_get("state").map_err(&get)?)?,
        since: row.try_get("since").map_err(&get)?,
        process: row
            .try_get::<Option<String>, _>("process")
            .map_err(&get)?
            .map(|p| parse("nodes.process", p))
            .transpose()?,
        slot: slot_index(row.try_get("slot").map_err(&get)?),
        pre_cordoned: row.try_get("pre_cordoned").map_err(&get)?,
        cordoned_by_rota: row.try_get("cordoned_by_rota").map_err(&get)?,
        boot_id: row.try_get("boot_id").map_err(&get)?,
        reboot_started_at: row.try_get("reboot_started_at").map_err(&get)?,
        reboot_deadline: row.try_get("reboot_deadline").map_err(&get)?,
        last_reboot_at: row.try_get("last_reboot_at").map_err(&get)?,
        queued_at: row.try_get("queued_at").map_err(&get)?,
        last_result: row.try_get("last_result").map_err(&get)?,
        blocked: match row
            .try_get::<Option<String>, _>("blocked_reason")
            .map_err(&get)?
        {
            Some(reason) => Some(Blocked {
                reason,
                since: row
                    .try_get::<Option<i64>, _>("blocked_since")
                    .map_err(&get)?
                    .unwrap_or_default(),
            }),
            None => None,
        },
    })
}

pub(super) const REQUEST_COLUMNS: &str = "id, node, process, source, created_at, state";

pub(super) fn procedure_record(row: &PgRow) -> Result<ProcedureRecord> {
    let get = getter("reading a procedure");
    let json: String = row.try_get("spec").map_err(&get)?;
    ProcedureRecord::from_stored(&json, row.try_get("submitted_at").map_err(&get)?)
}

pub(super) fn request_record(row: &PgRow) -> Result<RequestRecord> {
    let get = getter("reading a request");
    Ok(RequestRecord {
        id: row.try_get("id").map_err(&get)?,
        node: parse("requests.node", row.try_get("node").map_err(&get)?)?,
        process: parse("requests.process", row.try_get("process").map_err(&get)?)?,
        source: row.try_get("source").map_err(&get)?,
        created_at: row.try_get("created_at").map_err(&get)?,
        state: request_state(row.try_get("state").map_err(&get)?)?,
    })
}

/// The request that stands for `process` on `node`: its open one, or for a procedure any one
/// ever made (a procedure's request is made once per node).
pub(super) async fn existing_request(
    conn: &mut PgConnection,
    node: &NodeName,
    process: &Process,
) -> Result<Option<PgRow>> {
    sqlx::query(&format!(
        "SELECT {REQUEST_COLUMNS} FROM requests WHERE node = $1 AND process = $2 \
         AND (state IN ('pending', 'active') OR process LIKE 'mop/%') \
         ORDER BY id DESC LIMIT 1"
    ))
    .bind(node.as_str())
    .bind(process.to_string())
    .fetch_optional(conn)
    .await
    .context("reading requests")
}

pub(super) async fn fetch_node(
    conn: &mut PgConnection,
    node: &NodeName,
) -> Result<Option<NodeRecord>> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM nodes n LEFT JOIN slots s ON s.holder = n.node \
         WHERE n.node = $1"
    );
    let row = sqlx::query(&sql)
        .bind(node.as_str())
        .fetch_optional(conn)
        .await
        .context("reading a node")?;
    row.as_ref().map(node_record).transpose()
}

/// The node's record, its row locked until the transaction ends, whether `session` is its
/// current unexpired session, and the database's "now" for every timestamp of the transaction.
pub(super) struct Locked {
    pub(super) record: NodeRecord,
    pub(super) current: bool,
    pub(super) now: Millis,
}

pub(super) async fn lock_node(
    tx: &mut PgConnection,
    node: &NodeName,
    session: Option<&Session>,
) -> Result<Option<Locked>> {
    let sql = format!(
        "SELECT {NODE_COLUMNS}, rota_now_ms() AS now, EXISTS ( \
           SELECT 1 FROM sessions se WHERE se.id = n.session_id AND se.id = $2 \
             AND NOT se.superseded AND se.deadline > rota_now_ms()) AS current \
         FROM nodes n LEFT JOIN slots s ON s.holder = n.node WHERE n.node = $1 FOR UPDATE OF n"
    );
    let row = sqlx::query(&sql)
        .bind(node.as_str())
        .bind(session.map(|s| s.id))
        .fetch_optional(&mut *tx)
        .await
        .context("locking the node")?;
    let Some(row) = row else {
        return Ok(None);
    };
    let get = getter("locking the node");
    Ok(Some(Locked {
        record: node_record(&row)?,
        current: row.try_get("current").map_err(&get)?,
        now: row.try_get("now").map_err(&get)?,
    }))
}

/// A node write's outcome (`rota_node_write` in the migrations).
pub(super) enum Written {
    Record(NodeRecord),
    /// The session is not current.
    Fenced,
    /// The node is in this state, not the one the write expected.
    Conflict(String),
    Missing,
    /// An operator's action does not apply to a node in this state.
    NotAllowed(NodeState),
}

pub(super) fn written(row: &PgRow) -> Result<Written> {
    let get = getter("reading a write's outcome");
    let outcome: String = row.try_get("outcome").map_err(&get)?;
    let state = || -> Result<String> { row.try_get("state").map_err(&get) };
    Ok(match outcome.as_str() {
        "ok" => Written::Record(node_record(row)?),
        "fenced" => Written::Fenced,
        "conflict" => Written::Conflict(state()?),
        "missing" => Written::Missing,
        "not_allowed" => Written::NotAllowed(parse("nodes.state", state()?)?),
        _ => {
            return Err(Error::Corrupt {
                column: "rota_node_write.outcome",
                value: outcome,
                reason: "expected ok, fenced, conflict, missing or not_allowed".into(),
            });
        }
    })
}

/// Why a fenced write matched nothing: the session is gone, or the node is elsewhere.
pub(super) async fn refusal(
    conn: &mut PgConnection,
    session: &Session,
    expected: NodeState,
) -> Error {
    match lock_node(conn, &session.node, Some(session)).await {
        Ok(Some(locked)) if locked.current => Error::Conflict {
            node: session.node.clone(),
            expected,
            actual: locked.record.state.to_string(),
        },
        Ok(_) => Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        },
        Err(e) => e,
    }
}

pub(super) fn expect_node(record: Option<NodeRecord>, node: &NodeName) -> Result<NodeRecord> {
    record.ok_or_else(|| Error::NoSuchNode { node: node.clone() })
}
