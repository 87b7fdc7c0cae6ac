//! An agent's requests: added and canceled under its session, completed one by one inside
//! its window.

use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use sqlx::{Acquire as _, Row};

use super::PostgresStore;
use super::queries::{REQUEST_COLUMNS, existing_request, lock_node, refusal};
use super::windows::whole_seconds;
use crate::error::{Context, Error, Result};
use crate::model::{Outcome, RequestRecord, Session};
use crate::rows::{getter, request_record};

pub(super) async fn add_request(
    store: &PostgresStore,
    session: &Session,
    process: &Process,
    source: &str,
) -> Result<(RequestRecord, bool)> {
    // One statement: fenced by the session, and a no-op when the node already has an open
    // request for the process (the partial unique index decides, also between racers).
    let sql = format!(
        "INSERT INTO requests (node, process, source, created_at, state) \
         SELECT $1, $2, $3, rota_now_ms(), 'pending' WHERE EXISTS ( \
           SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
           WHERE n.node = $1 AND s.id = $4 AND NOT s.superseded \
             AND s.deadline > rota_now_ms()) \
         ON CONFLICT DO NOTHING RETURNING {REQUEST_COLUMNS}"
    );
    let mut conn = store.connections.checkout("recording a request").await?;
    let inserted = sqlx::query(&sql)
        .bind(session.node.as_str())
        .bind(process.to_string())
        .bind(source)
        .bind(session.id)
        .fetch_optional(&mut *conn)
        .await
        .context("recording a request")?;
    if let Some(row) = inserted {
        conn.finish();
        return Ok((request_record(&row)?, true));
    }
    let connection = conn.connection().await.context("recording a request")?;
    let existing = existing_request(&mut *connection, &session.node, process).await?;
    let refused = refusal(connection, session, NodeState::Idle).await;
    if !matches!(refused, Error::Database { .. }) {
        conn.finish();
    }
    match existing {
        // Joining an open request still needs a current session.
        Some(row) if !matches!(refused, Error::Fenced { .. }) => Ok((request_record(&row)?, false)),
        _ => Err(refused),
    }
}

pub(super) async fn cancel_request(
    store: &PostgresStore,
    session: &Session,
    process: &Process,
) -> Result<bool> {
    let mut conn = store.connections.checkout("canceling a request").await?;
    let row = sqlx::query(
        "WITH current AS ( \
           SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
           WHERE n.node = $1 AND s.id = $2 AND NOT s.superseded \
             AND s.deadline > rota_now_ms() \
         ), canceled AS ( \
           UPDATE requests SET state = 'canceled', finished_at = rota_now_ms() \
           WHERE node = $1 AND process = $3 AND state = 'pending' \
             AND EXISTS (SELECT 1 FROM current) RETURNING id) \
         SELECT EXISTS (SELECT 1 FROM current) AS current, \
           (SELECT COUNT(*) FROM canceled) AS canceled",
    )
    .bind(session.node.as_str())
    .bind(session.id)
    .bind(process.to_string())
    .fetch_one(&mut *conn)
    .await
    .context("canceling a request")?;
    conn.finish();
    let get = getter("canceling a request");
    let current: bool = row.try_get("current").map_err(&get)?;
    if !current {
        return Err(Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        });
    }
    let canceled: i64 = row.try_get("canceled").map_err(&get)?;
    Ok(canceled > 0)
}

