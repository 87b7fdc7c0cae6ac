//! Every write of a node's record: read it inside the write's transaction (`BEGIN
//! IMMEDIATE` holds SQLite's one write lock, so what is read stays current until the commit),
//! let rota-core decide ([`NodeOverview::apply`]), and persist what changed. Each statement is a
//! round trip to SQLite's own thread, so a write reads in one and writes no more than it must.

use rota_core::{Applied, NodeName, Write};
use sqlx::{Sqlite, SqliteConnection};

use crate::error::{Context, Error, Result};
use crate::model::{
    BackoffRecord, Millis, NodeOverview, NodeRecord, RequestRecord, Session, Writer,
};
use crate::rows::{SqlRow, getter, request_record};
use crate::sql::{Dialect, Read, Sql};

/// `Store::write` after the fence's proof: reads the node's record, fenced by the writer's
/// session when an agent writes (a node without a record is then fenced too; an operator's
/// write of an unknown node is `NoSuchNode`), lets rota-core decide, and persists what
/// changed; a refused write writes nothing. With the answer, whether it wakes a waiter
/// ([`Write::wakes`]).
pub(super) async fn write(
    tx: &mut SqliteConnection,
    writer: Writer<'_>,
    write: &Write,
) -> Result<(crate::Written, bool)> {
    let (node, session) = (writer.node(), writer.session());
    let read = Sql::<Sqlite>::record(tx, node, session).await?;
    let Some(Read {
        record: before,
        now,
        ..
    }) = read.filter(|read| session.is_none() || read.current)
    else {
        return Err(Error::unwritable(node, session));
    };
    let applied = before.apply(write, now)?;
    let opened = persist(tx, &before, &applied, now).await?;
    let wakes = write.wakes(&applied);
    let written = Sql::<Sqlite>::written(tx, node, write, applied, opened).await?;
    Ok((written, wakes))
}

/// Writes what changed between `before` and the core's answer.
async fn persist(
    tx: &mut SqliteConnection,
    before: &NodeOverview,
    applied: &Applied,
    now: Millis,
) -> Result<Vec<RequestRecord>> {
    let node = &before.record.node;
    let after = &applied.after;
    if after.record != before.record {
        write_row(tx, &after.record).await?;
    }
    if before.record.slot.is_some() && after.record.slot.is_none() {
        sqlx::query("DELETE FROM slots WHERE holder = ?")
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("releasing the slot")?;
    }
    for request in &after.open_requests {
        let moved = before
            .open_requests
            .iter()
            .any(|r| r.id == request.id && r.state != request.state);
        if moved {
            set_request_state(tx, request, None).await?;
        }
    }
    for request in &applied.closed {
        set_request_state(tx, request, Some(now)).await?;
    }
    write_backoffs(tx, node, &before.backoffs, &after.backoffs).await?;
    if !applied.history.is_empty() {
        let values = vec!["(?, ?, ?, ?, ?, ?, ?)"; applied.history.len()].join(", ");
        let sql = format!(
            "INSERT INTO history (node, process, event, at, cause, slot, released) VALUES {values}"
        );
        let mut insert = sqlx::query(&sql);
        for entry in &applied.history {
            insert = insert
                .bind(node.as_str())
                .bind(entry.process.to_string())
                .bind(entry.event.to_string())
                .bind(entry.at)
                .bind(entry.cause.clone())
                .bind(entry.slot.map(i64::from))
                .bind(entry.released);
        }
        insert
            .execute(&mut *tx)
            .await
            .context("appending history")?;
    }
    let mut opened = Vec::new();
    for request in &applied.opened {
        // The keys refuse a second request of a procedure the node ever had: its request is
        // made once per node.
        let row = sqlx::query(
            "INSERT INTO requests (node, process, source, created_at, state) \
             VALUES (?, ?, ?, ?, 'pending') ON CONFLICT DO NOTHING RETURNING *",
        )
        .bind(node.as_str())
        .bind(request.process.to_string())
        .bind(&request.source)
        .bind(request.created_at)
        .fetch_optional(&mut *tx)
        .await
        .context("recording a request")?;
        if let Some(row) = row {
            opened.push(request_record(&row)?);
        }
    }
    Ok(opened)
}

