//! Every write of a node's record: one transaction on the writer's connection that reads the
//! record under the node's row lock (one statement), lets rota-core decide
//! ([`NodeOverview::apply`]), and persists the difference (one statement).
//!
//! A read that waited for the row lock reads the rest of the record from its statement's
//! snapshot, taken before the wait: it would miss what the writer it waited for changed. Every
//! write that changes a node's record therefore makes a new version of the node's row (its
//! slot grant too, see `slots.rs`), and a read whose locked row is not the version its snapshot
//! shows reads again, now that it holds the lock.

use rota_core::{Applied, NodeName, Write};
use sqlx::postgres::PgRow;
use sqlx::{Acquire as _, PgConnection, Row};

use super::PostgresStore;
use super::changes::CHANNEL;
use super::queries::REQUEST_COLUMNS;
use crate::error::{Context, Error, Result};
use crate::model::{BackoffRecord, Millis, NodeOverview, RequestRecord, Session};
use crate::rows::{NODE_COLUMNS, getter, node_record, parse, request_state};

/// A write as it was committed: the core's answer, and the requests it created as stored.
pub(super) struct Written {
    pub(super) applied: Applied,
    pub(super) opened: Vec<RequestRecord>,
}

/// The wake-ups a committed node write sends.
pub(super) enum Wakes {
    /// This many, known before it is persisted.
    Known(u64),
    /// This many if it stored a new request (a procedure's request the node had before is not
    /// stored again), else none.
    IfOpened(u64),
}

/// The node's record read under its row lock, whether `session` is its current unexpired
/// session, and the database's "now" for every timestamp of the transaction.
struct Locked {
    record: NodeOverview,
    current: bool,
    now: Millis,
}

fn read_sql() -> String {
    format!(
        "SELECT {NODE_COLUMNS}, rota_now_ms() AS now, EXISTS ( \
           SELECT 1 FROM sessions se WHERE se.id = n.session_id AND se.id = $2 \
             AND NOT se.superseded AND se.deadline > rota_now_ms()) AS current, \
           n.xmin::TEXT IS DISTINCT FROM ( \
             SELECT x.xmin::TEXT FROM nodes x WHERE x.node = n.node) AS stale, \
           r.ids AS r_ids, r.processes AS r_processes, r.sources AS r_sources, \
           r.created AS r_created, r.states AS r_states, \
           b.processes AS b_processes, b.until AS b_until, b.intervals AS b_intervals, \
           b.causes AS b_causes \
         FROM nodes n LEFT JOIN slots s ON s.holder = n.node \
         CROSS JOIN LATERAL ( \
           SELECT COALESCE(array_agg(q.id ORDER BY q.id), '{{}}') AS ids, \
             COALESCE(array_agg(q.process ORDER BY q.id), '{{}}') AS processes, \
             COALESCE(array_agg(q.source ORDER BY q.id), '{{}}') AS sources, \
             COALESCE(array_agg(q.created_at ORDER BY q.id), '{{}}') AS created, \
             COALESCE(array_agg(q.state ORDER BY q.id), '{{}}') AS states \
           FROM requests q WHERE q.node = n.node AND q.state IN ('pending', 'active')) r \
         CROSS JOIN LATERAL ( \
           SELECT COALESCE(array_agg(k.process ORDER BY k.process), '{{}}') AS processes, \
             COALESCE(array_agg(k.until ORDER BY k.process), '{{}}') AS until, \
             COALESCE(array_agg(k.last_interval_s ORDER BY k.process), '{{}}') AS intervals, \
             COALESCE(array_agg(k.cause ORDER BY k.process), '{{}}') AS causes \
           FROM backoff k WHERE k.node = n.node) b \
         WHERE n.node = $1 FOR UPDATE OF n"
    )
}

