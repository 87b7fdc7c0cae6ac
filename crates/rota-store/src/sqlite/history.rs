//! `Store::read_history` on SQLite: each part asked for is one statement on one connection.

use rota_core::NodeName;
use sqlx::SqliteConnection;

use crate::error::{Context, Result};
use crate::model::{History, HistoryFilter, Parts};
use crate::rows::{audit_record, history_entry, request_record, step_record};

pub(super) async fn read_history(
    conn: &mut SqliteConnection,
    filter: &HistoryFilter,
    parts: Parts,
) -> Result<History> {
    let node = filter.node.as_ref().map(NodeName::as_str);
    let process = filter.process.as_ref().map(ToString::to_string);
    let mut history = History::default();
    if parts.entries {
        let rows = sqlx::query(
            "SELECT id, node, process, event, at, cause, slot, released FROM history \
             WHERE (?1 IS NULL OR node = ?1) AND (?2 IS NULL OR process = ?2) \
             AND (?3 IS NULL OR event = ?3) AND (?4 IS NULL OR at >= ?4) \
             AND (?5 IS NULL OR at <= ?5) ORDER BY id",
        )
        .bind(node)
        .bind(process.as_deref())
        .bind(filter.event.map(|e| e.to_string()))
        .bind(filter.since)
        .bind(filter.until)
        .fetch_all(&mut *conn)
        .await
        .context("reading history")?;
        history.entries = rows.iter().map(history_entry).collect::<Result<_>>()?;
    }
    if parts.steps {
        let rows = sqlx::query(
            "SELECT node, state, at FROM steps WHERE (?1 IS NULL OR node = ?1) \
             AND (?2 IS NULL OR at >= ?2) AND (?3 IS NULL OR at <= ?3) ORDER BY id",
        )
        .bind(node)
        .bind(filter.since)
        .bind(filter.until)
        .fetch_all(&mut *conn)
        .await
        .context("reading steps")?;
        history.steps = rows.iter().map(step_record).collect::<Result<_>>()?;
    }
    // An operator's command is no history event: a filter by event lets none through.
    if parts.audit && filter.event.is_none() {
        let rows = sqlx::query(
            "SELECT at, command, node, process, by, reason FROM audit_records \
             WHERE (?1 IS NULL OR node = ?1) AND (?2 IS NULL OR process = ?2) \
             AND (?3 IS NULL OR at >= ?3) AND (?4 IS NULL OR at <= ?4) ORDER BY id",
        )
        .bind(node)
        .bind(process.as_deref())
        .bind(filter.since)
        .bind(filter.until)
        .fetch_all(&mut *conn)
        .await
        .context("reading audit records")?;
        history.audit = rows.iter().map(audit_record).collect::<Result<_>>()?;
    }
    if parts.requests {
        let rows = sqlx::query(
            "SELECT * FROM requests WHERE (?1 IS NULL OR node = ?1) \
             AND (?2 IS NULL OR process = ?2) ORDER BY id",
        )
        .bind(node)
        .bind(process.as_deref())
        .fetch_all(&mut *conn)
        .await
        .context("reading requests")?;
        history.requests = rows.iter().map(request_record).collect::<Result<_>>()?;
    }
    Ok(history)
}
