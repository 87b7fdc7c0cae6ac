//! The statements both SQL stores make alike, on one connection: the reads (the fleet, its
//! settings, the procedures, the past) and the writes that need no rule of the core (sessions,
//! the fence, settings, procedures, the audit trail). The SQL is the same on SQLite and
//! PostgreSQL (`$N` parameters, which SQLite reads as positions too, and `CAST` where
//! PostgreSQL must know a parameter's type before it sees a value); what differs is a
//! [`Dialect`]'s. A write runs in the transaction its store began, which commits it.

use std::marker::PhantomData;

use rota_core::{Applied, HistoryEvent, NodeName, ProcedureSpec, Process, Write};
use sqlx::migrate::Migrator;
use sqlx::{Database, Encode, Executor, IntoArguments, Postgres, Sqlite, Type};

use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::{Context, Error, Result};
use crate::model::{
    Fleet, History, HistoryFilter, NodeOverview, Part, Pause, ProcedureRecord, RequestRecord,
    Session, Setting, Settings, Written, decode_setting,
};
use crate::rows::{
    NODE_COLUMNS, SqlRow, audit_record, concurrency, getter, history_entry, overview,
    procedure_record, request_record, slot_holder, step_record, stored_slot_if_any,
};

/// What the two databases spell differently.
pub(crate) trait Dialect: Database {
    /// The database's clock, in milliseconds since the epoch.
    const NOW: &'static str;
    /// The names of the tables in the database (in its current schema).
    const TABLES: &'static str;
}

impl Dialect for Sqlite {
    const NOW: &'static str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";
    const TABLES: &'static str =
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'";
}

impl Dialect for Postgres {
    const NOW: &'static str = "rota_now_ms()";
    // Only the current schema's, so that a shared database can give rota a schema of its own
    // through `search_path`.
    const TABLES: &'static str = "SELECT CAST(table_name AS TEXT) AS name \
         FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name";
}

/// A node's record as a write reads it.
pub(crate) struct Read {
    pub(crate) record: NodeOverview,
    /// Whether the writer's session is the node's current, unexpired one.
    pub(crate) current: bool,
    /// The version of the node's row, which PostgreSQL's compare-and-swap checks (empty from
    /// SQLite, whose write transaction needs none).
    pub(crate) version: String,
    /// The database's clock, for every timestamp of the write.
    pub(crate) now: i64,
}

/// A duration as the stores keep it, in milliseconds, capped far below `i64::MAX` so that
/// `now + ttl` cannot overflow in SQL.
pub(crate) fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis())
        .unwrap_or(i64::MAX)
        .min(1 << 52)
}

/// The shared statements on a connection of `DB`, e.g. `Sql::<Sqlite>::fleet(conn)`.
pub(crate) struct Sql<DB>(PhantomData<DB>);

