//! The reads both SQL stores make alike, on one connection: the fleet, its settings, the
//! procedures, and the past (`Store::read_history`: one statement a part asked for). The SQL is
//! the same on SQLite and PostgreSQL (`$N` parameters, which SQLite reads as positions too, and `CAST`
//! where PostgreSQL must know a parameter's type before it sees a value). Every statement takes
//! the filter's five values in the same places; one a table has no column for is read as no
//! condition (`OR TRUE`), since PostgreSQL refuses a value its statement does not name.

use rota_core::{HistoryEvent, NodeName};
use sqlx::{Database, Encode, Executor, IntoArguments, Type};

use crate::error::{Context, Result};
use crate::model::{
    Fleet, History, HistoryFilter, Parts, Pause, ProcedureRecord, Settings, decode_resumed_at,
};
use crate::rows::{
    ALL_BACKOFFS_SQL, ALL_OPEN_REQUESTS_SQL, SqlRow, all_nodes_sql, audit_record, concurrency,
    history_entry, overview, procedure_record, request_record, slot_holder, step_record,
};

/// Every node's record and every slot's holder: four statements, whatever the fleet's size.
pub(crate) async fn fleet<DB>(conn: &mut DB::Connection) -> Result<Fleet>
where
    DB: Database,
    DB::Row: SqlRow,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    let nodes_sql = all_nodes_sql();
    let mut rows = async |sql: &str, context: &'static str| {
        sqlx::query::<DB>(sql)
            .fetch_all(&mut *conn)
            .await
            .context(context)
    };
    let nodes = rows(&nodes_sql, "reading nodes").await?;
    let requests = rows(ALL_OPEN_REQUESTS_SQL, "reading requests").await?;
    let backoffs = rows(ALL_BACKOFFS_SQL, "reading backoff").await?;
    let slots = rows(
        "SELECT slot, holder, acquired_at FROM slots ORDER BY slot",
        "reading slots",
    )
    .await?;
    Ok(Fleet {
        nodes: overview(&nodes, &requests, &backoffs)?,
        slots: slots.iter().map(slot_holder).collect::<Result<_>>()?,
    })
}

/// The fleet's settings, each a key of `rota_meta`.
pub(crate) async fn settings<DB>(conn: &mut DB::Connection) -> Result<Settings>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'r> (String, String): sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<(String, String)> = sqlx::query_as::<DB, _>("SELECT key, value FROM rota_meta")
        .fetch_all(&mut *conn)
        .await
        .context("reading the settings")?;
    let value = |key: &str| rows.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    Ok(Settings {
        concurrency: value("concurrency")
            .map(|v| concurrency("rota_meta.concurrency", v))
            .transpose()?,
        pause: Pause::decode("rota_meta.paused", value("paused").as_deref())?,
        resumed_at: decode_resumed_at("rota_meta.resumed_at", value("resumed_at").as_deref())?,
    })
}

/// Every procedure, in the order they were submitted.
pub(crate) async fn procedures<DB>(conn: &mut DB::Connection) -> Result<Vec<ProcedureRecord>>
where
    DB: Database,
    DB::Row: SqlRow,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    sqlx::query::<DB>("SELECT spec, submitted_at FROM procedures ORDER BY seq")
        .fetch_all(&mut *conn)
        .await
        .context("reading procedures")?
        .iter()
        .map(procedure_record)
        .collect()
}

const ENTRIES: &str = "SELECT id, node, process, event, at, cause, slot, released FROM history \
     WHERE (CAST($1 AS TEXT) IS NULL OR node = $1) AND (CAST($2 AS TEXT) IS NULL OR process = $2) \
     AND (CAST($3 AS TEXT) IS NULL OR event = $3) AND (CAST($4 AS BIGINT) IS NULL OR at >= $4) \
     AND (CAST($5 AS BIGINT) IS NULL OR at <= $5) ORDER BY id";

const STEPS: &str = "SELECT node, state, at FROM steps \
     WHERE (CAST($1 AS TEXT) IS NULL OR node = $1) AND (CAST($2 AS TEXT) IS NULL OR TRUE) \
     AND (CAST($3 AS TEXT) IS NULL OR TRUE) AND (CAST($4 AS BIGINT) IS NULL OR at >= $4) \
     AND (CAST($5 AS BIGINT) IS NULL OR at <= $5) ORDER BY id";

const AUDIT: &str = "SELECT at, command, node, process, by, reason FROM audit_records \
     WHERE (CAST($1 AS TEXT) IS NULL OR node = $1) AND (CAST($2 AS TEXT) IS NULL OR process = $2) \
     AND (CAST($3 AS TEXT) IS NULL OR TRUE) AND (CAST($4 AS BIGINT) IS NULL OR at >= $4) \
     AND (CAST($5 AS BIGINT) IS NULL OR at <= $5) ORDER BY id";

const REQUESTS: &str = "SELECT id, node, process, source, created_at, state FROM requests \
     WHERE (CAST($1 AS TEXT) IS NULL OR node = $1) AND (CAST($2 AS TEXT) IS NULL OR process = $2) \
     AND (CAST($3 AS TEXT) IS NULL OR TRUE) AND (CAST($4 AS BIGINT) IS NULL OR TRUE) \
     AND (CAST($5 AS BIGINT) IS NULL OR TRUE) ORDER BY id";

pub(crate) async fn read_history<DB>(
    conn: &mut DB::Connection,
    filter: &HistoryFilter,
    parts: Parts,
) -> Result<History>
where
    DB: Database,
    DB::Row: SqlRow,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    Option<i64>: for<'q> Encode<'q, DB> + Type<DB>,
{
    let node = filter.node.as_ref().map(NodeName::as_str);
    let process = filter.process.as_ref().map(ToString::to_string);
    let event = filter.event.map(HistoryEvent::as_str);
    let mut rows = async |sql: &'static str, context: &'static str| {
        sqlx::query::<DB>(sql)
            .bind(node)
            .bind(process.as_deref())
            .bind(event)
            .bind(filter.since)
            .bind(filter.until)
            .fetch_all(&mut *conn)
            .await
            .context(context)
    };
    let mut history = History::default();
    if parts.entries {
        let read = rows(ENTRIES, "reading history").await?;
        history.entries = read.iter().map(history_entry).collect::<Result<_>>()?;
    }
    if parts.steps {
        let read = rows(STEPS, "reading steps").await?;
        history.steps = read.iter().map(step_record).collect::<Result<_>>()?;
    }
    // An operator's command is no history event: a filter by event lets none through.
    if parts.audit && filter.event.is_none() {
        let read = rows(AUDIT, "reading audit records").await?;
        history.audit = read.iter().map(audit_record).collect::<Result<_>>()?;
    }
    if parts.requests {
        let read = rows(REQUESTS, "reading requests").await?;
        history.requests = read.iter().map(request_record).collect::<Result<_>>()?;
    }
    Ok(history)
}
