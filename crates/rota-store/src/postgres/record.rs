//! Every write of a node's record, with no transaction of its own: the whole record is read
//! (its row with its version, then its open requests and backoffs; `Sql::record`), rota-core
//! decides ([`NodeOverview::apply`]), and one statement persists the difference only if the
//! node's row is still that version and the writer's session still current (a
//! compare-and-swap; the statement is its own transaction, so it commits all of it or nothing).
//! A write that lost its compare-and-swap reads again and decides again.
//!
//! The version is the row's `xmin`: every write that changes a node's record writes its row
//! (a grant too, see `Dialect::TAKE_SLOT`), so a record changed since its row was read has a row of
//! another transaction, and a read that met such a write between its statements is refused too.

use rota_core::{Applied, Write};
use sqlx::{PgConnection, Postgres, Row};

use super::PostgresStore;
use super::changes::{CHANNEL, OPERATOR_WAKES};
use crate::error::{Context, Error, Result};
use crate::model::{BackoffRecord, Millis, NodeOverview, RequestRecord, Session, Writer};
use crate::rows::getter;
use crate::sql::{Read, Sql};

/// `Store::write`: the fence's proof first when asked for, then the node write. A waiter is
/// woken as rota-core says ([`Write::wakes`]); an operator's request or cancel wakes every agent
/// ([`OPERATOR_WAKES`]), so that the node's own idle agent hears of it.
pub(super) async fn write(
    store: &PostgresStore,
    writer: Writer<'_>,
    write: &Write,
) -> Result<crate::Written> {
    let (node, session) = (writer.node(), writer.session());
    if let Writer::Fenced(session, ttl) = writer {
        crate::Store::fence(store, session, ttl).await?;
    }
    // How many wake-ups the write sends, and whether only if it stored a request (a
    // procedure's request the node had before is not stored again).
    let wakes = |applied: &Applied| match write {
        Write::AddRequest { .. } if session.is_none() => (OPERATOR_WAKES, true),
        Write::CancelRequest { .. } if session.is_none() && !applied.closed.is_empty() => {
            (OPERATOR_WAKES, false)
        }
        _ => (u64::from(write.wakes(applied)), false),
    };
    // Fenced by the session when an agent writes (a missing node is then fenced too); an
    // operator's write of an unknown node is `NoSuchNode`. A refused write writes nothing.
    let write_once = async |conn: &mut PgConnection| loop {
        let read = super::read::read_record(conn, node, session).await?;
        let Some(Read {
            record: before,
            version,
            now,
            ..
        }) = read.filter(|r| session.is_none() || r.current)
        else {
            return Err(Error::unwritable(node, session));
        };
        let applied = before.apply(write, now)?;
        if !applied.changed {
            return Sql::<Postgres>::written(conn, node, write, applied, Vec::new()).await;
        }
        let (count, only_if_opened) = wakes(&applied);
        let guard = Guard {
            version: &version,
            session,
            notify: store.payload(count),
            only_if_opened,
        };
        // `None`: another write changed the record since it was read, or the session is no
        // longer current; the next read tells which.
        if let Some(opened) = persist(conn, &before, &applied, now, &guard).await? {
            if !only_if_opened || !opened.is_empty() {
                store.woke(count);
            }
            return Sql::<Postgres>::written(conn, node, write, applied, opened).await;
        }
    };
    store.call("writing the node's record", write_once).await
}

/// What a persisting statement checks before it writes anything, and what it announces.
struct Guard<'a> {
    /// The version of the node's row the record was read from.
    version: &'a str,
    /// The writer's session, which must still be current.
    session: Option<&'a Session>,
    /// The notification of the write's wake-ups.
    notify: Option<String>,
    /// Notify only if a request was stored.
    only_if_opened: bool,
}

