//! The fleet's pause, and when the rollout was last resumed.

use sqlx::Acquire as _;

use super::PostgresStore;
use crate::error::{Context, Result};
use crate::model::{Millis, Pause, decode_resumed_at};
use crate::store::WAKE_ALL;

pub(super) async fn pause(store: &PostgresStore, reason: &str) -> Result<Pause> {
    const CONTEXT: &str = "pausing the fleet";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let since: Millis = sqlx::query_scalar("SELECT rota_now_ms()")
        .fetch_one(&mut *conn)
        .await
        .context(CONTEXT)?;
    let pause = Pause {
        reason: reason.to_string(),
        since,
    };
    sqlx::query(
        "INSERT INTO rota_meta (key, value) VALUES ('paused', $1) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .bind(pause.encode())
    .execute(&mut *conn)
    .await
    .context(CONTEXT)?;
    conn.finish();
    Ok(pause)
}

pub(super) async fn resume(store: &PostgresStore) -> Result<Option<Pause>> {
    const CONTEXT: &str = "resuming the fleet";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let mut tx = conn.begin().await.context(CONTEXT)?;
    // A new rollout starts now, by the database's clock like every history entry.
    sqlx::query(
        "INSERT INTO rota_meta (key, value) VALUES ('resumed_at', rota_now_ms()::TEXT) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .execute(&mut *tx)
    .await
    .context(CONTEXT)?;
    let value: Option<String> =
        sqlx::query_scalar("DELETE FROM rota_meta WHERE key = 'paused' RETURNING value")
            .fetch_optional(&mut *tx)
            .await
            .context(CONTEXT)?;
    // Every waiter may go on now.
    store.commit(tx, WAKE_ALL, CONTEXT).await?;
    conn.finish();
    Pause::decode("rota_meta.paused", value.as_deref())
}

pub(super) async fn paused(store: &PostgresStore) -> Result<Option<Pause>> {
    let mut conn = store.connections.checkout("reading the pause").await?;
    let value: Option<String> =
        sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'paused'")
            .fetch_optional(&mut *conn)
            .await
            .context("reading the pause")?;
    conn.finish();
    Pause::decode("rota_meta.paused", value.as_deref())
}

pub(super) async fn resumed_at(store: &PostgresStore) -> Result<Option<Millis>> {
    const CONTEXT: &str = "reading the last resume";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let value: Option<String> =
        sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'resumed_at'")
            .fetch_optional(&mut *conn)
            .await
            .context(CONTEXT)?;
    conn.finish();
    decode_resumed_at("rota_meta.resumed_at", value.as_deref())
}
