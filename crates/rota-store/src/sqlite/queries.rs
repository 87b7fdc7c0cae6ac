//! A node's turn in the queue, which both the look before a grant and the grant read.

use rota_core::{Held, Limits, NodeName, Turn, Waiter, schedule};
use sqlx::Row;

use crate::error::{Context, Error, Result};
use crate::model::now_millis;
use crate::rows::{concurrency, getter, parse};

/// The turn of `node` in the queue as it stands, decided by [`rota_core::schedule`]: the
/// queued nodes that hold no slot (alive when their session is current, blocked when they
/// record a reason), the slots held, and the concurrency. A node that is not queued waits for
/// its own change, counted as one.
pub(super) async fn turn(conn: &mut sqlx::SqliteConnection, node: &NodeName) -> Result<Turn> {
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
