//! Slots: which one a node holds, and taking one by the queue's rule (rota-core's
//! [`schedule`](rota_core::schedule), read and applied in the write transaction).

use rota_core::{NodeName, Turn};
use sqlx::SqliteConnection;

use super::check_session;
use crate::error::{Context, Result};
use crate::model::{Acquire, Session, now_millis};
use crate::rows::slot_index;
use crate::sqlite::queries::turn;

async fn held_slot(tx: &mut SqliteConnection, node: &NodeName) -> Result<Option<u32>> {
    let slot: Option<i64> = sqlx::query_scalar("SELECT slot FROM slots WHERE holder = ?")
        .bind(node.as_str())
        .fetch_optional(&mut *tx)
        .await
        .context("reading the node's slot")?;
    Ok(slot_index(slot))
}

pub(in crate::sqlite) async fn acquire_slot(
    tx: &mut SqliteConnection,
    session: &Session,
) -> Result<Acquire> {
    check_session(tx, session).await?;
    if let Some(slot) = held_slot(tx, &session.node).await? {
        return Ok(Acquire::Granted(slot));
    }
    let slot = match turn(tx, &session.node).await? {
        Turn::Granted(slot) => slot,
        Turn::Wait { changes } => return Ok(Acquire::Wait { changes }),
    };
    sqlx::query("INSERT INTO slots (slot, holder, acquired_at) VALUES (?, ?, ?)")
        .bind(i64::from(slot))
        .bind(session.node.as_str())
        .bind(now_millis())
        .execute(&mut *tx)
        .await
        .context("taking a slot")?;
    Ok(Acquire::Granted(slot))
}
