//! Procedures: stored once under their name, and never changed.

use rota_core::ProcedureSpec;
use sqlx::Acquire as _;

use super::PostgresStore;
use super::changes::OPERATOR_WAKES;
use crate::error::{Context, Error, Result};
use crate::model::ProcedureRecord;
use crate::rows::procedure_record;

pub(super) async fn submit_procedure(
    store: &PostgresStore,
    spec: &ProcedureSpec,
) -> Result<(ProcedureRecord, bool)> {
    spec.validate()?;
    let json = ProcedureRecord::stored_spec(spec)?;
    const CONTEXT: &str = "submitting a procedure";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let mut tx = conn.begin().await.context(CONTEXT)?;
    let inserted = sqlx::query(
        "INSERT INTO procedures (name, spec, submitted_at) VALUES ($1, $2, rota_now_ms()) \
         ON CONFLICT (name) DO NOTHING RETURNING spec, submitted_at",
    )
    .bind(&spec.name)
    .bind(&json)
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
        return Ok((procedure_record(&row)?, true));
    }
    let row = sqlx::query("SELECT spec, submitted_at FROM procedures WHERE name = $1")
        .bind(&spec.name)
        .fetch_one(&mut *conn)
        .await
        .context(CONTEXT)?;
    conn.finish();
    let existing = procedure_record(&row)?;
    if &existing.spec == spec {
        Ok((existing, false))
    } else {
        Err(Error::ProcedureConflict {
            name: spec.name.clone(),
        })
    }
}
