//! The writes, each on a connection inside the `BEGIN IMMEDIATE` transaction the store began
//! for it. One module per concern; the session check they share is here.

use sqlx::SqliteConnection;

use crate::error::{Context, Error, Result};
use crate::model::{Session, now_millis};

mod record;
mod slots;

pub(super) use record::write;
pub(super) use slots::acquire_slot;

/// Refuses the write unless `session` is its node's current, unexpired session.
pub(super) async fn check_session(tx: &mut SqliteConnection, session: &Session) -> Result<()> {
    let current: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
         WHERE n.node = ? AND s.id = ? AND s.superseded = 0 AND s.deadline > ?",
    )
    .bind(session.node.as_str())
    .bind(session.id)
    .bind(now_millis())
    .fetch_optional(&mut *tx)
    .await
    .context("checking the session")?;
    match current {
        Some(_) => Ok(()),
        None => Err(Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        }),
    }
}