pub(super) async fn complete_request(
    store: &PostgresStore,
    session: &Session,
    process: &Process,
    outcome: &Outcome,
) -> Result<RequestRecord> {
    const CONTEXT: &str = "completing a request";
    let node = &session.node;
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let mut tx = conn.begin().await.context(CONTEXT)?;
    let locked = lock_node(&mut tx, node, Some(session)).await?;
    if !locked.as_ref().is_some_and(|l| l.current) {
        return Err(Error::Fenced {
            node: node.clone(),
            session: session.id,
        });
    }
    if let (Outcome::Failed { .. }, Some(locked)) = (outcome, &locked)
        && locked.record.state != NodeState::Maintaining
    {
        return Err(Error::Conflict {
            node: node.clone(),
            expected: NodeState::Maintaining,
            actual: locked.record.state.to_string(),
        });
    }
    let (state, event, cause) = match outcome {
        Outcome::Succeeded { detail } => ("done", HistoryEvent::Finished, detail.as_deref()),
        Outcome::Failed { cause, .. } => ("active", HistoryEvent::Failed, Some(cause.as_str())),
    };
    let row = sqlx::query(&format!(
        "UPDATE requests SET state = $3, \
           finished_at = CASE WHEN $3 = 'done' THEN rota_now_ms() END \
         WHERE node = $1 AND process = $2 AND state = 'active' RETURNING {REQUEST_COLUMNS}"
    ))
    .bind(node.as_str())
    .bind(process.to_string())
    .bind(state)
    .fetch_optional(&mut *tx)
    .await
    .context(CONTEXT)?
    .ok_or_else(|| Error::NotActive {
        node: node.clone(),
        process: process.clone(),
    })?;
    match outcome {
        Outcome::Succeeded { .. } => {
            sqlx::query("DELETE FROM backoff WHERE node = $1 AND process = $2")
                .bind(node.as_str())
                .bind(process.to_string())
                .execute(&mut *tx)
                .await
                .context(CONTEXT)?;
        }
        Outcome::Failed { cause, policy } => {
            let policy = policy.normalized();
            sqlx::query(
                "INSERT INTO backoff (node, process, until, last_interval_s, cause) \
                 SELECT $1, $2, rota_now_ms() + next * 1000, next, $3 FROM ( \
                   SELECT rota_backoff_next( \
                     (SELECT last_interval_s FROM backoff WHERE node = $1 AND process = $2), \
                     $4, $5, $6) AS next) b \
                 ON CONFLICT (node, process) DO UPDATE SET until = excluded.until, \
                   last_interval_s = excluded.last_interval_s, cause = excluded.cause",
            )
            .bind(node.as_str())
            .bind(process.to_string())
            .bind(cause)
            .bind(whole_seconds(policy.initial))
            .bind(whole_seconds(policy.maximum))
            .bind(policy.exponent)
            .execute(&mut *tx)
            .await
            .context(CONTEXT)?;
            // Fail closed in the same write: a failure recorded without it would let a
            // restarted agent start the next attempt instead of waiting for an operator.
            sqlx::query(
                "UPDATE nodes SET last_result = $2, state = 'failed', since = rota_now_ms() \
                 WHERE node = $1",
            )
            .bind(node.as_str())
            .bind(format!("failed: {cause}"))
            .execute(&mut *tx)
            .await
            .context(CONTEXT)?;
        }
    }
    sqlx::query(
        "INSERT INTO history (node, process, event, at, cause, slot, released) \
         SELECT $1, $2, $3, rota_now_ms(), $4, (SELECT slot FROM slots WHERE holder = $1), \
           FALSE",
    )
    .bind(node.as_str())
    .bind(process.to_string())
    .bind(event.to_string())
    .bind(cause)
    .execute(&mut *tx)
    .await
    .context(CONTEXT)?;
    tx.commit().await.context(CONTEXT)?;
    conn.finish();
    request_record(&row)
}

pub(super) async fn open_requests(
    store: &PostgresStore,
    node: &NodeName,
) -> Result<Vec<RequestRecord>> {
    let mut conn = store.connections.checkout("reading requests").await?;
    let rows = sqlx::query(&format!(
        "SELECT {REQUEST_COLUMNS} FROM requests \
         WHERE node = $1 AND state IN ('pending', 'active') ORDER BY id"
    ))
    .bind(node.as_str())
    .fetch_all(&mut *conn)
    .await
    .context("reading requests")?;
    conn.finish();
    rows.iter().map(request_record).collect()
}

pub(super) async fn all_requests(store: &PostgresStore) -> Result<Vec<RequestRecord>> {
    let mut conn = store.connections.checkout("reading requests").await?;
    let rows = sqlx::query(&format!(
        "SELECT {REQUEST_COLUMNS} FROM requests ORDER BY id"
    ))
    .fetch_all(&mut *conn)
    .await
    .context("reading requests")?;
    conn.finish();
    rows.iter().map(request_record).collect()
}
