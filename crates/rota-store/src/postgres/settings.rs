//! The fleet's settings: the concurrency, the pause and the start of the rollout, each a key
//! of `rota_meta`.

use sqlx::Acquire as _;

use super::PostgresStore;
use crate::error::{Context, Result};
use crate::model::{Pause, Setting};
use crate::store::WAKE_ALL;

/// `Store::set`, in one transaction; times are the database's clock, like every history
/// entry's.
pub(super) async fn set(store: &PostgresStore, setting: &Setting) -> Result<Option<Pause>> {
    const CONTEXT: &str = "changing the settings";
    const UPSERT: &str = "INSERT INTO rota_meta (key, value) VALUES ($1, $2) \
                          ON CONFLICT (key) DO UPDATE SET value = excluded.value";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let mut tx = conn.begin().await.context(CONTEXT)?;
    let (answer, wakes) = match setting {
        Setting::Concurrency(concurrency) => {
            sqlx::query(UPSERT)
                .bind("concurrency")
                .bind(concurrency.to_string())
                .execute(&mut *tx)
                .await
                .context(CONTEXT)?;
            // More slots may let every waiter go on.
            (None, WAKE_ALL)
        }
        Setting::Pause { reason } => {
            let since = sqlx::query_scalar("SELECT rota_now_ms()")
                .fetch_one(&mut *tx)
                .await
                .context(CONTEXT)?;
            let pause = Pause {
                reason: reason.clone(),
                since,
            };
            sqlx::query(UPSERT)
                .bind("paused")
                .bind(pause.encode())
                .execute(&mut *tx)
                .await
                .context(CONTEXT)?;
            (Some(pause), 0)
        }
        Setting::Resume => {
            // A new rollout starts now, before the pause is lifted.
            sqlx::query(
                "INSERT INTO rota_meta (key, value) VALUES ('resumed_at', rota_now_ms()::TEXT) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .execute(&mut *tx)
            .await
            .context(CONTEXT)?;
            let lifted: Option<String> =
                sqlx::query_scalar("DELETE FROM rota_meta WHERE key = 'paused' RETURNING value")
                    .fetch_optional(&mut *tx)
                    .await
                    .context(CONTEXT)?;
            // Every waiter may go on now.
            (
                Pause::decode("rota_meta.paused", lifted.as_deref())?,
                WAKE_ALL,
            )
        }
    };
    store.commit(tx, wakes, CONTEXT).await?;
    conn.finish();
    Ok(answer)
}
