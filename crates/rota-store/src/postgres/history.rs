//! What happened and what waits: history and backoff.

use std::time::Duration;

use rota_core::{HistoryEvent, NodeName};
use sqlx::Row;

use super::PostgresStore;
use super::rows::{getter, parse, slot_index};
use crate::error::{Context, Result};
use crate::model::{BackoffRecord, HistoryEntry, HistoryFilter};

pub(super) async fn backoffs(store: &PostgresStore, node: &NodeName) -> Result<Vec<BackoffRecord>> {
    let mut conn = store.connections.lease("reading backoff").await?;
    let rows = sqlx::query(
        "SELECT node, process, until, last_interval_s, cause FROM backoff WHERE node = $1 \
         ORDER BY process",
    )
    .bind(node.as_str())
    .fetch_all(&mut *conn)
    .await
    .context("reading backoff")?;
    conn.finish();
    rows.iter()
        .map(|row| {
            let get = getter("reading backoff");
            let secs: i64 = row.try_get("last_interval_s").map_err(&get)?;
            Ok(BackoffRecord {
                node: parse("backoff.node", row.try_get("node").map_err(&get)?)?,
                process: parse("backoff.process", row.try_get("process").map_err(&get)?)?,
                until: row.try_get("until").map_err(&get)?,
                last_interval: Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
                cause: row.try_get("cause").map_err(&get)?,
            })
        })
        .collect()
}

pub(super) async fn history(
    store: &PostgresStore,
    filter: &HistoryFilter,
) -> Result<Vec<HistoryEntry>> {
    let mut conn = store.connections.lease("reading history").await?;
    let rows = sqlx::query(
        "SELECT id, node, process, event, at, cause, slot, released FROM history \
         WHERE ($1::TEXT IS NULL OR node = $1) AND ($2::TEXT IS NULL OR process = $2) \
         AND ($3::TEXT IS NULL OR event = $3) AND ($4::BIGINT IS NULL OR at >= $4) \
         AND ($5::BIGINT IS NULL OR at <= $5) ORDER BY id",
    )
    .bind(filter.node.as_ref().map(NodeName::as_str))
    .bind(filter.process.as_ref().map(ToString::to_string))
    .bind(filter.event.map(HistoryEvent::as_str))
    .bind(filter.since)
    .bind(filter.until)
    .fetch_all(&mut *conn)
    .await
    .context("reading history")?;
    conn.finish();
    rows.iter()
        .map(|row| {
            let get = getter("reading history");
            Ok(HistoryEntry {
                id: row.try_get("id").map_err(&get)?,
                node: parse("history.node", row.try_get("node").map_err(&get)?)?,
                process: parse("history.process", row.try_get("process").map_err(&get)?)?,
                event: parse("history.event", row.try_get("event").map_err(&get)?)?,
                at: row.try_get("at").map_err(&get)?,
                cause: row.try_get("cause").map_err(&get)?,
                slot: slot_index(row.try_get("slot").map_err(&get)?),
                released: row.try_get("released").map_err(&get)?,
            })
        })
        .collect()
}
