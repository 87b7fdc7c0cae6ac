//! Sessions: opened in a transaction that supersedes the node's last one under its row lock,
//! renewed only while current and unexpired.

use std::time::Duration;

use rota_core::NodeName;
use sqlx::Acquire as _;

use super::PostgresStore;
use super::queries::millis;
use crate::error::{Context, Error, Result};
use crate::model::Session;

pub(super) async fn open_session(
    store: &PostgresStore,
    node: &NodeName,
    ttl: Duration,
) -> Result<Session> {
    const CONTEXT: &str = "opening a session";
    // A new session writes the node's row.
    store.forget(node);
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let mut tx = conn.begin().await.context(CONTEXT)?;
    // The node's row first, as every write of the node locks it, so that a write of the old
    // session either commits before the new session exists or sees it and is refused; the
    // next statement's snapshot, taken under the lock, sees every session opened before.
    sqlx::query("SELECT 1 FROM nodes WHERE node = $1 FOR UPDATE")
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .context(CONTEXT)?;
    // Every earlier session is superseded, and the node (idle if new) points at the new one.
    let id: i64 = sqlx::query_scalar(
        "WITH superseded AS ( \
           UPDATE sessions SET superseded = TRUE WHERE node = $1 AND NOT superseded \
         ), opened AS ( \
           INSERT INTO sessions (node, started_at, deadline) \
           SELECT $1, t.now, t.now + $2 FROM (SELECT rota_now_ms() AS now) t \
           RETURNING id, started_at \
         ), pointed AS ( \
           INSERT INTO nodes (node, session_id, state, since) \
           SELECT $1, id, 'idle', started_at FROM opened \
           ON CONFLICT (node) DO UPDATE SET session_id = excluded.session_id \
         ) SELECT id FROM opened",
    )
    .bind(node.as_str())
    .bind(millis(ttl))
    .fetch_one(&mut *tx)
    .await
    .context(CONTEXT)?;
    tx.commit().await.context(CONTEXT)?;
    conn.finish();
    Ok(Session {
        id,
        node: node.clone(),
    })
}

pub(super) async fn heartbeat(
    store: &PostgresStore,
    session: &Session,
    ttl: Duration,
) -> Result<()> {
    let mut conn = store.connections.checkout("extending the session").await?;
    let extended = sqlx::query(
        "UPDATE sessions s SET deadline = rota_now_ms() + $3 FROM nodes n \
         WHERE s.id = $1 AND n.node = $2 AND n.session_id = s.id AND NOT s.superseded \
           AND s.deadline > rota_now_ms()",
    )
    .bind(session.id)
    .bind(session.node.as_str())
    .bind(millis(ttl))
    .execute(&mut *conn)
    .await
    .context("extending the session")?;
    if extended.rows_affected() > 0 {
        conn.finish();
        return Ok(());
    }
    let latest: Option<i64> = sqlx::query_scalar(
        "SELECT s.id FROM nodes n JOIN sessions s ON s.id = n.session_id \
         WHERE n.node = $1 AND s.id = $2 AND NOT s.superseded",
    )
    .bind(session.node.as_str())
    .bind(session.id)
    .fetch_optional(&mut *conn)
    .await
    .context("checking the session")?;
    conn.finish();
    Err(Error::renewal_refused(session, latest.is_some()))
}

pub(super) async fn close_session(store: &PostgresStore, session: &Session) -> Result<()> {
    let mut conn = store.connections.checkout("closing the session").await?;
    sqlx::query(
        "UPDATE sessions SET deadline = rota_now_ms() \
         WHERE id = $1 AND deadline > rota_now_ms()",
    )
    .bind(session.id)
    .execute(&mut *conn)
    .await
    .context("closing the session")?;
    conn.finish();
    Ok(())
}
