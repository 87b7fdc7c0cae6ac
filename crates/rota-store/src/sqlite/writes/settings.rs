//! The fleet's settings: the concurrency, the pause and the start of the rollout, each a key
//! of `rota_meta`.

use sqlx::SqliteConnection;

use crate::error::{Context, Result};
use crate::model::{Pause, Setting, now_millis};
use crate::sqlite::{CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY};

/// `Store::set`, in the writer's transaction: a resume records its rollout and lifts the pause
/// in one commit. Returns the pause set or lifted.
pub(in crate::sqlite) async fn set(
    tx: &mut SqliteConnection,
    setting: &Setting,
) -> Result<Option<Pause>> {
    match setting {
        Setting::Concurrency(concurrency) => {
            set_meta(tx, CONCURRENCY_KEY, Some(&concurrency.to_string())).await?;
            Ok(None)
        }
        Setting::Pause { reason } => {
            let pause = Pause {
                reason: reason.clone(),
                since: now_millis(),
            };
            set_meta(tx, PAUSED_KEY, Some(&pause.encode())).await?;
            Ok(Some(pause))
        }
        Setting::Resume => {
            set_meta(tx, RESUMED_KEY, Some(&now_millis().to_string())).await?;
            let lifted = set_meta(tx, PAUSED_KEY, None).await?;
            Pause::decode("rota_meta.paused", lifted.as_deref())
        }
    }
}

/// Sets (or with `None` removes) one of the store's settings; returns the previous value.
async fn set_meta(
    tx: &mut SqliteConnection,
    key: &str,
    value: Option<&str>,
) -> Result<Option<String>> {
    let previous: Option<String> = sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = ?")
        .bind(key)
        .fetch_optional(&mut *tx)
        .await
        .context("reading a setting")?;
    match value {
        Some(value) => sqlx::query(
            "INSERT INTO rota_meta (key, value) VALUES (?, ?) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(value),
        None => sqlx::query("DELETE FROM rota_meta WHERE key = ?").bind(key),
    }
    .execute(&mut *tx)
    .await
    .context("writing a setting")?;
    Ok(previous)
}
