//! What operators write besides a node's record: a procedure, and the audit record of each
//! command.

use rota_core::{NodeName, ProcedureSpec};
use sqlx::SqliteConnection;

use crate::audit::{AuditRecord, NewAuditRecord};
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

pub(in crate::sqlite) async fn record_audit(
    conn: &mut SqliteConnection,
    record: &NewAuditRecord,
) -> Result<AuditRecord> {
    let at = now_millis();
    sqlx::query(
        "INSERT INTO audit_records (at, command, node, process, by, reason) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(at)
    .bind(record.command.as_str())
    .bind(record.node.as_ref().map(NodeName::as_str))
    .bind(record.process.as_ref().map(ToString::to_string))
    .bind(&record.by)
    .bind(record.reason.as_deref())
    .execute(&mut *conn)
    .await
    .context("writing an audit record")?;
    Ok(AuditRecord::new(at, record))
}
