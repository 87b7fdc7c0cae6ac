//! The queries both the readers and the writes need: a node, its whole record, the
//! concurrency, and a node's turn in the queue.

use rota_core::{Held, Limits, NodeName, Turn, Waiter, schedule};
use sqlx::Row;

use crate::error::{Context, Result};
use crate::model::{NodeOverview, NodeRecord, now_millis};
use crate::rows::{
    NODE_COLUMNS, backoff_record, concurrency, getter, node_record, parse, request_record,
};

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

/// The node's whole record: its row, its open requests and its backoffs.
pub(super) async fn fetch_record(
    conn: &mut sqlx::SqliteConnection,
    node: &NodeName,
) -> Result<Option<NodeOverview>> {
    let Some(record) = fetch_node(conn, node).await? else {
        return Ok(None);
    };
    let requests = sqlx::query(
        "SELECT id, node, process, source, created_at, state FROM requests \
         WHERE node = ? AND state IN ('pending', 'active') ORDER BY id",
    )
    .bind(node.as_str())
    .fetch_all(&mut *conn)
    .await
    .context("reading requests")?;
    let backoffs = sqlx::query(
        "SELECT node, process, until, last_interval_s, cause FROM backoff WHERE node = ? \
         ORDER BY process",
    )
    .bind(node.as_str())
    .fetch_all(&mut *conn)
    .await
    .context("reading backoff")?;
    Ok(Some(NodeOverview {
        record,
        open_requests: requests.iter().map(request_record).collect::<Result<_>>()?,
        backoffs: backoffs.iter().map(backoff_record).collect::<Result<_>>()?,
    }))
}

/// The turn of `node` in the queue as it stands, decided by [`rota_core::schedule`]: the
/// queued nodes that hold no slot (alive when their session is current, blocked when they
/// record a reason), the slots held, and the concurrency. A node that is not queued waits for
/// its own change, counted as one.
pub(super) async fn turn(conn: &mut sqlx::SqliteConnection, node: &NodeName) -> Result<Turn> {
    let concurrency = read_concurrency(conn).await?;
    let now = now_millis();
    let held: Vec<i64> = sqlx::query_scalar("SELECT slot FROM slots")
        .fetch_all(&mut *conn)
        .await
        .context("reading slots")?;
    let rows = sqlx::query(
        "SELECT n.node, n.queued_at, n.blocked_reason IS NOT NULL AS blocked, \
           COALESCE(s.superseded = 0 AND s.deadline > ?1, 0) AS alive \
         FROM nodes n LEFT JOIN sessions s ON s.id = n.session_id \
         WHERE n.state = 'queued' AND n.queued_at IS NOT NULL \
           AND n.node NOT IN (SELECT holder FROM slots)",
    )
    .bind(now)
    .fetch_all(&mut *conn)
    .await
    .context("reading the queue")?;
    let get = getter("reading the queue");
    let queue = rows
        .iter()
        .map(|row| {
            Ok(Waiter {
                node: parse("nodes.node", row.try_get("node").map_err(&get)?)?,
                place: row.try_get("queued_at").map_err(&get)?,
                blocked: row.try_get("blocked").map_err(&get)?,
                alive: row.try_get("alive").map_err(&get)?,
                group: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let held: Vec<Held> = held
        .into_iter()
        .map(|slot| Held {
            slot: u32::try_from(slot).unwrap_or(u32::MAX),
            group: None,
        })
        .collect();
    let schedule = schedule(&queue, &held, &Limits::fleet(concurrency), now);
    Ok(schedule.turn(node).unwrap_or(Turn::Wait { changes: 1 }))
}
