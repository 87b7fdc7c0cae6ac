//! Every write of a node's record, with no transaction of its own: the whole record is read
//! in one statement (its row with its version, its open requests and backoffs; `Sql::record`), rota-core
//! decides ([`NodeOverview::apply`]), and one statement persists the difference only if the
//! node's row is still that version and the writer's session still current (a
//! compare-and-swap; the statement is its own transaction, so it commits all of it or nothing).
//! A write that lost its compare-and-swap reads again and decides again.
//!
//! The version is the row's `xmin`: every write that changes a node's record writes its row
//! (a grant too, see `Dialect::TAKE_SLOT`), so a record changed since its row was read has a
//! row of another transaction.

use rota_core::{Applied, Write};
use sqlx::{PgConnection, Postgres};

use super::PostgresStore;
use super::changes::{CHANNEL, OPERATOR_WAKES};
use crate::error::{Context, Result};
use crate::model::{RequestRecord, Session, Writer};
use crate::rows::{SqlRow, request_record};
use crate::sql::{Changes, Read, Sql, UPDATE_NODE, change_sql};

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
    // A refused write writes nothing.
    let write_once = async |conn: &mut PgConnection| loop {
        let (read, applied) = Sql::<Postgres>::decide(conn, writer, write).await?;
        if !applied.changed {
            return Sql::<Postgres>::written(conn, node, write, applied, Vec::new()).await;
        }
        let (count, only_if_opened) = wakes(&applied);
        let guard = Guard {
            session,
            notify: store.payload(count),
            only_if_opened,
        };
        // `None`: another write changed the record since it was read, or the session is no
        // longer current; the next read tells which.
        if let Some(opened) = persist(conn, &read, &applied, &guard).await? {
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
    /// The writer's session, which must still be current.
    session: Option<&'a Session>,
    /// The notification of the write's wake-ups.
    notify: Option<String>,
    /// Notify only if a request was stored.
    only_if_opened: bool,
}

/// Writes what changed between `before` and the core's answer in one statement, with the
/// notification of its wake-ups, if the row is still the version read and `guard` holds: the node's row (always, so that its version
/// changes), the slot given back, the requests moved or closed, the backoffs, the history
/// entries, and last the requests opened (after the ones closed, whose key they may take).
/// Returns what it wrote, or `None` when the guard failed and nothing was written.
async fn persist(
    conn: &mut PgConnection,
    read: &Read,
    applied: &Applied,
    guard: &Guard<'_>,
) -> Result<Option<Vec<RequestRecord>>> {
    let before = &read.record;
    let changes = Changes::of(before, applied, read.now);
    // Every other change only once the node's row is written (the guard held); the requests
    // opened after those closed, whose key they may take.
    let written = "EXISTS (SELECT 1 FROM node_row)";
    let after_moved = format!("(SELECT count(*) FROM moved) >= 0 AND {written}");
    let [moved, cleared, set, history, opened] = change_sql::<Postgres>(
        ["$18", "$19", "$20", "$21", "$22"],
        [written, written, written, written, &after_moved],
    );
    let sql = format!(
        "WITH node_row AS ( \
           {UPDATE_NODE} AND xmin::TEXT = $25 AND ($26::BIGINT IS NULL \
               OR EXISTS (SELECT 1 FROM sessions se WHERE se.id = $26 \
                 AND se.id = nodes.session_id AND NOT se.superseded \
                 AND se.deadline > rota_now_ms())) \
           RETURNING node, xmin::TEXT AS version \
         ), released AS ( \
           UPDATE slot_rows SET holder = NULL, acquired_at = NULL WHERE $17 AND holder = $1 \
             AND {written} RETURNING slot \
         ), moved AS ({moved}), cleared AS ({cleared}), backed_off AS ({set}), \
           appended AS ({history}), opened AS ({opened}), notified AS ( \
           SELECT pg_notify($23, $24) WHERE $24 IS NOT NULL AND {written} \
             AND (NOT $27 OR EXISTS (SELECT 1 FROM opened)) \
         ) \
         SELECT o.*, (SELECT count(*) FROM notified) AS notified, \
           (SELECT version FROM node_row) AS version FROM ( \
           SELECT 1) one LEFT JOIN opened o ON TRUE ORDER BY o.id",
    );
    let rows = Sql::<Postgres>::bind_row(sqlx::query(&sql), &applied.after.record)
        .bind(before.record.slot.is_some() && applied.after.record.slot.is_none())
        .bind(&changes.moved)
        .bind(&changes.cleared)
        .bind(&changes.backoffs)
        .bind(&changes.history)
        .bind(&changes.opened)
        .bind(CHANNEL)
        .bind(guard.notify.as_deref())
        .bind(&read.version)
        .bind(guard.session.map(|s| s.id))
        .bind(guard.only_if_opened)
        .fetch_all(&mut *conn)
        .await
        .context("writing the node's record")?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    if first.column::<Option<String>>("version")?.is_none() {
        return Ok(None);
    }
    let mut opened = Vec::new();
    for row in &rows {
        if row.column::<Option<i64>>("id")?.is_some() {
            opened.push(request_record(row)?);
        }
    }
    Ok(Some(opened))
}
