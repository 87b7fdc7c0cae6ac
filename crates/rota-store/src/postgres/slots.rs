//! Slots: who takes a slot is rota-core's [`schedule`](rota_core::schedule), read in one
//! statement (SQLite's `sqlite/slots.rs` makes three, each a round trip here) and applied in
//! a transaction that locks the slot rows.

use rota_core::{Held, Limits, Turn, Waiter, schedule};
use sqlx::{Acquire as _, PgConnection, Row};

use super::PostgresStore;
use crate::error::{Context, Error, Result};
use crate::model::{Acquire, Session};
use crate::rows::{concurrency as stored_concurrency, getter, parse, stored_slot_if_any};

/// The queue as it stands and the slots, for [`schedule`]: the node's own slot, the slots
/// held, the queued nodes that hold no slot (alive when their session is current, blocked when
/// they record a reason), the concurrency, and the database's "now". `locked` reads the slot
/// rows `FOR UPDATE`, their latest versions, until the transaction ends.
fn queue_sql(locked: bool) -> String {
    // Locked, the node's row first (as every write of the node locks it: under it no other
    // grant or release of the node happens, so it never holds two slots), then the slot rows:
    // the one-time filter on `me` runs before any slot row is read, so the locks are always
    // taken in that order and a grant never deadlocks with a write that releases a slot.
    let (me, rows) = if locked {
        (
            "FOR UPDATE OF n",
            "SELECT slot, holder FROM slot_rows WHERE EXISTS (SELECT 1 FROM me) \
             ORDER BY slot FOR UPDATE",
        )
    } else {
        ("", "SELECT slot, holder FROM slots")
    };
    format!(
        "WITH me AS (SELECT EXISTS (SELECT 1 FROM sessions s WHERE s.id = n.session_id \
             AND s.id = $2 AND NOT s.superseded AND s.deadline > rota_now_ms()) AS current \
           FROM nodes n WHERE n.node = $1 {me}), \
           slot_list AS ({rows}), \
           held AS (SELECT slot, holder FROM slot_list WHERE holder IS NOT NULL) \
         SELECT x.now, COALESCE((SELECT current FROM me), FALSE) AS current, \
           COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1') AS concurrency, \
           (SELECT slot FROM held WHERE holder = $1) AS own, \
           ARRAY(SELECT slot FROM held ORDER BY slot) AS held, \
           COALESCE(array_agg(n.node), '{{}}') AS nodes, \
           COALESCE(array_agg(n.queued_at), '{{}}') AS places, \
           COALESCE(array_agg(n.blocked_reason IS NOT NULL), '{{}}') AS blocked, \
           COALESCE(array_agg(COALESCE(NOT s.superseded AND s.deadline > x.now, FALSE)), '{{}}') \
             AS alive \
         FROM (SELECT rota_now_ms() AS now) x \
         LEFT JOIN nodes n ON n.state = 'queued' AND n.queued_at IS NOT NULL \
           AND n.node <> ALL (ARRAY(SELECT holder FROM held)) \
         LEFT JOIN sessions s ON s.id = n.session_id \
         GROUP BY x.now"
    )
}

/// What a node asking for a slot finds.
enum Look {
    /// Its session is not current: it may not take a slot.
    Fenced,
    /// It holds this slot already.
    Holds(u32),
    /// Its turn in the queue as [`schedule`] decides it.
    Turn(Turn),
}

