//! Slots and the concurrency: a grant is one `rota_acquire_slot` call, a fence renews the
//! session only while its node holds a slot.

use std::time::Duration;

use sqlx::Acquire as _;

use super::PostgresStore;
use super::queries::millis;
use crate::error::{Context, Error, Result};
use crate::model::{Acquire, Session, SlotHolder};
use crate::rows::{concurrency as stored_concurrency, slot_holder, slot_index};
use crate::store::WAKE_ALL;

pub(super) async fn concurrency(store: &PostgresStore) -> Result<Option<u32>> {
    let mut conn = store
        .connections
        .checkout("reading the concurrency")
        .await?;
    let value: Option<String> =
        sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'concurrency'")
            .fetch_optional(&mut *conn)
            .await
            .context("reading the concurrency")?;
    conn.finish();
    value
        .map(|v| stored_concurrency("rota_meta.concurrency", v))
        .transpose()
}

pub(super) async fn set_concurrency(store: &PostgresStore, concurrency: u32) -> Result<()> {
    if !(1..=1000).contains(&concurrency) {
        return Err(Error::Concurrency { value: concurrency });
    }
    let mut conn = store
        .connections
        .checkout("setting the concurrency")
        .await?;
    let mut tx = conn.begin().await.context("setting the concurrency")?;
    sqlx::query(
        "INSERT INTO rota_meta (key, value) VALUES ('concurrency', $1) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .bind(concurrency.to_string())
    .execute(&mut *tx)
    .await
    .context("setting the concurrency")?;
    store
        .commit(tx, WAKE_ALL, "setting the concurrency")
        .await?;
    conn.finish();
    Ok(())
}

pub(super) async fn try_acquire_slot(store: &PostgresStore, session: &Session) -> Result<Acquire> {
    // One call: the queue look, and the grant only for the front.
    let mut conn = store.connections.checkout("acquiring a slot").await?;
    let granted: Option<i64> = sqlx::query_scalar("SELECT rota_acquire_slot($1, $2)")
        .bind(session.node.as_str())
        .bind(session.id)
        .fetch_one(&mut *conn)
        .await
        .context("acquiring a slot")?;
    conn.finish();
    match granted {
        None => Err(Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        }),
        Some(wait) if wait < 0 => Ok(Acquire::Wait {
            changes: wait.unsigned_abs(),
        }),
        Some(slot) => u32::try_from(slot)
            .map(Acquire::Granted)
            .map_err(|e| Error::Corrupt {
                column: "slots.slot",
                value: slot.to_string(),
                reason: e.to_string(),
            }),
    }
}

pub(super) async fn fence(store: &PostgresStore, session: &Session, ttl: Duration) -> Result<u32> {
    let mut conn = store
        .connections
        .checkout("checking slot ownership")
        .await?;
    let slot: Option<i64> = sqlx::query_scalar(
        "UPDATE sessions s SET deadline = rota_now_ms() + $3 FROM nodes n, slots h \
         WHERE s.id = $1 AND n.node = $2 AND n.session_id = s.id AND h.holder = n.node \
           AND NOT s.superseded AND s.deadline > rota_now_ms() \
         RETURNING h.slot",
    )
    .bind(session.id)
    .bind(session.node.as_str())
    .bind(millis(ttl))
    .fetch_optional(&mut *conn)
    .await
    .context("checking slot ownership")?;
    conn.finish();
    slot_index(slot).ok_or_else(|| Error::Fenced {
        node: session.node.clone(),
        session: session.id,
    })
}

pub(super) async fn slot_holders(store: &PostgresStore) -> Result<Vec<SlotHolder>> {
    let mut conn = store.connections.checkout("reading slots").await?;
    let rows = sqlx::query("SELECT slot, holder, acquired_at FROM slots ORDER BY slot")
        .fetch_all(&mut *conn)
        .await
        .context("reading slots")?;
    conn.finish();
    rows.iter().map(slot_holder).collect()
}
