//! Sessions: opening one (which supersedes the node's older ones), heartbeats, closing, and the
//! fence that proves the slot and the session together.

use rota_core::NodeName;
use sqlx::SqliteConnection;

use crate::error::{Context, Error, Result};
use crate::model::{Session, now_millis};
use crate::rows::slot_index;

pub(in crate::sqlite) async fn open_session(
    tx: &mut SqliteConnection,
    node: &NodeName,
    ttl_ms: i64,
) -> Result<Session> {
    atomically!(tx, {
        let now = now_millis();
        sqlx::query("UPDATE sessions SET superseded = 1 WHERE node = ? AND superseded = 0")
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("superseding old sessions")?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO sessions (node, started_at, deadline) VALUES (?, ?, ?) RETURNING id",
        )
        .bind(node.as_str())
        .bind(now)
        .bind(now.saturating_add(ttl_ms))
        .fetch_one(&mut *tx)
        .await
        .context("creating a session")?;
        sqlx::query(
            "INSERT INTO nodes (node, session_id, state, since) VALUES (?, ?, 'idle', ?) \
             ON CONFLICT (node) DO UPDATE SET session_id = excluded.session_id",
        )
        .bind(node.as_str())
        .bind(id)
        .bind(now)
        .execute(&mut *tx)
        .await
        .context("registering the node")?;
        Ok(Session {
            id,
            node: node.clone(),
        })
    })
}

pub(in crate::sqlite) async fn heartbeat(
    tx: &mut SqliteConnection,
    session: &Session,
    ttl_ms: i64,
) -> Result<()> {
    let now = now_millis();
    let extended = sqlx::query(
        "UPDATE sessions SET deadline = ?1 WHERE id = ?2 AND superseded = 0 AND deadline > ?3 \
         AND id = (SELECT session_id FROM nodes WHERE node = ?4)",
    )
    .bind(now.saturating_add(ttl_ms))
    .bind(session.id)
    .bind(now)
    .bind(session.node.as_str())
    .execute(&mut *tx)
    .await
    .context("extending the session")?;
    if extended.rows_affected() > 0 {
        return Ok(());
    }
    let latest: Option<i64> = sqlx::query_scalar(
        "SELECT s.id FROM nodes n JOIN sessions s ON s.id = n.session_id \
         WHERE n.node = ?1 AND s.id = ?2 AND s.superseded = 0",
    )
    .bind(session.node.as_str())
    .bind(session.id)
    .fetch_optional(&mut *tx)
    .await
    .context("checking the session")?;
    Err(Error::renewal_refused(session, latest.is_some()))
}

pub(in crate::sqlite) async fn close_session(
    tx: &mut SqliteConnection,
    session: &Session,
) -> Result<()> {
    let now = now_millis();
    sqlx::query("UPDATE sessions SET deadline = ? WHERE id = ? AND deadline > ?")
        .bind(now)
        .bind(session.id)
        .bind(now)
        .execute(&mut *tx)
        .await
        .context("closing the session")?;
    Ok(())
}

/// One statement: extends the session only while it is current and its node holds a slot.
pub(in crate::sqlite) async fn fence(
    tx: &mut SqliteConnection,
    session: &Session,
    ttl_ms: i64,
) -> Result<u32> {
    let now = now_millis();
    let slot: Option<Option<i64>> = sqlx::query_scalar(
        "UPDATE sessions SET deadline = ?1 WHERE id = ?2 AND superseded = 0 AND deadline > ?3 \
         AND id = (SELECT session_id FROM nodes WHERE node = ?4) \
         AND EXISTS (SELECT 1 FROM slots WHERE holder = ?4) \
         RETURNING (SELECT slot FROM slots WHERE holder = ?4)",
    )
    .bind(now.saturating_add(ttl_ms))
    .bind(session.id)
    .bind(now)
    .bind(session.node.as_str())
    .fetch_optional(&mut *tx)
    .await
    .context("checking slot ownership")?;
    slot_index(slot.flatten()).ok_or_else(|| Error::Fenced {
        node: session.node.clone(),
        session: session.id,
    })
}