async fn look(conn: &mut PgConnection, session: &Session, locked: bool) -> Result<Look> {
    const CONTEXT: &str = "reading the queue";
    let node = &session.node;
    let row = sqlx::query(&queue_sql(locked))
        .bind(node.as_str())
        .bind(session.id)
        .fetch_one(&mut *conn)
        .await
        .context(CONTEXT)?;
    let get = getter(CONTEXT);
    if !row.try_get::<bool, _>("current").map_err(&get)? {
        return Ok(Look::Fenced);
    }
    if let Some(slot) = stored_slot_if_any("slots.slot", row.try_get("own").map_err(&get)?)? {
        return Ok(Look::Holds(slot));
    }
    let now: i64 = row.try_get("now").map_err(&get)?;
    let concurrency = stored_concurrency(
        "rota_meta.concurrency",
        row.try_get("concurrency").map_err(&get)?,
    )?;
    let held: Vec<i64> = row.try_get("held").map_err(&get)?;
    let nodes: Vec<Option<String>> = row.try_get("nodes").map_err(&get)?;
    let places: Vec<Option<i64>> = row.try_get("places").map_err(&get)?;
    let blocked: Vec<Option<bool>> = row.try_get("blocked").map_err(&get)?;
    let alive: Vec<Option<bool>> = row.try_get("alive").map_err(&get)?;
    let mut queue = Vec::new();
    for (((waiter, place), blocked), alive) in nodes.into_iter().zip(places).zip(blocked).zip(alive)
    {
        // No queued node at all: one row of the outer join, without a node.
        let (Some(waiter), Some(place)) = (waiter, place) else {
            continue;
        };
        // A queued row that does not read (edited by hand, or written by a newer rota) holds
        // no place: its own agent is refused when it reads its record, and the others go on.
        let waiter = match parse("nodes.node", waiter) {
            Ok(waiter) => waiter,
            Err(e) => {
                tracing::warn!(error = %e, "a queued node's row does not read; it holds no place");
                continue;
            }
        };
        queue.push(Waiter {
            node: waiter,
            place,
            blocked: blocked.unwrap_or(false),
            alive: alive.unwrap_or(false),
            group: None,
        });
    }
    let held: Vec<Held> = held
        .into_iter()
        .map(|slot| Held {
            slot: u32::try_from(slot).unwrap_or(u32::MAX),
            group: None,
        })
        .collect();
    let schedule = schedule(&queue, &held, &Limits::fleet(concurrency), now);
    // A node that is not queued waits for its own change, counted as one.
    Ok(Look::Turn(
        schedule.turn(node).unwrap_or(Turn::Wait { changes: 1 }),
    ))
}

pub(super) async fn try_acquire_slot(store: &PostgresStore, session: &Session) -> Result<Acquire> {
    const CONTEXT: &str = "acquiring a slot";
    let node = &session.node;
    let fenced = || Error::Fenced {
        node: node.clone(),
        session: session.id,
    };
    let mut conn = store.connections.checkout(CONTEXT).await?;
    // A read-only look first, outside a transaction: waiters that are not at the front of the
    // queue take no lock, so a release does not set off a stampede of locking transactions.
    match look(conn.connection().await.context(CONTEXT)?, session, false).await? {
        Look::Fenced => return Err(fenced()),
        Look::Turn(Turn::Wait { changes }) => {
            conn.finish();
            return Ok(Acquire::Wait { changes });
        }
        Look::Holds(_) | Look::Turn(Turn::Granted(_)) => {}
    }
    // Then, in one transaction, the same look with the node's row and the slot rows locked:
    // grants are decided one at a time.
    let mut tx = conn.begin().await.context(CONTEXT)?;
    let slot = match look(&mut tx, session, true).await? {
        Look::Fenced => return Err(fenced()),
        Look::Holds(slot) => {
            tx.commit().await.context(CONTEXT)?;
            conn.finish();
            return Ok(Acquire::Granted(slot));
        }
        Look::Turn(Turn::Wait { changes }) => {
            tx.commit().await.context(CONTEXT)?;
            conn.finish();
            return Ok(Acquire::Wait { changes });
        }
        Look::Turn(Turn::Granted(slot)) => slot,
    };
    // Taken only while free (a row not made yet is made); the node's row gets a new version,
    // so that a write of the node that waited for its lock reads its record again.
    let granted: Option<i64> = sqlx::query_scalar(
        "WITH taken AS ( \
           INSERT INTO slot_rows (slot, holder, acquired_at) VALUES ($1, $2, rota_now_ms()) \
           ON CONFLICT (slot) DO UPDATE SET holder = excluded.holder, \
             acquired_at = excluded.acquired_at \
           WHERE slot_rows.holder IS NULL RETURNING slot \
         ), touched AS ( \
           UPDATE nodes SET node = node WHERE node = $2 AND EXISTS (SELECT 1 FROM taken) \
           RETURNING node \
         ) SELECT slot FROM taken",
    )
    .bind(i64::from(slot))
    .bind(node.as_str())
    .fetch_optional(&mut *tx)
    .await
    .context(CONTEXT)?;
    tx.commit().await.context(CONTEXT)?;
    conn.finish();
    Ok(match granted {
        Some(_) => Acquire::Granted(slot),
        None => Acquire::Wait { changes: 1 },
    })
}
