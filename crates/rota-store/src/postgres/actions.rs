//! The operators' audit trail: one row per operator action.

use rota_core::NodeName;

use super::PostgresStore;
use crate::actions::{ActionRecord, NewAction};
use crate::error::{Context, Result};
use crate::rows::action_record;

pub(super) async fn record(store: &PostgresStore, action: &NewAction) -> Result<ActionRecord> {
    const CONTEXT: &str = "recording an operator action";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let row = sqlx::query(
        "INSERT INTO operator_actions (at, action, node, process, by, reason) \
         VALUES (rota_now_ms(), $1, $2, $3, $4, $5) \
         RETURNING at, action, node, process, by, reason",
    )
    .bind(action.action.as_str())
    .bind(action.node.as_ref().map(NodeName::as_str))
    .bind(action.process.as_ref().map(ToString::to_string))
    .bind(&action.by)
    .bind(action.reason.as_deref())
    .fetch_one(&mut *conn)
    .await
    .context(CONTEXT)?;
    conn.finish();
    action_record(&row)
}
