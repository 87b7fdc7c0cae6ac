//! What operators write besides a node's record: a procedure, and the record of each action.

use rota_core::{NodeName, ProcedureSpec};
use sqlx::SqliteConnection;

use crate::actions::{ActionRecord, NewAction};
use crate::error::{Context, Error, Result};
use crate::model::{ProcedureRecord, now_millis};
use crate::rows::procedure_record;

/// Stores a new procedure, or returns the stored one when it is the same.
pub(in crate::sqlite) async fn submit_procedure(
    tx: &mut SqliteConnection,
    spec: &ProcedureSpec,
) -> Result<(ProcedureRecord, bool)> {
    spec.validate()?;
    let json = ProcedureRecord::stored_spec(spec)?;
    let now = now_millis();
    let inserted = sqlx::query(
        "INSERT INTO procedures (name, spec, submitted_at) VALUES (?, ?, ?) \
         ON CONFLICT (name) DO NOTHING RETURNING submitted_at",
    )
    .bind(&spec.name)
    .bind(&json)
    .bind(now)
    .fetch_optional(&mut *tx)
    .await
    .context("submitting a procedure")?;
    if inserted.is_some() {
        let record = ProcedureRecord {
            spec: spec.clone(),
            submitted_at: now,
            script: spec.script.clone(),
        };
        return Ok((record, true));
    }
    let row = sqlx::query("SELECT spec, submitted_at FROM procedures WHERE name = ?")
        .bind(&spec.name)
        .fetch_one(&mut *tx)
        .await
        .context("reading a procedure")?;
    let existing = procedure_record(&row)?;
    if &existing.spec == spec {
        Ok((existing, false))
    } else {
        Err(Error::ProcedureConflict {
            name: spec.name.clone(),
        })
    }
}

pub(in crate::sqlite) async fn record_action(
    conn: &mut SqliteConnection,
    action: &NewAction,
) -> Result<ActionRecord> {
    let at = now_millis();
    sqlx::query(
        "INSERT INTO operator_actions (at, action, node, process, by, reason) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(at)
    .bind(action.action.as_str())
    .bind(action.node.as_ref().map(NodeName::as_str))
    .bind(action.process.as_ref().map(ToString::to_string))
    .bind(&action.by)
    .bind(action.reason.as_deref())
    .execute(&mut *conn)
    .await
    .context("recording an operator action")?;
    Ok(ActionRecord::new(at, action))
}
