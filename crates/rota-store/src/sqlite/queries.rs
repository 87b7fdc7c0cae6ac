//! The queries both the readers and the writes need: a node, the concurrency, and the queue
//! ahead of a node.

use rota_core::NodeName;
use sqlx::Row;

use crate::error::{Context, Error, Result};
use crate::model::{NodeRecord, now_millis};
use crate::rows::{NODE_COLUMNS, concurrency, node_record};

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
        .map(|v| concurrency("rota_meta.concurrency", v))
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
