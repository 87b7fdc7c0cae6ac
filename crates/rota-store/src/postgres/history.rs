//! What happened and what waits: history and backoff.

use rota_core::{HistoryEvent, NodeName};

use super::PostgresStore;
use crate::error::{Context, Result};
use crate::model::{BackoffRecord, HistoryEntry, HistoryFilter, StepRecord};
use crate::rows::{backoff_record, history_entry, step_record};

pub(super) async fn backoffs(store: &PostgresStore, node: &NodeName) -> Result<Vec<BackoffRecord>> {
    let mut conn = store.connections.checkout("reading backoff").await?;
    let rows = sqlx::query(
        "SELECT node, process, until, last_interval_s, cause FROM backoff WHERE node = $1 \
         ORDER BY process",
    )
    .bind(node.as_str())
    .fetch_all(&mut *conn)
    .await
    .context("reading backoff")?;
    conn.finish();
    rows.iter().map(backoff_record).collect()
}

pub(super) async fn steps(
    store: &PostgresStore,
    filter: &HistoryFilter,
) -> Result<Vec<StepRecord>> {
    let mut conn = store.connections.checkout("reading steps").await?;
    let rows = sqlx::query(
        "SELECT node, state, at FROM steps WHERE ($1::TEXT IS NULL OR node = $1) \
         AND ($2::BIGINT IS NULL OR at >= $2) AND ($3::BIGINT IS NULL OR at <= $3) ORDER BY id",
    )
    .bind(filter.node.as_ref().map(NodeName::as_str))
    .bind(filter.since)
    .bind(filter.until)
    .fetch_all(&mut *conn)
    .await
    .context("reading steps")?;
    conn.finish();
    rows.iter().map(step_record).collect()
}

pub(super) async fn history(
    store: &PostgresStore,
    filter: &HistoryFilter,
) -> Result<Vec<HistoryEntry>> {
    let mut conn = store.connections.checkout("reading history").await?;
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
    rows.iter().map(history_entry).collect()
}
