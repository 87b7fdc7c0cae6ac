//! The operators' audit trail: one row per operator command.

use rota_core::NodeName;

use super::PostgresStore;
use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::{Context, Result};
use crate::rows::audit_record;

pub(super) async fn record(store: &PostgresStore, record: &NewAuditRecord) -> Result<AuditRecord> {
    const CONTEXT: &str = "writing an audit record";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let row = sqlx::query(
        "INSERT INTO audit_records (at, command, node, process, by, reason) \
         VALUES (rota_now_ms(), $1, $2, $3, $4, $5) \
         RETURNING at, command, node, process, by, reason",
    )
    .bind(record.command.as_str())
    .bind(record.node.as_ref().map(NodeName::as_str))
    .bind(record.process.as_ref().map(ToString::to_string))
    .bind(&record.by)
    .bind(record.reason.as_deref())
    .fetch_one(&mut *conn)
    .await
    .context(CONTEXT)?;
    conn.finish();
    audit_record(&row)
}