/// Writes what changed between `before` and the core's answer in one statement, with the
/// notification of its wake-ups, if `guard` holds: the node's row (always, so that its version
/// changes), the slot given back, the requests moved or closed, the backoffs, the history
/// entries, and last the requests opened (after the ones closed, whose key they may take).
/// Returns what it wrote, or `None` when the guard failed and nothing was written.
async fn persist(
    conn: &mut PgConnection,
    before: &NodeOverview,
    applied: &Applied,
    now: Millis,
    guard: &Guard<'_>,
) -> Result<Option<Vec<RequestRecord>>> {
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
    let sql = "WITH node_row AS ( \
           UPDATE nodes SET state = $2, since = $3, process = $4, pre_cordoned = $5, \
             cordoned_by_rota = $6, boot_id = $7, reboot_started_at = $8, reboot_deadline = $9, \
             last_reboot_at = $10, queued_at = $11, last_result = $12, blocked_reason = $13, \
             blocked_since = $14 WHERE node = $1 AND xmin::TEXT = $35 AND ($36::BIGINT IS NULL \
               OR EXISTS (SELECT 1 FROM sessions se WHERE se.id = $36 \
                 AND se.id = nodes.session_id AND NOT se.superseded \
                 AND se.deadline > rota_now_ms())) \
           RETURNING node, xmin::TEXT AS version \
         ), released AS ( \
           UPDATE slot_rows SET holder = NULL, acquired_at = NULL WHERE $15 AND holder = $1 \
             AND EXISTS (SELECT 1 FROM node_row) \
           RETURNING slot \
         ), moved AS ( \
           UPDATE requests r SET state = t.state, finished_at = t.finished \
           FROM unnest($16::BIGINT[], $17::TEXT[], $18::BIGINT[]) AS t (id, state, finished) \
           WHERE r.id = t.id AND r.node = $1 AND EXISTS (SELECT 1 FROM node_row) \
           RETURNING r.id \
         ), cleared AS ( \
           DELETE FROM backoff WHERE node = $1 AND process = ANY ($19::TEXT[]) \
             AND EXISTS (SELECT 1 FROM node_row) RETURNING process \
         ), backed_off AS ( \
           INSERT INTO backoff (node, process, until, last_interval_s, cause) \
           SELECT $1, t.process, t.until, t.seconds, t.cause \
           FROM unnest($20::TEXT[], $21::BIGINT[], $22::BIGINT[], $23::TEXT[]) \
             AS t (process, until, seconds, cause) WHERE EXISTS (SELECT 1 FROM node_row) \
           ON CONFLICT (node, process) DO UPDATE SET until = excluded.until, \
             last_interval_s = excluded.last_interval_s, cause = excluded.cause \
           RETURNING process \
         ), appended AS ( \
           INSERT INTO history (node, process, event, at, cause, slot, released) \
           SELECT $1, t.process, t.event, t.at, t.cause, t.slot, t.released \
           FROM unnest($24::TEXT[], $25::TEXT[], $26::BIGINT[], $27::TEXT[], $28::BIGINT[], \
             $29::BOOLEAN[]) WITH ORDINALITY AS t (process, event, at, cause, slot, released, i) \
           WHERE EXISTS (SELECT 1 FROM node_row) ORDER BY t.i RETURNING id \
         ), opened AS ( \
           INSERT INTO requests (node, process, source, created_at, state) \
           SELECT $1, t.process, t.source, t.created_at, 'pending' \
           FROM unnest($30::TEXT[], $31::TEXT[], $32::BIGINT[]) WITH ORDINALITY \
             AS t (process, source, created_at, i) \
           WHERE (SELECT count(*) FROM moved) >= 0 AND EXISTS (SELECT 1 FROM node_row) \
           ORDER BY t.i ON CONFLICT DO NOTHING RETURNING id, node, process, source, created_at, state \
         ), notified AS ( \
           SELECT pg_notify($33, $34) WHERE $34 IS NOT NULL AND EXISTS (SELECT 1 FROM node_row) \
             AND (NOT $37 OR EXISTS (SELECT 1 FROM opened)) \
         ) \
         SELECT o.*, (SELECT count(*) FROM notified) AS notified, \
           (SELECT version FROM node_row) AS version FROM ( \
           SELECT 1) one LEFT JOIN opened o ON TRUE ORDER BY o.id";

    let rows = sqlx::query(sql)
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
        .bind(guard.notify.as_deref())
        .bind(guard.version)
        .bind(guard.session.map(|s| s.id))
        .bind(guard.only_if_opened)
        .fetch_all(&mut *conn)
        .await
        .context("writing the node's record")?;
    let get = getter("writing the node's record");
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    if first
        .try_get::<Option<String>, _>("version")
        .map_err(&get)?
        .is_none()
    {
        return Ok(None);
    }
    let mut opened = Vec::new();
    for row in &rows {
        if row.try_get::<Option<i64>, _>("id").map_err(&get)?.is_some() {
            opened.push(crate::rows::request_record(row)?);
        }
    }
    Ok(Some(opened))
}
