//! An operator's actions on a node, without a session: unlock, retry, request and cancel.

use rota_core::{NodeName, Process};
use sqlx::Acquire as _;

use super::PostgresStore;
use super::changes::{CHANNEL, OPERATOR_WAKES};
use super::queries::{
    Locked, REQUEST_COLUMNS, Written, existing_request, expect_node, fetch_node, lock_node, written,
};
use super::windows::{window_result, window_write};
use crate::error::{Context, Error, Result};
use crate::model::{NodeRecord, RequestRecord, RequestState, WindowChange};
use crate::rows::request_record;

pub(super) async fn unlock(
    store: &PostgresStore,
    node: &NodeName,
    reason: &str,
) -> Result<NodeRecord> {
    let mut conn = store.connections.checkout("unlocking a node").await?;
    let mut tx = conn.begin().await.context("unlocking a node")?;
    let locked = lock_node(&mut tx, node, None).await?;
    let Locked { record, now, .. } =
        locked.ok_or_else(|| Error::NoSuchNode { node: node.clone() })?;
    if record.slot.is_none() && !record.state.holds_slot() {
        return Err(Error::NotAllowed {
            node: node.clone(),
            state: record.state,
            action: "unlock",
            needs: "holds a slot",
        });
    }
    let window = WindowChange::Cancel {
        reason: format!("unlocked by an operator: {reason}"),
    };
    if let Some(w) = window_write(&window) {
        let fallback = record
            .process
            .as_ref()
            .map_or_else(|| Process::Reboot.to_string(), ToString::to_string);
        sqlx::query(
            "SELECT rota_write_window($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, NULL, NULL, \
             $10)",
        )
        .bind(node.as_str())
        .bind(record.slot.map(i64::from))
        .bind(w.from.as_str())
        .bind(w.to.map(RequestState::as_str))
        .bind(w.event.as_str())
        .bind(w.cause.as_deref())
        .bind(w.fallback.then_some(fallback))
        .bind(w.clears_backoff)
        .bind(w.releases)
        .bind(now)
        .execute(&mut *tx)
        .await
        .context("recording the window")?;
    }
    sqlx::query(
        "UPDATE nodes SET state = 'idle', since = $1, process = NULL, queued_at = NULL, \
         last_result = $2 WHERE node = $3",
    )
    .bind(now)
    .bind(window_result(&window))
    .bind(node.as_str())
    .execute(&mut *tx)
    .await
    .context("unlocking the node")?;
    let record = expect_node(fetch_node(&mut tx, node).await?, node)?;
    store.commit(tx, 1, "unlocking a node").await?;
    conn.finish();
    Ok(record)
}

pub(super) async fn retry(store: &PostgresStore, node: &NodeName) -> Result<NodeRecord> {
    let mut conn = store.connections.checkout("retrying a node").await?;
    let row = sqlx::query("SELECT * FROM rota_retry($1, $2, $3)")
        .bind(node.as_str())
        .bind(CHANNEL)
        .bind(store.payload(1))
        .fetch_one(&mut *conn)
        .await
        .context("retrying a node")?;
    conn.finish();
    match written(&row)? {
        Written::Record(record) => {
            store.woke(1);
            Ok(record)
        }
        Written::NotAllowed(state) => Err(Error::NotAllowed {
            node: node.clone(),
            state,
            action: "retry",
            needs: "is failed",
        }),
        // rota_retry refuses only a missing node or one that is not failed.
        _ => Err(Error::NoSuchNode { node: node.clone() }),
    }
}

pub(super) async fn request(
    store: &PostgresStore,
    node: &NodeName,
    process: &Process,
    source: &str,
) -> Result<(RequestRecord, bool)> {
    const CONTEXT: &str = "recording a request";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let mut tx = conn.begin().await.context(CONTEXT)?;
    let inserted = sqlx::query(&format!(
        "INSERT INTO requests (node, process, source, created_at, state) \
         SELECT $1, $2, $3, rota_now_ms(), 'pending' \
         WHERE EXISTS (SELECT 1 FROM nodes WHERE node = $1) \
         ON CONFLICT DO NOTHING RETURNING {REQUEST_COLUMNS}"
    ))
    .bind(node.as_str())
    .bind(process.to_string())
    .bind(source)
    .fetch_optional(&mut *tx)
    .await
    .context(CONTEXT)?;
    let wakes = if inserted.is_some() {
        OPERATOR_WAKES
    } else {
        0
    };
    store.commit(tx, wakes, CONTEXT).await?;
    if let Some(row) = inserted {
        conn.finish();
        return Ok((request_record(&row)?, true));
    }
    let existing =
        existing_request(conn.connection().await.context(CONTEXT)?, node, process).await?;
    conn.finish();
    match existing {
        Some(row) => Ok((request_record(&row)?, false)),
        None => Err(Error::NoSuchNode { node: node.clone() }),
    }
}

pub(super) async fn cancel(
    store: &PostgresStore,
    node: &NodeName,
    process: &Process,
) -> Result<bool> {
    const CONTEXT: &str = "canceling a request";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let mut tx = conn.begin().await.context(CONTEXT)?;
    let done = sqlx::query(
        "UPDATE requests SET state = 'canceled', finished_at = rota_now_ms() \
         WHERE node = $1 AND process = $2 AND state = 'pending'",
    )
    .bind(node.as_str())
    .bind(process.to_string())
    .execute(&mut *tx)
    .await
    .context(CONTEXT)?;
    let canceled = done.rows_affected() > 0;
    let wakes = if canceled { OPERATOR_WAKES } else { 0 };
    store.commit(tx, wakes, CONTEXT).await?;
    conn.finish();
    Ok(canceled)
}