/// Reads `node`'s whole record and locks its row until the transaction ends.
async fn read_record(
    tx: &mut PgConnection,
    node: &NodeName,
    session: Option<&Session>,
) -> Result<Option<Locked>> {
    const CONTEXT: &str = "reading the node's record";
    let sql = read_sql();
    // The second read holds the lock from the first, so it is never stale.
    for _ in 0..2 {
        let row = sqlx::query(&sql)
            .bind(node.as_str())
            .bind(session.map(|s| s.id))
            .fetch_optional(&mut *tx)
            .await
            .context(CONTEXT)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let get = getter(CONTEXT);
        if row.try_get::<bool, _>("stale").map_err(&get)? {
            continue;
        }
        return Ok(Some(Locked {
            record: overview(&row)?,
            current: row.try_get("current").map_err(&get)?,
            now: row.try_get("now").map_err(&get)?,
        }));
    }
    Err(Error::Corrupt {
        column: "nodes.xmin",
        value: node.to_string(),
        reason: "the node's row changed while this transaction held its lock".into(),
    })
}

fn overview(row: &PgRow) -> Result<NodeOverview> {
    let get = getter("reading the node's record");
    let record = node_record(row)?;
    let ids: Vec<i64> = row.try_get("r_ids").map_err(&get)?;
    let processes: Vec<String> = row.try_get("r_processes").map_err(&get)?;
    let sources: Vec<String> = row.try_get("r_sources").map_err(&get)?;
    let created: Vec<i64> = row.try_get("r_created").map_err(&get)?;
    let states: Vec<String> = row.try_get("r_states").map_err(&get)?;
    let open_requests = ids
        .into_iter()
        .zip(processes)
        .zip(sources)
        .zip(created)
        .zip(states)
        .map(|((((id, process), source), created_at), state)| {
            Ok(RequestRecord {
                id,
                node: record.node.clone(),
                process: parse("requests.process", process)?,
                source,
                created_at,
                state: request_state(state)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let processes: Vec<String> = row.try_get("b_processes").map_err(&get)?;
    let until: Vec<i64> = row.try_get("b_until").map_err(&get)?;
    let intervals: Vec<i64> = row.try_get("b_intervals").map_err(&get)?;
    let causes: Vec<String> = row.try_get("b_causes").map_err(&get)?;
    let backoffs = processes
        .into_iter()
        .zip(until)
        .zip(intervals)
        .zip(causes)
        .map(|(((process, until), seconds), cause)| {
            let seconds = u64::try_from(seconds).map_err(|_| Error::Corrupt {
                column: "backoff.last_interval_s",
                value: seconds.to_string(),
                reason: "expected a number of seconds, 0 or more".into(),
            })?;
            Ok(BackoffRecord {
                node: record.node.clone(),
                process: parse("backoff.process", process)?,
                until,
                last_interval: std::time::Duration::from_secs(seconds),
                cause,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(NodeOverview {
        record,
        open_requests,
        backoffs,
    })
}

/// Applies `write` to `node`'s record in one transaction, fenced by `session` when an agent
/// writes (a missing node is then fenced too); an operator's write of an unknown node is
/// `NoSuchNode`. `wakes` says which wake-ups the committed write sends. A refused write writes
/// nothing and wakes no one.
pub(super) async fn write_node(
    store: &PostgresStore,
    node: &NodeName,
    session: Option<&Session>,
    write: &Write,
    wakes: impl FnOnce(&Applied) -> Wakes,
    context: &'static str,
) -> Result<Written> {
    let mut conn = store.connections.checkout(context).await?;
    let mut tx = conn.begin().await.context(context)?;
    let locked = read_record(&mut tx, node, session).await?;
    let Some(Locked {
        record: before,
        now,
        ..
    }) = locked.filter(|l| session.is_none() || l.current)
    else {
        return Err(match session {
            Some(session) => Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            },
            None => Error::NoSuchNode { node: node.clone() },
        });
    };
    let applied = before.apply(write, now)?;
    let opened = match wakes(&applied) {
        Wakes::Known(wakes) if applied.changed => {
            // The notification goes with the write's own statement.
            let opened = persist(&mut tx, &before, &applied, now, store.payload(wakes)).await?;
            tx.commit().await.context(context)?;
            store.woke(wakes);
            opened
        }
        Wakes::Known(wakes) => {
            store.commit(tx, wakes, context).await?;
            Vec::new()
        }
        Wakes::IfOpened(wakes) => {
            let opened = if applied.changed {
                persist(&mut tx, &before, &applied, now, None).await?
            } else {
                Vec::new()
            };
            let wakes = if opened.is_empty() { 0 } else { wakes };
            store.commit(tx, wakes, context).await?;
            opened
        }
    };
    conn.finish();
    Ok(Written { applied, opened })
}

/// Writes what changed between `before` and the core's answer in one statement, with the
/// notification of its wake-ups: the node's row (always, so that a reader that waited for the
/// lock sees a new version), the slot given back, the requests moved or closed, the backoffs,
/// the history entries, and last the requests opened (after the ones closed, whose key they
/// may take). Returns the requests opened as stored.
async fn persist(
    tx: &mut PgConnection,
    before: &NodeOverview,
    applied: &Applied,
    now: Millis,
    notify: Option<String>,
) -> Result<Vec<RequestRecord>> {
    let after = &applied.after;
    let r = &after.record;
    let releases = before.record.slot.is_some() && r.slot.is_none();
    // Requests still open whose state moved, then those closed (finished now).
    let mut ids = Vec::new();
    let mut states = Vec::new();
    let mut finished: Vec<Option<i64>> = Vec::new();
    for request in &after.open_requests {
        let moved = before
            .open_requests
            .iter()
            .any(|b| b.id == request.id && b.state != request.state);
        if moved {
            ids.push(request.id);
            states.push(request.state.as_str());
            finished.push(None);
        }
    }
    for request in &applied.closed {
        ids.push(request.id);
        states.push(request.state.as_str());
        finished.push(Some(now));
    }
    let gone: Vec<String> = before
        .backoffs
        .iter()
        .filter(|b| !after.backoffs.iter().any(|a| a.process == b.process))
        .map(|b| b.process.to_string())
        .collect();
    let set: Vec<&BackoffRecord> = after
        .backoffs
        .iter()
        .filter(|a| !before.backoffs.contains(a))
        .collect();
    let h = &applied.history;
    let o = &applied.opened;
    let sql = format!(
        "WITH node_row AS ( \
           UPDATE nodes SET state = $2, since = $3, process = $4, pre_cordoned = $5, \
             cordoned_by_rota = $6, boot_id = $7, reboot_started_at = $8, reboot_deadline = $9, \
             last_reboot_at = $10, queued_at = $11, last_result = $12, blocked_reason = $13, \
             blocked_since = $14 WHERE node = $1 RETURNING node \
         ), released AS ( \
           UPDATE slot_rows SET holder = NULL, acquired_at = NULL WHERE $15 AND holder = $1 \
           RETURNING slot \
         ), moved AS ( \
           UPDATE requests r SET state = t.state, finished_at = t.finished \
           FROM unnest($16::BIGINT[], $17::TEXT[], $18::BIGINT[]) AS t (id, state, finished) \
           WHERE r.id = t.id AND r.node = $1 RETURNING r.id \
         ), cleared AS ( \
           DELETE FROM backoff WHERE node = $1 AND process = ANY ($19::TEXT[]) RETURNING process \
         ), backed_off AS ( \
           INSERT INTO backoff (node, process, until, last_interval_s, cause) \
           SELECT $1, t.process, t.until, t.seconds, t.cause \
           FROM unnest($20::TEXT[], $21::BIGINT[], $22::BIGINT[], $23::TEXT[]) \
             AS t (process, until, seconds, cause) \
           ON CONFLICT (node, process) DO UPDATE SET until = excluded.until, \
             last_interval_s = excluded.last_interval_s, cause = excluded.cause \
           RETURNING process \
         ), appended AS ( \
           INSERT INTO history (node, process, event, at, cause, slot, released) \
           SELECT $1, t.process, t.event, t.at, t.cause, t.slot, t.released \
           FROM unnest($24::TEXT[], $25::TEXT[], $26::BIGINT[], $27::TEXT[], $28::BIGINT[], \
             $29::BOOLEAN[]) WITH ORDINALITY AS t (process, event, at, cause, slot, released, i) \
           ORDER BY t.i RETURNING id \
         ), opened AS ( \
           INSERT INTO requests (node, process, source, created_at, state) \
           SELECT $1, t.process, t.source, t.created_at, 'pending' \
           FROM unnest($30::TEXT[], $31::TEXT[], $32::BIGINT[]) WITH ORDINALITY \
             AS t (process, source, created_at, i) \
           WHERE (SELECT count(*) FROM moved) >= 0 \
           ORDER BY t.i ON CONFLICT DO NOTHING RETURNING {REQUEST_COLUMNS} \
         ), notified AS ( \
           SELECT pg_notify($33, $34) WHERE $34 IS NOT NULL \
         ) \
         SELECT o.*, (SELECT count(*) FROM notified) AS notified FROM ( \
           SELECT 1) one LEFT JOIN opened o ON TRUE ORDER BY o.id"
    );
    let rows = sqlx::query(&sql)
        .bind(r.node.as_str())
        .bind(r.state.as_str())
        .bind(r.since)
        .bind(r.process.as_ref().map(ToString::to_string))
        .bind(r.pre_cordoned)
        .bind(r.cordoned_by_rota)
        .bind(r.boot_id.as_deref())
        .bind(r.reboot_started_at)
        .bind(r.reboot_deadline)
        .bind(r.last_reboot_at)
        .bind(r.queued_at)
        .bind(r.last_result.as_deref())
        .bind(r.blocked.as_ref().map(|b| b.reason.as_str()))
        .bind(r.blocked.as_ref().map(|b| b.since))
        .bind(releases)
        .bind(ids)
        .bind(states)
        .bind(finished)
        .bind(gone)
        .bind(
            set.iter()
                .map(|b| b.process.to_string())
                .collect::<Vec<_>>(),
        )
        .bind(set.iter().map(|b| b.until).collect::<Vec<_>>())
        .bind(
            set.iter()
                .map(|b| i64::try_from(b.last_interval.as_secs()).unwrap_or(i64::MAX))
                .collect::<Vec<_>>(),
        )
        .bind(set.iter().map(|b| b.cause.as_str()).collect::<Vec<_>>())
        .bind(h.iter().map(|e| e.process.to_string()).collect::<Vec<_>>())
        .bind(h.iter().map(|e| e.event.as_str()).collect::<Vec<_>>())
        .bind(h.iter().map(|e| e.at).collect::<Vec<_>>())
        .bind(h.iter().map(|e| e.cause.as_deref()).collect::<Vec<_>>())
        .bind(h.iter().map(|e| e.slot.map(i64::from)).collect::<Vec<_>>())
        .bind(h.iter().map(|e| e.released).collect::<Vec<_>>())
        .bind(o.iter().map(|n| n.process.to_string()).collect::<Vec<_>>())
        .bind(o.iter().map(|n| n.source.as_str()).collect::<Vec<_>>())
        .bind(o.iter().map(|n| n.created_at).collect::<Vec<_>>())
        .bind(CHANNEL)
        .bind(notify)
        .fetch_all(&mut *tx)
        .await
        .context("writing the node's record")?;
    let get = getter("writing the node's record");
    let mut opened = Vec::new();
    for row in &rows {
        if row.try_get::<Option<i64>, _>("id").map_err(&get)?.is_some() {
            opened.push(crate::rows::request_record(row)?);
        }
    }
    Ok(opened)
}
