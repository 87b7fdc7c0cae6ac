//! A node's look at the queue, which both SQL stores read in one statement and rota-core's
//! [`schedule`] decides.

use rota_core::{Held, Limits, Turn, Waiter, schedule};

use crate::error::{Error, Result};
use crate::model::Session;
use crate::model::{groups_setting, rollout_setting};
use crate::rows::stored_slot_if_any;
use crate::rows::{JsonRow, SqlRow, concurrency, field, json_rows, parse, stored_slot};
use crate::sql::Dialect;

/// What a node asking for a slot finds.
pub(crate) enum Look {
    /// It holds this slot already.
    Holds(u32),
    /// Its turn in the queue as [`schedule`] decides it.
    Turn(Turn),
}

/// The queue and the slots for [`schedule`], as the node `$1` of session `$2` sees them: its
/// session (which must be current), its own slot, the slots held, the queued nodes that hold
/// no slot (alive when their session is current, blocked when they record a reason) as JSON,
/// the concurrency, the rollout with the nodes that finished in it (counted as
/// [`rota_core::rollout::finished`] counts them, and only when the rollout has batches) and the
/// database's clock. `locked` reads the node's row and the slots as a
/// grant does, locked until the transaction ends.
pub(crate) fn look_sql<DB: Dialect>(locked: bool) -> String {
    let (lock_node, slots) = match locked {
        true => (DB::LOCK_NODE, DB::LOCKED_SLOTS),
        false => ("", "SELECT slot, holder FROM slots"),
    };
    format!(
        "WITH me AS (SELECT {now} AS now, EXISTS (SELECT 1 FROM sessions se \
             WHERE se.id = n.session_id AND se.id = $2 AND NOT se.superseded \
             AND se.deadline > {now}) AS current FROM nodes n WHERE n.node = $1 {lock_node}), \
           slot_list AS ({slots}), \
           held AS (SELECT slot, holder FROM slot_list WHERE holder IS NOT NULL) \
         SELECT me.now, me.current, \
           (SELECT value FROM rota_meta WHERE key = 'concurrency') AS concurrency, \
           (SELECT value FROM rota_meta WHERE key = 'rollout') AS rollout, \
           (SELECT value FROM rota_meta WHERE key = 'groups') AS groups, \
           CASE WHEN EXISTS (SELECT 1 FROM rota_meta WHERE key = 'rollout') \
             THEN (SELECT count(*) FROM nodes f WHERE f.last_result = '{finished}' \
               AND f.last_result_at >= COALESCE((SELECT CAST(value AS BIGINT) FROM rota_meta \
                 WHERE key = 'resumed_at'), 0)) ELSE 0 END AS finished, \
           (SELECT slot FROM held WHERE holder = $1) AS own, \
           (SELECT {held} FROM held h LEFT JOIN nodes g ON g.node = h.holder) AS held, \
           (SELECT {queue} FROM nodes q LEFT JOIN sessions s ON s.id = q.session_id \
             WHERE q.state = 'queued' AND q.queued_at IS NOT NULL \
             AND q.node NOT IN (SELECT holder FROM held)) AS queue \
         FROM me",
        now = DB::NOW,
        finished = rota_core::rollout::FINISHED,
        held = DB::json_objects("'slot', h.slot, 'group', g.group_name", "h.slot"),
        queue = DB::json_objects(
            "'node', q.node, 'queued_at', q.queued_at, \
             'blocked', CASE WHEN q.blocked_reason IS NULL THEN 0 ELSE 1 END, \
             'alive', CASE WHEN NOT s.superseded AND s.deadline > me.now THEN 1 ELSE 0 END, \
             'group', q.group_name",
            "q.queued_at, q.node"
        ),
    )
}

/// What [`look_sql`]'s row says to `session`: fenced unless its session is current.
pub(crate) fn look(row: Option<impl SqlRow>, session: &Session) -> Result<Look> {
    let node = &session.node;
    let Some(row) = row.filter(|row| row.column("current").unwrap_or(false)) else {
        return Err(Error::Fenced {
            node: node.clone(),
            session: session.id,
        });
    };
    if let Some(slot) = stored_slot_if_any("slots.slot", row.column("own")?)? {
        return Ok(Look::Holds(slot));
    }
    let now: i64 = row.column("now")?;
    let concurrency = row
        .column::<Option<String>>("concurrency")?
        .map(|v| concurrency("rota_meta.concurrency", v))
        .transpose()?
        .unwrap_or(rota_core::schedule::DEFAULT_CONCURRENCY);
    let held = json_rows("slots", row.column("held")?)?
        .iter()
        .map(|slot| {
            Ok(Held {
                slot: stored_slot("slots.slot", field(slot, "slots.slot")?)?,
                group: field(slot, "nodes.group")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // A queued row that does not read (edited by hand, or written by a newer rota) holds no
    // place: its own agent is refused when it reads its record, and the others go on.
    let waiter = |w: &JsonRow| {
        Ok::<_, Error>(Waiter {
            node: parse("nodes.node", field(w, "nodes.node")?)?,
            place: field(w, "nodes.queued_at")?,
            blocked: field::<u8>(w, "nodes.blocked")? != 0,
            alive: field::<u8>(w, "nodes.alive")? != 0,
            group: field(w, "nodes.group")?,
        })
    };
    let queue: Vec<Waiter> = json_rows("nodes", row.column("queue")?)?
        .iter()
        .filter_map(|w| {
            waiter(w)
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "a queued node's row does not read; it holds no place");
                })
                .ok()
        })
        .collect();
    let rollout = rollout_setting(row.column::<Option<String>>("rollout")?.as_deref())?;
    let finished = u32::try_from(row.column::<i64>("finished")?).unwrap_or(u32::MAX);
    let groups = groups_setting(row.column::<Option<String>>("groups")?.as_deref())?;
    let limits = groups.limits(Limits::rollout(concurrency, &rollout.batches, finished));
    let schedule = schedule(&queue, &held, &limits, now);
    // A node that is not queued waits for its own change, counted as one.
    Ok(Look::Turn(
        schedule.turn(node).unwrap_or(Turn::Wait { changes: 1 }),
    ))
}
