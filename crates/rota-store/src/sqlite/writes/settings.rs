//! The fleet's settings: the concurrency and the meta keys (pause, resume).

use sqlx::SqliteConnection;

use crate::error::{Context, Result};

pub(in crate::sqlite) async fn set_concurrency(
    tx: &mut SqliteConnection,
    concurrency: u32,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO rota_meta (key, value) VALUES ('concurrency', ?) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .bind(concurrency.to_string())
    .execute(&mut *tx)
    .await
    .context("setting the concurrency")?;
    Ok(())
}

pub(in crate::sqlite) async fn set_meta(
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
