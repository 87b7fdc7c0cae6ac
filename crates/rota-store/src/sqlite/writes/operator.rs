//! What operators write: unlock, retry, a request or cancel for a node, a procedure, and the
//! record of each of these actions.

use rota_core::{NodeName, NodeState, ProcedureSpec, Process};
use sqlx::SqliteConnection;

use super::expect_node;
use super::requests::existing_request;
use super::windows::apply_window;
use crate::actions::{ActionRecord, NewAction};
use crate::error::{Context, Error, Result};
use crate::model::{NodeRecord, ProcedureRecord, RequestRecord, WindowChange, now_millis};
use crate::rows::{procedure_record, request_record};
use crate::sqlite::queries::fetch_node;

pub(in crate::sqlite) async fn unlock(
    tx: &mut SqliteConnection,
    node: &NodeName,
    reason: &str,
) -> Result<NodeRecord> {
    atomically!(tx, {
        let record = expect_node(fetch_node(tx, node).await?, node)?;
        if record.slot.is_none() && !record.state.holds_slot() {
            return Err(Error::NotAllowed {
                node: node.clone(),
                state: record.state,
                action: "unlock",
                needs: "holds a slot",
            });
        }
        let now = now_millis();
        let cause = format!("unlocked by an operator: {reason}");
        apply_window(tx, &record, &WindowChange::Cancel { reason: cause }, now).await?;
        sqlx::query(
            "UPDATE nodes SET state = 'idle', since = ?, process = NULL, queued_at = NULL \
             WHERE node = ?",
        )
        .bind(now)
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .context("unlocking the node")?;
        expect_node(fetch_node(tx, node).await?, node)
    })
}

pub(in crate::sqlite) async fn retry(
    tx: &mut SqliteConnection,
    node: &NodeName,
) -> Result<NodeRecord> {
    atomically!(tx, {
        let record = expect_node(fetch_node(tx, node).await?, node)?;
        if record.state != NodeState::Failed {
            return Err(Error::NotAllowed {
                node: node.clone(),
                state: record.state,
                action: "retry",
                needs: "is failed",
            });
        }
        sqlx::query("UPDATE nodes SET state = 'maintaining', since = ? WHERE node = ?")
            .bind(now_millis())
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("retrying the node")?;
        expect_node(fetch_node(tx, node).await?, node)
    })
}

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

/// An operator's request: like `add_request`, for a node the store knows, without a session.
pub(in crate::sqlite) async fn operator_request(
    conn: &mut SqliteConnection,
    node: &NodeName,
    process: &Process,
    source: &str,
) -> Result<(RequestRecord, bool)> {
    let inserted = sqlx::query(
        "INSERT INTO requests (node, process, source, created_at, state) \
         SELECT ?1, ?2, ?3, ?4, 'pending' WHERE EXISTS (SELECT 1 FROM nodes WHERE node = ?1) \
         ON CONFLICT DO NOTHING RETURNING *",
    )
    .bind(node.as_str())
    .bind(process.to_string())
    .bind(source)
    .bind(now_millis())
    .fetch_optional(&mut *conn)
    .await
    .context("recording a request")?;
    if let Some(row) = inserted {
        return Ok((request_record(&row)?, true));
    }
    let existing = existing_request(conn, node, process).await?;
    match existing {
        Some(row) => Ok((request_record(&row)?, false)),
        None => Err(Error::NoSuchNode { node: node.clone() }),
    }
}

pub(in crate::sqlite) async fn operator_cancel(
    conn: &mut SqliteConnection,
    node: &NodeName,
    process: &Process,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE requests SET state = 'canceled', finished_at = ? \
         WHERE node = ? AND process = ? AND state = 'pending'",
    )
    .bind(now_millis())
    .bind(node.as_str())
    .bind(process.to_string())
    .execute(&mut *conn)
    .await
    .context("canceling a request")?;
    Ok(done.rows_affected() > 0)
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
