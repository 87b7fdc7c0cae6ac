//! Slots: which one a node holds, and taking one by the queue's rule (rota-core's
//! [`schedule`](rota_core::schedule)), read and applied in the write transaction.

use rota_core::{Held, Limits, Turn, Waiter, schedule};
use sqlx::{Sqlite, SqliteConnection};

use crate::error::{Context, Error, Result};
use crate::model::{Acquire, Session};
use crate::rows::{SqlRow, concurrency, getter, parse, stored_slot_if_any};
use crate::sql::Dialect;

const NOW: &str = <Sqlite as Dialect>::NOW;

/// What a node asking for a slot finds.
enum Look {
    /// It holds this slot already.
    Holds(u32),
    /// Its turn in the queue as [`schedule`] decides it.
    Turn(Turn),
}

/// A waiter's look at the queue, outside the write lock: how many changes it waits for, or
/// `None` when it holds a slot or its turn has come. Waiters behind the front never take the
/// write lock, so a release does not set off a stampede of write transactions.
pub(super) async fn wait(conn: &mut SqliteConnection, session: &Session) -> Result<Option<u64>> {
    Ok(match look(conn, session).await? {
        Look::Turn(Turn::Wait { changes }) => Some(changes),
        Look::Holds(_) | Look::Turn(Turn::Granted(_)) => None,
    })
}

/// `Store::try_acquire_slot` in the write transaction: the look again under the write lock, so
/// that grants are decided one at a time, and the slot [`schedule`] names taken (the keys of
/// `slots` refuse a second holder even if a check were wrong).
pub(super) async fn acquire(conn: &mut SqliteConnection, session: &Session) -> Result<Acquire> {
    let slot = match look(conn, session).await? {
        Look::Holds(slot) => return Ok(Acquire::Granted(slot)),
        Look::Turn(Turn::Wait { changes }) => return Ok(Acquire::Wait { changes }),
        Look::Turn(Turn::Granted(slot)) => slot,
    };
    let taken = sqlx::query(&format!(
        "INSERT INTO slots (slot, holder, acquired_at) VALUES ($1, $2, {NOW}) \
         ON CONFLICT DO NOTHING RETURNING slot"
    ))
    .bind(i64::from(slot))
    .bind(session.node.as_str())
    .fetch_optional(&mut *conn)
    .await
    .context("taking a slot")?;
    Ok(match taken {
        Some(_) => Acquire::Granted(slot),
        None => Acquire::Wait { changes: 1 },
    })
}

/// The queue as it stands and the slots, for [`schedule`]: the node's session (which must
/// be current), its own slot, the slots held, the queued nodes that hold no slot (alive
/// when their session is current, blocked when they record a reason) and the concurrency.
async fn look(conn: &mut SqliteConnection, session: &Session) -> Result<Look> {
    const CONTEXT: &str = "reading the queue";
    let get = getter(CONTEXT);
    let node = &session.node;
    let me = sqlx::query(&format!(
        "SELECT {now} AS now, EXISTS (SELECT 1 FROM sessions s WHERE s.id = n.session_id \
           AND s.id = $2 AND NOT s.superseded AND s.deadline > {now}) AS current, \
           (SELECT value FROM rota_meta WHERE key = 'concurrency') AS concurrency \
         FROM nodes n WHERE n.node = $1",
        now = NOW
    ))
    .bind(node.as_str())
    .bind(session.id)
    .fetch_optional(&mut *conn)
    .await
    .context(CONTEXT)?;
    let Some(me) = me.filter(|me| me.column("current").unwrap_or(false)) else {
        return Err(Error::Fenced {
            node: node.clone(),
            session: session.id,
        });
    };
    let now: i64 = me.column("now").map_err(&get)?;
    let concurrency = me
        .column::<Option<String>>("concurrency")
        .map_err(&get)?
        .map(|v| concurrency("rota_meta.concurrency", v))
        .transpose()?
        .unwrap_or(1);
    let mut held = Vec::new();
    for row in sqlx::query("SELECT slot, holder FROM slots ORDER BY slot")
        .fetch_all(&mut *conn)
        .await
        .context(CONTEXT)?
    {
        let slot = stored_slot_if_any("slots.slot", row.column("slot").map_err(&get)?)?;
        let holder: Option<String> = row.column("holder").map_err(&get)?;
        match (slot, holder) {
            (Some(slot), Some(holder)) if holder == node.as_str() => {
                return Ok(Look::Holds(slot));
            }
            (Some(slot), Some(_)) => held.push(Held { slot, group: None }),
            _ => {}
        }
    }
    let rows = sqlx::query(&format!(
        "SELECT n.node, n.queued_at, n.blocked_reason IS NOT NULL AS blocked, \
           COALESCE(NOT s.superseded AND s.deadline > {}, FALSE) AS alive \
         FROM nodes n LEFT JOIN sessions s ON s.id = n.session_id \
         WHERE n.state = 'queued' AND n.queued_at IS NOT NULL \
           AND n.node NOT IN (SELECT holder FROM slots)",
        NOW
    ))
    .fetch_all(&mut *conn)
    .await
    .context(CONTEXT)?;
    // A queued row that does not read (edited by hand, or written by a newer rota) holds no
    // place: its own agent is refused when it reads its record, and the others go on.
    let queue: Vec<Waiter> = rows
        .iter()
        .filter_map(|row| {
            let waiter = (|| {
                Ok::<_, Error>(Waiter {
                    node: parse("nodes.node", row.column("node").map_err(&get)?)?,
                    place: row.column("queued_at").map_err(&get)?,
                    blocked: row.column("blocked").map_err(&get)?,
                    alive: row.column("alive").map_err(&get)?,
                    group: None,
                })
            })();
            waiter
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "a queued node's row does not read; it holds no place");
                })
                .ok()
        })
        .collect();
    let schedule = schedule(&queue, &held, &Limits::fleet(concurrency), now);
    // A node that is not queued waits for its own change, counted as one.
    Ok(Look::Turn(
        schedule.turn(node).unwrap_or(Turn::Wait { changes: 1 }),
    ))
}
