//! The request query the writes share, and the unit of every duration.

use std::time::Duration;

use rota_core::{NodeName, Process};
use sqlx::PgConnection;
use sqlx::postgres::PgRow;

use crate::error::{Context, Result};

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
