//! The write operations, each over the writer's connection inside the batch transaction
//! that the [writer](super::writer) opened. An operation of several statements runs in a
//! savepoint of its own, so that its failure undoes it alone and not its batch.

use std::time::Duration;

use rota_core::{HistoryEvent, NodeName, NodeState, ProcedureSpec, Process};
use sqlx::SqliteConnection;

use super::queries::{changes_before_turn, fetch_node, read_concurrency};
use crate::error::{Context, Error, Result};
use crate::model::{
    Acquire, Blocked, Millis, NodeRecord, Outcome, ProcedureRecord, RequestRecord, RequestState,
    Session, Transition, WindowChange, now_millis,
};
use crate::rows::{node_record, procedure_record, request_record, slot_index};

fn typed<T>(result: Result<T>) -> Result<T> {
    result
}

/// Runs `$body` (which may `return` early) in a savepoint on `$conn`: released when the body
/// succeeds, rolled back to when it fails.
macro_rules! atomically {
    ($conn:ident, $body:block) => {{
        sqlx::query("SAVEPOINT op")
            .execute(&mut *$conn)
            .await
            .context("opening a savepoint")?;
        let result = typed(async { $body }.await);
        match result {
            Ok(value) => {
                sqlx::query("RELEASE op")
                    .execute(&mut *$conn)
                    .await
                    .context("releasing a savepoint")?;
                Ok(value)
            }
            Err(e) => {
                sqlx::query("ROLLBACK TO op")
                    .execute(&mut *$conn)
                    .await
                    .context("rolling back a savepoint")?;
                sqlx::query("RELEASE op")
                    .execute(&mut *$conn)
                    .await
                    .context("releasing a savepoint")?;
                Err(e)
            }
        }
    }};
}

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

pub(super) async fn held_slot(tx: &mut SqliteConnection, node: &NodeName) -> Result<Option<u32>> {
    let slot: Option<i64> = sqlx::query_scalar("SELECT slot FROM slots WHERE holder = ?")
        .bind(node.as_str())
        .fetch_optional(&mut *tx)
        .await
        .context("reading the node's slot")?;
    Ok(slot_index(slot))
}

pub(super) struct HistoryRow<'a> {
    node: &'a NodeName,
    process: &'a str,
    event: HistoryEvent,
    at: Millis,
    cause: Option<&'a str>,
    slot: Option<u32>,
    released: bool,
}

pub(super) async fn append_history(tx: &mut SqliteConnection, row: HistoryRow<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO history (node, process, event, at, cause, slot, released) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(row.node.as_str())
    .bind(row.process)
    .bind(row.event.to_string())
    .bind(row.at)
    .bind(row.cause)
    .bind(row.slot.map(i64::from))
    .bind(row.released)
    .execute(&mut *tx)
    .await
    .context("appending history")?;
    Ok(())
}

/// Moves the node's requests in `from` state to `to` and returns their processes.
pub(super) async fn move_requests(
    tx: &mut SqliteConnection,
    node: &NodeName,
    from: RequestState,
    to: RequestState,
    now: Millis,
) -> Result<Vec<String>> {
    let finished = matches!(to, RequestState::Done | RequestState::Canceled).then_some(now);
    sqlx::query_scalar(
        "UPDATE requests SET state = ?, finished_at = ? WHERE node = ? AND state = ? \
         RETURNING process",
    )
    .bind(to.as_str())
    .bind(finished)
    .bind(node.as_str())
    .bind(from.as_str())
    .fetch_all(&mut *tx)
    .await
    .context("updating requests")
}

