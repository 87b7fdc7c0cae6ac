//! A node's own requests: adding, canceling, completing one, and what blocks the node.

use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use sqlx::SqliteConnection;

use super::slots::held_slot;
use super::windows::{HistoryRow, append_history, record_backoff};
use super::{check_session, refusal};
use crate::error::{Context, Error, Result};
use crate::model::{Blocked, Outcome, RequestRecord, Session, now_millis};
use crate::rows::request_record;

/// The request that stands for `process` on `node`: its open one, or for a procedure any one
/// ever made (a procedure's request is made once per node).
pub(super) async fn existing_request(
    conn: &mut SqliteConnection,
    node: &NodeName,
    process: &Process,
) -> Result<Option<sqlx::sqlite::SqliteRow>> {
    sqlx::query(
        "SELECT * FROM requests WHERE node = ? AND process = ? \
         AND (state IN ('pending', 'active') OR process LIKE 'mop/%') ORDER BY id DESC LIMIT 1",
    )
    .bind(node.as_str())
    .bind(process.to_string())
    .fetch_optional(&mut *conn)
    .await
    .context("reading requests")
}

/// One statement: fenced by the session, and a no-op when the node already has an open
/// request for the process (the partial unique index).
pub(in crate::sqlite) async fn add_request(
    conn: &mut SqliteConnection,
    session: &Session,
    process: &Process,
    source: &str,
) -> Result<(RequestRecord, bool)> {
    let now = now_millis();
    let inserted = sqlx::query(
        "INSERT INTO requests (node, process, source, created_at, state) \
         SELECT ?1, ?2, ?3, ?4, 'pending' WHERE EXISTS ( \
           SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
           WHERE n.node = ?1 AND s.id = ?5 AND s.superseded = 0 AND s.deadline > ?4) \
         ON CONFLICT DO NOTHING RETURNING *",
    )
    .bind(session.node.as_str())
    .bind(process.to_string())
    .bind(source)
    .bind(now)
    .bind(session.id)
    .fetch_optional(&mut *conn)
    .await
    .context("recording a request")?;
    if let Some(row) = inserted {
        return Ok((request_record(&row)?, true));
    }
    let existing = existing_request(conn, &session.node, process).await?;
    match existing {
        Some(row) => {
            // Joining an open request still needs a current session.
            let current = refusal(conn, session, NodeState::Idle).await;
            if matches!(current, Error::Fenced { .. }) {
                return Err(current);
            }
            Ok((request_record(&row)?, false))
        }
        None => Err(refusal(conn, session, NodeState::Idle).await),
    }
}

pub(in crate::sqlite) async fn cancel_request(
    tx: &mut SqliteConnection,
    session: &Session,
    process: &Process,
) -> Result<bool> {
    atomically!(tx, {
        check_session(tx, session).await?;
        let done = sqlx::query(
            "UPDATE requests SET state = 'canceled', finished_at = ? \
             WHERE node = ? AND process = ? AND state = 'pending'",
        )
        .bind(now_millis())
        .bind(session.node.as_str())
        .bind(process.to_string())
        .execute(&mut *tx)
        .await
        .context("canceling a request")?;
        Ok(done.rows_affected() > 0)
    })
}

pub(in crate::sqlite) async fn set_blocked(
    tx: &mut SqliteConnection,
    session: &Session,
    blocked: Option<&Blocked>,
) -> Result<bool> {
    atomically!(tx, {
        check_session(tx, session).await?;
        let done = sqlx::query(
            "UPDATE nodes SET blocked_reason = ?1, blocked_since = ?2 \
             WHERE node = ?3 AND blocked_reason IS NOT ?1",
        )
        .bind(blocked.map(|b| b.reason.as_str()))
        .bind(blocked.map(|b| b.since))
        .bind(session.node.as_str())
        .execute(&mut *tx)
        .await
        .context("recording why the node is blocked")?;
        Ok(done.rows_affected() > 0)
    })
}

pub(in crate::sqlite) async fn complete_request(
    tx: &mut SqliteConnection,
    session: &Session,
    process: &Process,
    outcome: &Outcome,
) -> Result<RequestRecord> {
    atomically!(tx, {
        check_session(tx, session).await?;
        let node = &session.node;
        let process_name = process.to_string();
        let now = now_millis();
        let (state, event, cause) = match outcome {
            Outcome::Succeeded { detail } => ("done", HistoryEvent::Finished, detail.as_deref()),
            Outcome::Failed { cause, .. } => ("active", HistoryEvent::Failed, Some(cause.as_str())),
        };
        if matches!(outcome, Outcome::Failed { .. }) {
            // Fail closed in the same write: a failure recorded without it would let a
            // restarted agent start the next attempt instead of waiting for an operator.
            let failed = sqlx::query(
                "UPDATE nodes SET state = 'failed', since = ? WHERE node = ? AND state = 'maintaining'",
            )
            .bind(now)
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("failing the node")?;
            if failed.rows_affected() == 0 {
                return Err(refusal(tx, session, NodeState::Maintaining).await);
            }
        }
        let finished_at = (state == "done").then_some(now);
        let row = sqlx::query(
            "UPDATE requests SET state = ?, finished_at = ? \
             WHERE node = ? AND process = ? AND state = 'active' RETURNING *",
        )
        .bind(state)
        .bind(finished_at)
        .bind(node.as_str())
        .bind(&process_name)
        .fetch_optional(&mut *tx)
        .await
        .context("completing a request")?
        .ok_or_else(|| Error::NotActive {
            node: node.clone(),
            process: process.clone(),
        })?;
        match outcome {
            Outcome::Succeeded { .. } => {
                sqlx::query("DELETE FROM backoff WHERE node = ? AND process = ?")
                    .bind(node.as_str())
                    .bind(&process_name)
                    .execute(&mut *tx)
                    .await
                    .context("clearing backoff")?;
            }
            Outcome::Failed { cause, policy } => {
                record_backoff(tx, node, &process_name, policy, cause, now).await?;
                sqlx::query("UPDATE nodes SET last_result = ? WHERE node = ?")
                    .bind(format!("failed: {cause}"))
                    .bind(node.as_str())
                    .execute(&mut *tx)
                    .await
                    .context("recording the result")?;
            }
        }
        let slot = held_slot(tx, node).await?;
        append_history(
            tx,
            HistoryRow {
                node,
                process: &process_name,
                event,
                at: now,
                cause,
                slot,
                released: false,
            },
        )
        .await?;
        request_record(&row)
    })
}