impl<DB> Sql<DB>
where
    DB: Dialect,
    DB::Row: SqlRow,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    Option<i64>: for<'q> Encode<'q, DB> + Type<DB>,
{
    /// Every node's record and every slot's holder: four statements, whatever the fleet's size.
    pub(crate) async fn fleet(conn: &mut DB::Connection) -> Result<Fleet> {
        let (nodes, _) = Self::records(conn, None).await?;
        let slots = sqlx::query::<DB>("SELECT slot, holder, acquired_at FROM slots ORDER BY slot")
            .fetch_all(&mut *conn)
            .await
            .context("reading slots")?;
        Ok(Fleet {
            nodes,
            slots: slots.iter().map(slot_holder).collect::<Result<_>>()?,
        })
    }

    /// `node`'s record (its row, slot, open requests and backoffs) as a write reads it:
    /// three statements.
    pub(crate) async fn record(
        conn: &mut DB::Connection,
        node: &NodeName,
        session: Option<&Session>,
    ) -> Result<Option<Read>> {
        let (records, read) = Self::records(conn, Some((node, session.map(|s| s.id))))
            .await
            .map_err(|e| e.of_node(node.as_str()))?;
        Ok(records
            .into_iter()
            .next()
            .zip(read)
            .map(|(record, (current, now))| Read {
                record,
                current,
                version: String::new(),
                now,
            }))
    }

    /// Every node's record, or with `only` one node's and the rest of a [`Read`] with the
    /// session given.
    async fn records(
        conn: &mut DB::Connection,
        only: Option<(&NodeName, Option<i64>)>,
    ) -> Result<(Vec<NodeOverview>, Option<(bool, i64)>)> {
        let (of_node, of_row, read) = match only {
            Some(_) => (
                "WHERE n.node = $1",
                "AND node = $1",
                format!(
                    ", EXISTS (SELECT 1 FROM sessions se WHERE se.id = n.session_id \
                       AND se.id = CAST($2 AS BIGINT) AND NOT se.superseded \
                       AND se.deadline > {now}) AS current, {now} AS now",
                    now = DB::NOW,
                ),
            ),
            None => ("", "", String::new()),
        };
        let nodes_sql = format!(
            "SELECT {NODE_COLUMNS}{read} FROM nodes n \
             LEFT JOIN slots s ON s.holder = n.node {of_node} ORDER BY n.node"
        );
        let requests_sql = format!(
            "SELECT id, node, process, source, created_at, state FROM requests \
             WHERE state IN ('pending', 'active') {of_row} ORDER BY id"
        );
        let backoffs_sql = format!(
            "SELECT node, process, until, last_interval_s, cause FROM backoff \
             WHERE TRUE {of_row} ORDER BY node, process"
        );
        let mut rows = async |sql: &str, context: &'static str, session: bool| {
            let mut query = sqlx::query::<DB>(sql);
            if let Some((node, id)) = only {
                query = query.bind(node.as_str());
                if session {
                    query = query.bind(id);
                }
            }
            query.fetch_all(&mut *conn).await.context(context)
        };
        let nodes = rows(&nodes_sql, "reading nodes", true).await?;
        let requests = rows(&requests_sql, "reading requests", false).await?;
        let backoffs = rows(&backoffs_sql, "reading backoff", false).await?;
        let get = getter("reading nodes");
        let read = match (only, nodes.first()) {
            (Some(_), Some(row)) => Some((
                row.column("current").map_err(&get)?,
                row.column("now").map_err(&get)?,
            )),
            _ => None,
        };
        Ok((overview(&nodes, &requests, &backoffs)?, read))
    }

    /// The fleet's settings, each a key of `rota_meta`.
    pub(crate) async fn settings(conn: &mut DB::Connection) -> Result<Settings> {
        let rows = sqlx::query::<DB>("SELECT key, value FROM rota_meta")
            .fetch_all(&mut *conn)
            .await
            .context("reading the settings")?;
        let get = getter("reading the settings");
        let rows = rows
            .iter()
            .map(|row| {
                Ok((
                    row.column("key").map_err(&get)?,
                    row.column("value").map_err(&get)?,
                ))
            })
            .collect::<Result<Vec<(String, String)>>>()?;
        let value = |key: &str| rows.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        Ok(Settings {
            concurrency: value("concurrency")
                .map(|v| concurrency("rota_meta.concurrency", v))
                .transpose()?,
            pause: decode_setting(
                "rota_meta.paused",
                value("paused").as_deref(),
                Pause::decode,
            )?,
            resumed_at: decode_setting(
                "rota_meta.resumed_at",
                value("resumed_at").as_deref(),
                str::parse,
            )?,
        })
    }

    /// Every procedure, in the order they were submitted.
    pub(crate) async fn procedures(conn: &mut DB::Connection) -> Result<Vec<ProcedureRecord>> {
        sqlx::query::<DB>("SELECT spec, submitted_at FROM procedures ORDER BY seq")
            .fetch_all(&mut *conn)
            .await
            .context("reading procedures")?
            .iter()
            .map(procedure_record)
            .collect()
    }

    pub(crate) async fn read_history(
        conn: &mut DB::Connection,
        filter: &HistoryFilter,
        part: Part,
    ) -> Result<History> {
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
        match part {
            Part::Entries => {
                let read = rows(ENTRIES, "reading history").await?;
                history.entries = read.iter().map(history_entry).collect::<Result<_>>()?;
            }
            Part::Steps => {
                let read = rows(STEPS, "reading steps").await?;
                history.steps = read.iter().map(step_record).collect::<Result<_>>()?;
            }
            // An operator's command is no history event: a filter by event lets none through.
            Part::Audit if filter.event.is_some() => {}
            Part::Audit => {
                let read = rows(AUDIT, "reading audit records").await?;
                history.audit = read.iter().map(audit_record).collect::<Result<_>>()?;
            }
            Part::Requests => {
                let read = rows(REQUESTS, "reading requests").await?;
                history.requests = read.iter().map(request_record).collect::<Result<_>>()?;
            }
        }
        Ok(history)
    }

    /// Refuses a database that holds other programs' tables, or a rota schema newer than
    /// `migrator`'s, before anything is changed.
    pub(crate) async fn check_is_rota(
        conn: &mut DB::Connection,
        location: &str,
        migrator: &Migrator,
    ) -> Result<()> {
        let not_rota = |e: sqlx::Error| Error::NotRota {
            location: location.to_string(),
            reason: e.to_string(),
        };
        let tables = sqlx::query::<DB>(DB::TABLES)
            .fetch_all(&mut *conn)
            .await
            .map_err(not_rota)?
            .iter()
            .map(|row| row.column("name"))
            .collect::<std::result::Result<Vec<String>, _>>()
            .map_err(not_rota)?;
        // Only the migrations table: another process is creating the schema right now.
        if tables.iter().all(|t| t == "_sqlx_migrations") {
            return Ok(());
        }
        if !tables.iter().any(|t| t == "rota_meta") {
            return Err(Error::NotRota {
                location: location.to_string(),
                reason: format!("it holds other tables ({})", tables.join(", ")),
            });
        }
        let found: Option<i64> =
            sqlx::query::<DB>("SELECT MAX(version) AS version FROM _sqlx_migrations")
                .fetch_one(&mut *conn)
                .await
                .map_err(not_rota)?
                .column("version")
                .map_err(not_rota)?;
        let supported = migrator.iter().map(|m| m.version).max().unwrap_or(0);
        match found {
            Some(found) if found > supported => Err(Error::SchemaTooNew {
                location: location.to_string(),
                found,
                supported,
            }),
            _ => Ok(()),
        }
    }

    /// The database's clock now.
    async fn now(conn: &mut DB::Connection) -> Result<i64> {
        let row = sqlx::query::<DB>(&format!("SELECT {} AS now", DB::NOW))
            .fetch_one(&mut *conn)
            .await
            .context("reading the clock")?;
        row.column("now").map_err(getter("reading the clock"))
    }

    /// Extends `session` only while it is its node's current, unexpired session.
    pub(crate) async fn heartbeat(
        conn: &mut DB::Connection,
        session: &Session,
        ttl_ms: i64,
    ) -> Result<()> {
        let now = DB::NOW;
        let extended = sqlx::query::<DB>(&format!(
            "UPDATE sessions SET deadline = {now} + $1 WHERE id = $2 AND NOT superseded \
             AND deadline > {now} AND id = (SELECT session_id FROM nodes WHERE node = $3) \
             RETURNING id"
        ))
        .bind(ttl_ms)
        .bind(session.id)
        .bind(session.node.as_str())
        .fetch_optional(&mut *conn)
        .await
        .context("extending the session")?;
        if extended.is_some() {
            return Ok(());
        }
        let latest = sqlx::query::<DB>(
            "SELECT s.id FROM nodes n JOIN sessions s ON s.id = n.session_id \
             WHERE n.node = $1 AND s.id = $2 AND NOT s.superseded",
        )
        .bind(session.node.as_str())
        .bind(session.id)
        .fetch_optional(&mut *conn)
        .await
        .context("checking the session")?;
        Err(Error::renewal_refused(session, latest.is_some()))
    }

    pub(crate) async fn close_session(conn: &mut DB::Connection, session: &Session) -> Result<()> {
        let now = DB::NOW;
        sqlx::query::<DB>(&format!(
            "UPDATE sessions SET deadline = {now} WHERE id = $1 AND deadline > {now}"
        ))
        .bind(session.id)
        .execute(&mut *conn)
        .await
        .context("closing the session")?;
        Ok(())
    }

    /// The fence's proof, in one statement: extends the session only while it is current and its
    /// node holds a slot; returns the slot.
    pub(crate) async fn fence(
        conn: &mut DB::Connection,
        session: &Session,
        ttl_ms: i64,
    ) -> Result<u32> {
        const CONTEXT: &str = "checking slot ownership";
        let now = DB::NOW;
        let row = sqlx::query::<DB>(&format!(
            "UPDATE sessions SET deadline = {now} + $1 WHERE id = $2 AND NOT superseded \
             AND deadline > {now} AND id = (SELECT session_id FROM nodes WHERE node = $3) \
             AND EXISTS (SELECT 1 FROM slots WHERE holder = $3) \
             RETURNING (SELECT slot FROM slots WHERE holder = $3) AS slot"
        ))
        .bind(ttl_ms)
        .bind(session.id)
        .bind(session.node.as_str())
        .fetch_optional(&mut *conn)
        .await
        .context(CONTEXT)?;
        let slot = match row {
            Some(row) => row.column("slot").map_err(getter(CONTEXT))?,
            None => None,
        };
        stored_slot_if_any("slots.slot", slot)?.ok_or_else(|| Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        })
    }

    /// `Store::set`: a resume records its rollout and lifts the pause in one transaction.
    /// Returns the pause set or lifted.
    pub(crate) async fn set(conn: &mut DB::Connection, setting: &Setting) -> Result<Option<Pause>> {
        match setting {
            Setting::Concurrency(concurrency) => {
                Self::set_meta(conn, "concurrency", Some(concurrency.to_string())).await?;
                Ok(None)
            }
            Setting::Pause { reason } => {
                let pause = Pause {
                    reason: reason.clone(),
                    since: Self::now(conn).await?,
                };
                Self::set_meta(conn, "paused", Some(pause.encode())).await?;
                Ok(Some(pause))
            }
            Setting::Resume => {
                // A new rollout starts now, before the pause is lifted.
                let now = Self::now(conn).await?;
                Self::set_meta(conn, "resumed_at", Some(now.to_string())).await?;
                let lifted = Self::set_meta(conn, "paused", None).await?;
                decode_setting("rota_meta.paused", lifted.as_deref(), Pause::decode)
            }
        }
    }

    /// Sets (or with `None` removes) one of the settings; returns the value it had.
    async fn set_meta(
        conn: &mut DB::Connection,
        key: &str,
        value: Option<String>,
    ) -> Result<Option<String>> {
        let previous = sqlx::query::<DB>("SELECT value FROM rota_meta WHERE key = $1")
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .context("reading a setting")?
            .map(|row| row.column("value"))
            .transpose()
            .map_err(getter("reading a setting"))?;
        match value {
            Some(value) => sqlx::query::<DB>(
                "INSERT INTO rota_meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .bind(key)
            .bind(value),
            None => sqlx::query::<DB>("DELETE FROM rota_meta WHERE key = $1").bind(key),
        }
        .execute(&mut *conn)
        .await
        .context("writing a setting")?;
        Ok(previous)
    }

    /// Stores a new procedure (answering `true`), or answers the stored one when it is the same:
    /// procedures are immutable.
    pub(crate) async fn submit_procedure(
        conn: &mut DB::Connection,
        spec: &ProcedureSpec,
    ) -> Result<(ProcedureRecord, bool)> {
        const CONTEXT: &str = "submitting a procedure";
        spec.validate()?;
        let json = ProcedureRecord::stored_spec(spec)?;
        let inserted = sqlx::query::<DB>(&format!(
            "INSERT INTO procedures (name, spec, submitted_at) VALUES ($1, $2, {}) \
             ON CONFLICT (name) DO NOTHING RETURNING spec, submitted_at",
            DB::NOW
        ))
        .bind(spec.name.as_str())
        .bind(json)
        .fetch_optional(&mut *conn)
        .await
        .context(CONTEXT)?;
        if let Some(row) = inserted {
            return Ok((procedure_record(&row)?, true));
        }
        let row = sqlx::query::<DB>("SELECT spec, submitted_at FROM procedures WHERE name = $1")
            .bind(spec.name.as_str())
            .fetch_one(&mut *conn)
            .await
            .context(CONTEXT)?;
        let existing = procedure_record(&row)?;
        if &existing.spec == spec {
            Ok((existing, false))
        } else {
            Err(Error::ProcedureConflict {
                name: spec.name.clone(),
            })
        }
    }

    pub(crate) async fn record_audit(
        conn: &mut DB::Connection,
        record: &NewAuditRecord,
    ) -> Result<AuditRecord> {
        let process = record.process.as_ref().map(ToString::to_string);
        let row = sqlx::query::<DB>(&format!(
            "INSERT INTO audit_records (at, command, node, process, by, reason) \
             VALUES ({}, $1, $2, $3, $4, $5) RETURNING at, command, node, process, by, reason",
            DB::NOW
        ))
        .bind(record.command.as_str())
        .bind(record.node.as_ref().map(NodeName::as_str))
        .bind(process.as_deref())
        .bind(record.by.as_str())
        .bind(record.reason.as_deref())
        .fetch_one(&mut *conn)
        .await
        .context("writing an audit record")?;
        audit_record(&row)
    }

    /// A store's answer to `write` as rota-core applied it, `opened` the requests it stored; a
    /// request added that the write did not open is answered with the one that stands for it.
    pub(crate) async fn written(
        conn: &mut DB::Connection,
        node: &NodeName,
        write: &Write,
        applied: Applied,
        opened: Vec<RequestRecord>,
    ) -> Result<Written> {
        let (request, changed) = match write {
            Write::AddRequest { process, .. } => {
                let created = !opened.is_empty();
                let request = match opened.into_iter().next() {
                    Some(request) => Some(request),
                    None => match applied.request(process) {
                        Some(request) => Some(request.clone()),
                        None => Self::standing_request(conn, node, process).await?,
                    },
                };
                (request, created)
            }
            Write::CancelRequest { .. } => (None, !applied.closed.is_empty()),
            Write::CompleteRequest { process, .. } => {
                (applied.request(process).cloned(), applied.changed)
            }
            _ => (None, applied.changed),
        };
        Ok(Written {
            record: applied.after.record,
            request,
            changed,
        })
    }

    /// The request that stands for `process` on `node`: its open one, or for a procedure any
    /// one ever made (a procedure's request is made once per node).
    async fn standing_request(
        conn: &mut DB::Connection,
        node: &NodeName,
        process: &Process,
    ) -> Result<Option<RequestRecord>> {
        let row = sqlx::query::<DB>(
            "SELECT id, node, process, source, created_at, state FROM requests \
             WHERE node = $1 AND process = $2 \
             AND (state IN ('pending', 'active') OR process LIKE 'mop/%') \
             ORDER BY id DESC LIMIT 1",
        )
        .bind(node.as_str())
        .bind(process.to_string())
        .fetch_optional(&mut *conn)
        .await
        .context("reading requests")?;
        row.as_ref().map(request_record).transpose()
    }
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
