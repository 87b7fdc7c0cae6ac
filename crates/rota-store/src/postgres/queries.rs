//! The node and request queries the writes share, and the outcome of a one-call write.

use std::time::Duration;

use rota_core::{NodeName, NodeState, Process};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::error::{Context, Error, Result};
use crate::model::{Millis, NodeRecord, Session};
use crate::rows::{NODE_COLUMNS, getter, node_record, parse};

pub(super) fn millis(d: Duration) -> i64 {
    // Capped far below i64::MAX so that `now + ttl` cannot overflow in SQL.
    i64::try_from(d.as_millis())
        .unwrap_or(i64::MAX)
        .min(1 << 52)
}

pub(super) const REQUEST_COLUMNS: &str = "id, node, process, source, created_at, state";

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