async fn write_row(tx: &mut SqliteConnection, record: &NodeRecord) -> Result<()> {
    sqlx::query(
        "UPDATE nodes SET state = ?, since = ?, process = ?, pre_cordoned = ?, \
         cordoned_by_rota = ?, boot_id = ?, reboot_started_at = ?, reboot_deadline = ?, \
         last_reboot_at = ?, queued_at = ?, last_result = ?, blocked_reason = ?, \
         blocked_since = ? WHERE node = ?",
    )
    .bind(record.state.as_str())
    .bind(record.since)
    .bind(record.process.as_ref().map(ToString::to_string))
    .bind(record.pre_cordoned)
    .bind(record.cordoned_by_rota)
    .bind(record.boot_id.as_deref())
    .bind(record.reboot_started_at)
    .bind(record.reboot_deadline)
    .bind(record.last_reboot_at)
    .bind(record.queued_at)
    .bind(record.last_result.as_deref())
    .bind(record.blocked.as_ref().map(|b| b.reason.as_str()))
    .bind(record.blocked.as_ref().map(|b| b.since))
    .bind(record.node.as_str())
    .execute(&mut *tx)
    .await
    .context("updating the node")?;
    Ok(())
}

async fn set_request_state(
    tx: &mut SqliteConnection,
    request: &RequestRecord,
    finished_at: Option<Millis>,
) -> Result<()> {
    sqlx::query("UPDATE requests SET state = ?, finished_at = ? WHERE id = ?")
        .bind(request.state.as_str())
        .bind(finished_at)
        .bind(request.id)
        .execute(&mut *tx)
        .await
        .context("updating requests")?;
    Ok(())
}

async fn write_backoffs(
    tx: &mut SqliteConnection,
    node: &NodeName,
    before: &[BackoffRecord],
    after: &[BackoffRecord],
) -> Result<()> {
    for gone in before
        .iter()
        .filter(|b| !after.iter().any(|a| a.process == b.process))
    {
        sqlx::query("DELETE FROM backoff WHERE node = ? AND process = ?")
            .bind(node.as_str())
            .bind(gone.process.to_string())
            .execute(&mut *tx)
            .await
            .context("clearing backoff")?;
    }
    for backoff in after.iter().filter(|a| !before.contains(a)) {
        let seconds = i64::try_from(backoff.last_interval.as_secs()).unwrap_or(i64::MAX);
        sqlx::query(
            "INSERT INTO backoff (node, process, until, last_interval_s, cause) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (node, process) DO UPDATE SET \
             until = excluded.until, last_interval_s = excluded.last_interval_s, \
             cause = excluded.cause",
        )
        .bind(node.as_str())
        .bind(backoff.process.to_string())
        .bind(backoff.until)
        .bind(seconds)
        .bind(&backoff.cause)
        .execute(&mut *tx)
        .await
        .context("recording backoff")?;
    }
    Ok(())
}

/// Opens a session of `node`, superseding its older ones, and registers the node (idle) if
/// it is new, in the write transaction, so that a write of the old session either commits
/// before the new session exists or is refused.
pub(super) async fn open_session(
    conn: &mut SqliteConnection,
    node: &NodeName,
    ttl_ms: i64,
) -> Result<Session> {
    const CONTEXT: &str = "opening a session";
    let node_name = node.as_str();
    sqlx::query("UPDATE sessions SET superseded = TRUE WHERE node = $1 AND NOT superseded")
        .bind(node_name)
        .execute(&mut *conn)
        .await
        .context(CONTEXT)?;
    let row = sqlx::query(&format!(
        "INSERT INTO sessions (node, started_at, deadline) VALUES ($1, {now}, {now} + $2) \
         RETURNING id, started_at",
        now = <Sqlite as Dialect>::NOW
    ))
    .bind(node_name)
    .bind(ttl_ms)
    .fetch_one(&mut *conn)
    .await
    .context(CONTEXT)?;
    let now: i64 = row.column("started_at").map_err(getter(CONTEXT))?;
    let id: i64 = row.column("id").map_err(getter(CONTEXT))?;
    sqlx::query(
        "INSERT INTO nodes (node, session_id, state, since) VALUES ($1, $2, 'idle', $3) \
         ON CONFLICT (node) DO UPDATE SET session_id = excluded.session_id",
    )
    .bind(node_name)
    .bind(id)
    .bind(now)
    .execute(&mut *conn)
    .await
    .context(CONTEXT)?;
    Ok(Session {
        id,
        node: node.clone(),
    })
}