/// Writes one history entry per process; the last one carries `released` when the slot goes.
#[allow(clippy::too_many_arguments)]
pub(super) async fn record_each(
    tx: &mut SqliteConnection,
    node: &NodeName,
    processes: &[String],
    fallback: &str,
    event: HistoryEvent,
    cause: Option<&str>,
    slot: Option<u32>,
    releases: bool,
    now: Millis,
) -> Result<()> {
    let fallback = [fallback.to_string()];
    let processes = if processes.is_empty() && releases {
        &fallback[..]
    } else {
        processes
    };
    for (i, process) in processes.iter().enumerate() {
        let released = releases && i + 1 == processes.len();
        append_history(
            tx,
            HistoryRow {
                node,
                process,
                event,
                at: now,
                cause,
                slot,
                released,
            },
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn record_backoff(
    tx: &mut SqliteConnection,
    node: &NodeName,
    process: &str,
    policy: &rota_core::BackoffPolicy,
    cause: &str,
    now: Millis,
) -> Result<()> {
    let previous: Option<i64> =
        sqlx::query_scalar("SELECT last_interval_s FROM backoff WHERE node = ? AND process = ?")
            .bind(node.as_str())
            .bind(process)
            .fetch_optional(&mut *tx)
            .await
            .context("reading backoff")?;
    let previous = previous.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
    let next = policy.next(previous);
    let next_s = i64::try_from(next.as_secs()).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO backoff (node, process, until, last_interval_s, cause) VALUES (?, ?, ?, ?, ?) \
         ON CONFLICT (node, process) DO UPDATE SET until = excluded.until, \
         last_interval_s = excluded.last_interval_s, cause = excluded.cause",
    )
    .bind(node.as_str())
    .bind(process)
    .bind(now.saturating_add(next_s.saturating_mul(1000)))
    .bind(next_s)
    .bind(cause)
    .execute(&mut *tx)
    .await
    .context("recording backoff")?;
    Ok(())
}

pub(super) async fn release_slot(tx: &mut SqliteConnection, node: &NodeName) -> Result<()> {
    sqlx::query("DELETE FROM slots WHERE holder = ?")
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .context("releasing the slot")?;
    Ok(())
}

/// Applies a window change inside the transition's transaction.
pub(super) async fn apply_window(
    tx: &mut SqliteConnection,
    record: &NodeRecord,
    window: &WindowChange,
    now: Millis,
) -> Result<()> {
    let node = &record.node;
    let slot = record.slot;
    let fallback = record
        .process
        .as_ref()
        .map_or_else(|| Process::Reboot.to_string(), ToString::to_string);
    let result = match window {
        WindowChange::Finish => Some("finished".to_string()),
        WindowChange::Fail { cause, .. } => Some(format!("failed: {cause}")),
        WindowChange::Cancel { reason } => Some(format!("canceled: {reason}")),
        WindowChange::Postpone { reason } => Some(format!("postponed: {reason}")),
        _ => None,
    };
    if let Some(result) = result {
        sqlx::query("UPDATE nodes SET last_result = ? WHERE node = ?")
            .bind(result)
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("recording the result")?;
    }
    match window {
        // The node's own row (and its place in the queue) is written by `update_node`.
        WindowChange::None | WindowChange::Queue { .. } => {}
        WindowChange::Open | WindowChange::Join => {
            let started =
                move_requests(tx, node, RequestState::Pending, RequestState::Active, now).await?;
            record_each(
                tx,
                node,
                &started,
                &fallback,
                HistoryEvent::Started,
                None,
                slot,
                false,
                now,
            )
            .await?;
        }
        WindowChange::Finish => {
            let done =
                move_requests(tx, node, RequestState::Active, RequestState::Done, now).await?;
            for process in &done {
                sqlx::query("DELETE FROM backoff WHERE node = ? AND process = ?")
                    .bind(node.as_str())
                    .bind(process)
                    .execute(&mut *tx)
                    .await
                    .context("clearing backoff")?;
            }
            // With no request left, the release gets an entry of its own.
            let event = if done.is_empty() {
                HistoryEvent::Released
            } else {
                HistoryEvent::Finished
            };
            record_each(tx, node, &done, &fallback, event, None, slot, true, now).await?;
            release_slot(tx, node).await?;
        }
        WindowChange::Fail {
            cause,
            policy,
            keep_slot,
        } => {
            let failed = if *keep_slot {
                sqlx::query_scalar(
                    "SELECT process FROM requests WHERE node = ? AND state = 'active' ORDER BY id",
                )
                .bind(node.as_str())
                .fetch_all(&mut *tx)
                .await
                .context("reading active requests")?
            } else {
                move_requests(tx, node, RequestState::Active, RequestState::Pending, now).await?
            };
            let failed = if failed.is_empty() {
                vec![fallback.clone()]
            } else {
                failed
            };
            for process in &failed {
                record_backoff(tx, node, process, policy, cause, now).await?;
            }
            record_each(
                tx,
                node,
                &failed,
                &fallback,
                HistoryEvent::Failed,
                Some(cause),
                slot,
                !keep_slot,
                now,
            )
            .await?;
            if !keep_slot {
                release_slot(tx, node).await?;
            }
        }
        WindowChange::Cancel { reason } => {
            let canceled =
                move_requests(tx, node, RequestState::Active, RequestState::Canceled, now).await?;
            record_each(
                tx,
                node,
                &canceled,
                &fallback,
                HistoryEvent::Canceled,
                Some(reason),
                slot,
                true,
                now,
            )
            .await?;
            release_slot(tx, node).await?;
        }
        WindowChange::Postpone { reason } => {
            let postponed =
                move_requests(tx, node, RequestState::Active, RequestState::Pending, now).await?;
            record_each(
                tx,
                node,
                &postponed,
                &fallback,
                HistoryEvent::Postponed,
                Some(reason),
                slot,
                true,
                now,
            )
            .await?;
            release_slot(tx, node).await?;
        }
    }
    Ok(())
}

/// The fenced compare-and-swap at the heart of every transition: one statement that updates
/// the node only if it is in `transition.from` and `session` is current, returning the new
/// record, or `None` when either check failed.
pub(super) async fn update_node(
    conn: &mut sqlx::SqliteConnection,
    session: &Session,
    transition: &Transition,
    now: Millis,
) -> Result<Option<NodeRecord>> {
    let clears_process = matches!(transition.to, NodeState::Idle | NodeState::Queued);
    let process = transition.process.as_ref().map(ToString::to_string);
    let f = &transition.fields;
    let resets_cordon = clears_process && transition.fields.cordoned_by_rota.is_none();
    let queued_at = match &transition.window {
        WindowChange::Queue { queued_at } => Some(*queued_at),
        WindowChange::Open => Some(None),
        _ => None,
    };
    let row = sqlx::query(
        "UPDATE nodes SET state = ?1, since = ?2, \
         process = CASE WHEN ?3 THEN NULL ELSE COALESCE(?4, process) END, \
         pre_cordoned = CASE WHEN ?5 THEN 0 ELSE COALESCE(?6, pre_cordoned) END, \
         cordoned_by_rota = CASE WHEN ?5 THEN 0 ELSE COALESCE(?7, cordoned_by_rota) END, \
         boot_id = CASE WHEN ?8 THEN ?9 ELSE boot_id END, \
         reboot_started_at = CASE WHEN ?10 THEN ?11 ELSE reboot_started_at END, \
         reboot_deadline = CASE WHEN ?12 THEN ?13 ELSE reboot_deadline END, \
         last_reboot_at = COALESCE(?14, last_reboot_at), \
         queued_at = CASE WHEN ?15 THEN ?16 ELSE queued_at END \
         WHERE node = ?17 AND state = ?18 AND session_id = ?19 AND EXISTS ( \
           SELECT 1 FROM sessions s WHERE s.id = ?19 AND s.superseded = 0 AND s.deadline > ?2) \
         RETURNING node, state, since, process, pre_cordoned, cordoned_by_rota, boot_id, \
           reboot_started_at, reboot_deadline, last_reboot_at, queued_at, last_result, \
           blocked_reason, blocked_since, \
           (SELECT slot FROM slots WHERE holder = ?17) AS slot",
    )
    .bind(transition.to.to_string())
    .bind(now)
    .bind(clears_process)
    .bind(process)
    .bind(resets_cordon)
    .bind(f.pre_cordoned)
    .bind(f.cordoned_by_rota)
    .bind(f.boot_id.is_some())
    .bind(f.boot_id.clone().flatten())
    .bind(f.reboot_started_at.is_some())
    .bind(f.reboot_started_at.flatten())
    .bind(f.reboot_deadline.is_some())
    .bind(f.reboot_deadline.flatten())
    .bind(f.last_reboot_at)
    .bind(queued_at.is_some())
    .bind(queued_at.flatten())
    .bind(session.node.as_str())
    .bind(transition.from.to_string())
    .bind(session.id)
    .fetch_optional(&mut *conn)
    .await
    .context("updating the node")?;
    row.as_ref().map(node_record).transpose()
}

/// Why a fenced write matched nothing: the session is gone, or the node is elsewhere.
pub(super) async fn refusal(
    conn: &mut sqlx::SqliteConnection,
    session: &Session,
    expected: NodeState,
) -> Error {
    let current: std::result::Result<Option<i64>, sqlx::Error> = sqlx::query_scalar(
        "SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
         WHERE n.node = ? AND s.id = ? AND s.superseded = 0 AND s.deadline > ?",
    )
    .bind(session.node.as_str())
    .bind(session.id)
    .bind(now_millis())
    .fetch_optional(&mut *conn)
    .await;
    match current {
        Ok(None) => Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        },
        Ok(Some(_)) => match fetch_node(conn, &session.node).await {
            Ok(Some(record)) => Error::Conflict {
                node: session.node.clone(),
                expected,
                actual: record.state.to_string(),
            },
            Ok(None) => Error::NoSuchNode {
                node: session.node.clone(),
            },
            Err(e) => e,
        },
        Err(source) => Error::Database {
            context: "checking the session",
            source,
        },
    }
}

pub(super) fn expect_node(record: Option<NodeRecord>, node: &NodeName) -> Result<NodeRecord> {
    record.ok_or_else(|| Error::NoSuchNode { node: node.clone() })
}

pub(super) async fn open_session(
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

pub(super) async fn heartbeat(
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

pub(super) async fn close_session(tx: &mut SqliteConnection, session: &Session) -> Result<()> {
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

pub(super) async fn set_concurrency(tx: &mut SqliteConnection, concurrency: u32) -> Result<()> {
    sqlx::query(
        "INSERT INTO rota_meta (key, value) VALUES ('concurrency', ?) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .bind(concurrency.to_string())
    .execute(&mut *tx)
    .await
    .context("setting the concurrency")?;
    Ok(())
}

pub(super) async fn set_meta(
    tx: &mut SqliteConnection,
    key: &str,
    value: Option<&str>,
) -> Result<Option<String>> {
    let previous: Option<String> = sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = ?")
        .bind(key)
        .fetch_optional(&mut *tx)
        .await
        .context("reading a setting")?;
    match value {
        Some(value) => sqlx::query(
            "INSERT INTO rota_meta (key, value) VALUES (?, ?) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(value),
        None => sqlx::query("DELETE FROM rota_meta WHERE key = ?").bind(key),
    }
    .execute(&mut *tx)
    .await
    .context("writing a setting")?;
    Ok(previous)
}

pub(super) async fn acquire_slot(tx: &mut SqliteConnection, session: &Session) -> Result<Acquire> {
    atomically!(tx, {
        check_session(tx, session).await?;
        if let Some(slot) = held_slot(tx, &session.node).await? {
            return Ok(Acquire::Granted(slot));
        }
        let changes = changes_before_turn(tx, &session.node).await?;
        if changes > 0 {
            return Ok(Acquire::Wait { changes });
        }
        let concurrency = read_concurrency(tx).await?;
        let held: Vec<i64> = sqlx::query_scalar("SELECT slot FROM slots ORDER BY slot")
            .fetch_all(&mut *tx)
            .await
            .context("reading slots")?;
        let Some(slot) = (0..concurrency).find(|i| !held.contains(&i64::from(*i))) else {
            return Ok(Acquire::Wait { changes: 1 });
        };
        sqlx::query("INSERT INTO slots (slot, holder, acquired_at) VALUES (?, ?, ?)")
            .bind(i64::from(slot))
            .bind(session.node.as_str())
            .bind(now_millis())
            .execute(&mut *tx)
            .await
            .context("taking a slot")?;
        Ok(Acquire::Granted(slot))
    })
}

/// One statement: extends the session only while it is current and its node holds a slot.
pub(super) async fn fence(
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

/// The request that stands for `process` on `node`: its open one, or for a procedure any one
/// ever made (a procedure's request is made once per node).
async fn existing_request(
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
pub(super) async fn add_request(
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

pub(super) async fn cancel_request(
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

pub(super) async fn set_blocked(
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

pub(super) async fn transition(
    tx: &mut SqliteConnection,
    session: &Session,
    transition: &Transition,
) -> Result<NodeRecord> {
    if transition.requests.is_empty()
        && matches!(
            transition.window,
            WindowChange::None | WindowChange::Queue { .. }
        )
    {
        // A step that touches only the node's row is one statement.
        return match update_node(tx, session, transition, now_millis()).await? {
            Some(record) => Ok(record),
            None => Err(refusal(tx, session, transition.from).await),
        };
    }
    atomically!(tx, {
        let node = &session.node;
        let Some(record) = fetch_node(tx, node).await? else {
            return Err(refusal(tx, session, transition.from).await);
        };
        let now = now_millis();
        if record.state == transition.from {
            apply_window(tx, &record, &transition.window, now).await?;
        }
        let Some(updated) = update_node(tx, session, transition, now).await? else {
            return Err(refusal(tx, session, transition.from).await);
        };
        for (process, source) in &transition.requests {
            add_request(tx, session, process, source).await?;
        }
        Ok(updated)
    })
}

pub(super) async fn unlock(
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

pub(super) async fn retry(tx: &mut SqliteConnection, node: &NodeName) -> Result<NodeRecord> {
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

pub(super) async fn complete_request(
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

/// Stores a new procedure, or returns the stored one when it is the same.
pub(super) async fn submit_procedure(
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
pub(super) async fn operator_request(
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

pub(super) async fn operator_cancel(
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
