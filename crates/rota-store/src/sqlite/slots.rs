//! Slots: which one a node holds, and taking one by the queue's rule (rota-core's
//! [`schedule`](rota_core::schedule), read and applied in the write transaction).

use rota_core::{Held, Limits, NodeName, Turn, Waiter, schedule};
use sqlx::{Row, SqliteConnection};

use crate::error::{Context, Error, Result};
use crate::model::{Acquire, Session, now_millis};
use crate::rows::{concurrency, getter, parse, slot_index};

/// A waiter's read-only look at the queue: how many changes it waits for, or `None` when it
/// holds a slot or its turn has come. Waiters that are not at the front of the queue never take
/// the write lock, so a release does not set off a stampede of write transactions.
pub(super) async fn wait(conn: &mut SqliteConnection, node: &NodeName) -> Result<Option<u64>> {
    if held_slot(conn, node).await?.is_some() {
        return Ok(None);
    }
    Ok(match turn(conn, node).await? {
        Turn::Wait { changes } => Some(changes),
        Turn::Granted(_) => None,
    })
}

async fn held_slot(tx: &mut SqliteConnection, node: &NodeName) -> Result<Option<u32>> {
    let slot: Option<i64> = sqlx::query_scalar("SELECT slot FROM slots WHERE holder = ?")
        .bind(node.as_str())
        .fetch_optional(&mut *tx)
        .await
        .context("reading the node's slot")?;
    Ok(slot_index(slot))
}

pub(super) async fn acquire_slot(tx: &mut SqliteConnection, session: &Session) -> Result<Acquire> {
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

/// The turn of `node` in the queue as it stands, decided by [`rota_core::schedule`]: the
/// queued nodes that hold no slot (alive when their session is current, blocked when they
/// record a reason), the slots held, and the concurrency. A node that is not queued waits for
/// its own change, counted as one.
async fn turn(conn: &mut SqliteConnection, node: &NodeName) -> Result<Turn> {
    let now = now_millis();
    let (stored, held): (Option<String>, String) = sqlx::query_as(
        "SELECT (SELECT value FROM rota_meta WHERE key = 'concurrency'), \
           (SELECT json_group_array(slot) FROM slots)",
    )
    .fetch_one(&mut *conn)
    .await
    .context("reading the slots")?;
    let concurrency = stored
        .map(|v| concurrency("rota_meta.concurrency", v))
        .transpose()?
        .unwrap_or(1);
    let held: Vec<u32> = serde_json::from_str(&held).map_err(|e| Error::Corrupt {
        column: "slots.slot",
        value: held.clone(),
        reason: e.to_string(),
    })?;
    let rows = sqlx::query(
        "SELECT n.node, n.queued_at, n.blocked_reason IS NOT NULL AS blocked, \
           COALESCE(s.superseded = 0 AND s.deadline > ?1, 0) AS alive \
         FROM nodes n LEFT JOIN sessions s ON s.id = n.session_id \
         WHERE n.state = 'queued' AND n.queued_at IS NOT NULL \
           AND n.node NOT IN (SELECT holder FROM slots)",
    )
    .bind(now)
    .fetch_all(&mut *conn)
    .await
    .context("reading the queue")?;
    let get = getter("reading the queue");
    // A queued row that does not read (edited by hand, or written by a newer rota) holds no
    // place: its own agent is refused when it reads its record, and the others go on.
    let queue: Vec<Waiter> = rows
        .iter()
        .filter_map(|row| {
            let waiter = (|| {
                Ok::<_, Error>(Waiter {
                    node: parse("nodes.node", row.try_get("node").map_err(&get)?)?,
                    place: row.try_get("queued_at").map_err(&get)?,
                    blocked: row.try_get("blocked").map_err(&get)?,
                    alive: row.try_get("alive").map_err(&get)?,
                    group: None,
                })
            })();
            waiter
                .inspect_err(|e| tracing::warn!(error = %e, "a queued node's row does not read; it holds no place"))
                .ok()
        })
        .collect();
    let held: Vec<Held> = held
        .into_iter()
        .map(|slot| Held { slot, group: None })
        .collect();
    let schedule = schedule(&queue, &held, &Limits::fleet(concurrency), now);
    Ok(schedule.turn(node).unwrap_or(Turn::Wait { changes: 1 }))
}

/// Refuses the write unless `session` is its node's current, unexpired session.
async fn check_session(tx: &mut SqliteConnection, session: &Session) -> Result<()> {
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
