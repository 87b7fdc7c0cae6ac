//! A transition and what it does to the window: requests moved, history appended, backoff
//! recorded, the slot released.

use std::time::Duration;

use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use sqlx::SqliteConnection;

use super::refusal;
use super::requests::add_request;
use crate::error::{Context, Result};
use crate::model::{
    Millis, NodeRecord, RequestState, Session, Transition, WindowChange, now_millis,
};
use crate::rows::node_record;
use crate::sqlite::queries::fetch_node;

pub(in crate::sqlite) struct HistoryRow<'a> {
    pub(super) node: &'a NodeName,
    pub(super) process: &'a str,
    pub(super) event: HistoryEvent,
    pub(super) at: Millis,
    pub(super) cause: Option<&'a str>,
    pub(super) slot: Option<u32>,
    pub(super) released: bool,
}

pub(in crate::sqlite) async fn append_history(
    tx: &mut SqliteConnection,
    row: HistoryRow<'_>,
) -> Result<()> {
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
pub(in crate::sqlite) async fn move_requests(
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
pub(in crate::sqlite) async fn record_each(
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

pub(in crate::sqlite) async fn record_backoff(
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

pub(in crate::sqlite) async fn release_slot(
    tx: &mut SqliteConnection,
    node: &NodeName,
) -> Result<()> {
    sqlx::query("DELETE FROM slots WHERE holder = ?")
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .context("releasing the slot")?;
    Ok(())
}

/// Applies a window change inside the transition's transaction.
pub(in crate::sqlite) async fn apply_window(
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
pub(in crate::sqlite) async fn update_node(
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

pub(in crate::sqlite) async fn transition(
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
