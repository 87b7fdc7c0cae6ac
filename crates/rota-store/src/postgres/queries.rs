//! The node and request queries the writes and reads share.

use std::time::Duration;

use rota_core::{NodeName, Process};
use sqlx::PgConnection;
use sqlx::postgres::PgRow;

use crate::error::{Context, Result};
use crate::model::NodeRecord;
use crate::rows::{NODE_COLUMNS, node_record};

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
