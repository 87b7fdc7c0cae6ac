//! The statements both SQL stores make alike, on one connection: the reads (a node's record or
//! the fleet's, its settings, the procedures, the past), a look at the queue and a grant by
//! rota-core's [`schedule`], and the writes that need no rule of the core (sessions, the fence,
//! settings, procedures, the audit trail). A record and a look are one statement each, with
//! the rows beside a row aggregated as JSON. The SQL is the same on SQLite and
//! PostgreSQL (`$N` parameters, which SQLite reads as positions too, and `CAST` where
//! PostgreSQL must know a parameter's type before it sees a value); what differs is a
//! [`Dialect`]'s. A write runs in the transaction its store began, which commits it.

use std::marker::PhantomData;

use rota_core::{Applied, HistoryEvent, NodeName, ProcedureSpec, Process, Turn, Write};
use serde_json::json;
use sqlx::migrate::Migrator;
use sqlx::query::Query;
use sqlx::{Database, Encode, Executor, IntoArguments, Postgres, Sqlite, Type};

use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::{Context, Error, Result};
use crate::history::{history_of, history_sql};
use crate::model::{
    Acquire, BackoffRecord, Fleet, History, HistoryFilter, Millis, NodeOverview, NodeRecord, Part,
    Pause, ProcedureRecord, RequestRecord, Session, Setting, Settings, Writer, Written,
    decode_setting, groups_setting, rollout_setting,
};
use crate::queue::{self, Look};
use crate::rows::{
    NODE_COLUMNS, SqlRow, audit_record, concurrency, overview, procedure_record, request_record,
    slot_holder, stored_slot_if_any,
};

/// What the two databases spell differently.
pub(crate) trait Dialect: Database {
    /// The database's clock, in milliseconds since the epoch.
    const NOW: &'static str;
    /// The names of the tables in the database (in its current schema).
    const TABLES: &'static str;
    /// The version of a node's row `n` that PostgreSQL's compare-and-swap checks.
    const VERSION: &'static str;
    /// The aggregate of values into a JSON array, and the JSON object of keys and values.
    const JSON_AGG: &'static str;
    const JSON_OBJECT: &'static str;
    /// How a look at the queue in a write transaction locks the node's row `n` (in the CTE
    /// `me`), and reads the slots with their holders, locked.
    const LOCK_NODE: &'static str;
    const LOCKED_SLOTS: &'static str;
    /// Takes slot `$1` for node `$2` only while it is free, answering the slot taken.
    const TAKE_SLOT: &'static str;

    /// The rows `j` of the JSON array in parameter `param`: each object `j.value` (whose fields
    /// `->>` reads), in the array's order `j.key`.
    fn json_rows(param: &str) -> String;

    /// The JSON array, as text, of objects of `fields` (keys and values, alternately) over the
    /// rows in `order`: `[]` for no row.
    fn json_objects(fields: &str, order: &str) -> String {
        format!(
            "CAST(COALESCE({}({}({fields}) ORDER BY {order}), '[]') AS TEXT)",
            Self::JSON_AGG,
            Self::JSON_OBJECT
        )
    }
}

impl Dialect for Sqlite {
    const NOW: &'static str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";
    const TABLES: &'static str =
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'";
    // A write holds SQLite's one write lock from its read to its commit: it needs no version.
    const VERSION: &'static str = "''";
    const JSON_AGG: &'static str = "json_group_array";
    const JSON_OBJECT: &'static str = "json_object";
    fn json_rows(param: &str) -> String {
        format!("json_each({param}) j")
    }
    const LOCK_NODE: &'static str = "";
    const LOCKED_SLOTS: &'static str = "SELECT slot, holder FROM slots";
    // The keys of `slots` refuse a second holder even if a check were wrong.
    const TAKE_SLOT: &'static str = "INSERT INTO slots (slot, holder, acquired_at) \
         VALUES ($1, $2, CAST(unixepoch('subsec') * 1000 AS INTEGER)) \
         ON CONFLICT DO NOTHING RETURNING slot";
}

impl Dialect for Postgres {
    const NOW: &'static str = "rota_now_ms()";
    // Only the current schema's, so that a shared database can give rota a schema of its own
    // through `search_path`.
    const TABLES: &'static str = "SELECT CAST(table_name AS TEXT) AS name \
         FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name";
    const VERSION: &'static str = "CAST(n.xmin AS TEXT)";
    const JSON_AGG: &'static str = "json_agg";
    const JSON_OBJECT: &'static str = "json_build_object";
    fn json_rows(param: &str) -> String {
        format!("json_array_elements(CAST({param} AS JSON)) WITH ORDINALITY AS j (value, key)")
    }
    // The node's row first (as every write of the node locks it: under it no other grant or
    // release of the node happens, so it never holds two slots), then the slot rows: the
    // one-time filter on `me` runs before any slot row is read, so the locks are always taken
    // in that order and a grant never deadlocks with a write that releases a slot.
    const LOCK_NODE: &'static str = "FOR UPDATE OF n";
    const LOCKED_SLOTS: &'static str = "SELECT slot, holder FROM slot_rows \
         WHERE EXISTS (SELECT 1 FROM me) ORDER BY slot FOR UPDATE";
    // A row not made yet is made; the node's row gets a new version, so that a write of the
    // node that waited for its lock reads its record again.
    const TAKE_SLOT: &'static str = "WITH taken AS ( \
           INSERT INTO slot_rows (slot, holder, acquired_at) VALUES ($1, $2, rota_now_ms()) \
           ON CONFLICT (slot) DO UPDATE SET holder = excluded.holder, \
             acquired_at = excluded.acquired_at \
           WHERE slot_rows.holder IS NULL RETURNING slot \
         ), touched AS ( \
           UPDATE nodes SET node = node WHERE node = $2 AND EXISTS (SELECT 1 FROM taken) \
           RETURNING node \
         ) SELECT slot FROM taken";
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

/// The update of a node's row `$1` to a record, with [`Sql::bind_row`]'s parameters `$2` to `$16`.
pub(crate) const UPDATE_NODE: &str = "UPDATE nodes SET state = $2, since = $3, process = $4, \
     pre_cordoned = $5, cordoned_by_rota = $6, boot_id = $7, reboot_started_at = $8, \
     reboot_deadline = $9, last_reboot_at = $10, queued_at = $11, last_result = $12, \
     blocked_reason = $13, blocked_since = $14, last_result_at = $15, group_name = $16 WHERE node = $1";

/// What a write changed beside the node's row, each a JSON array of objects that a statement
/// reads as rows ([`Dialect::json_rows`]), so that a change of any size is one statement.
pub(crate) struct Changes {
    /// The requests whose state moved (`id`, `state`, `finished_at` for those it closed).
    pub(crate) moved: String,
    /// The processes whose backoff is gone (`process`), and the backoffs set anew (`process`,
    /// `until`, `last_interval_s`, `cause`).
    pub(crate) cleared: String,
    pub(crate) backoffs: String,
    /// The history entries to append, in order (`process`, `event`, `at`, `cause`, `slot`,
    /// `released`), and the requests to open (`process`, `source`, `created_at`).
    pub(crate) history: String,
    pub(crate) opened: String,
}

impl Changes {
    pub(crate) fn of(before: &NodeOverview, applied: &Applied, now: Millis) -> Changes {
        let after = &applied.after;
        let moved = after.open_requests.iter().filter(|r| {
            let was = |b: &RequestRecord| b.id == r.id && b.state != r.state;
            before.open_requests.iter().any(was)
        });
        let moved = moved.map(|r| (r, None));
        let closed = applied.closed.iter().map(|r| (r, Some(now)));
        let kept = |b: &&BackoffRecord| after.backoffs.iter().any(|a| a.process == b.process);
        let cleared = before.backoffs.iter().filter(|b| !kept(b));
        let set = after
            .backoffs
            .iter()
            .filter(|a| !before.backoffs.contains(a));
        Changes {
            moved: rows(
                moved.chain(closed),
                |(r, at)| json!({"id": r.id, "state": r.state.as_str(), "finished_at": at}),
            ),
            cleared: rows(cleared, |b| json!({"process": b.process.to_string()})),
            backoffs: rows(set, |b| {
                json!({"process": b.process.to_string(), "until": b.until,
                    "last_interval_s": b.last_interval.as_secs(), "cause": b.cause})
            }),
            history: rows(&applied.history, |e| {
                json!({"process": e.process.to_string(), "event": e.event.as_str(), "at": e.at,
                    "cause": e.cause, "slot": e.slot, "released": e.released})
            }),
            opened: rows(&applied.opened, |n| {
                json!({"process": n.process.to_string(), "source": n.source,
                    "created_at": n.created_at})
            }),
        }
    }
}

/// The statements that persist [`Changes`] of node `$1`: its requests moved, its backoffs
/// cleared and set, its history appended and its requests opened, each from its JSON array in
/// the parameter `json` names and only where its `guard` holds. The requests opened come back.
pub(crate) fn change_sql<DB: Dialect>(json: [&str; 5], guard: [&str; 5]) -> [String; 5] {
    let rows = json.map(DB::json_rows);
    let at = |field: &str| format!("CAST(j.value ->> '{field}' AS BIGINT)");
    [
        format!(
            "UPDATE requests SET state = j.value ->> 'state', finished_at = {} FROM {} \
             WHERE requests.id = {} AND requests.node = $1 AND {} RETURNING requests.id",
            at("finished_at"),
            rows[0],
            at("id"),
            guard[0]
        ),
        format!(
            "DELETE FROM backoff WHERE node = $1 \
             AND process IN (SELECT j.value ->> 'process' FROM {}) AND {}",
            rows[1], guard[1]
        ),
        format!(
            "INSERT INTO backoff (node, process, until, last_interval_s, cause) \
             SELECT $1, j.value ->> 'process', {}, {}, j.value ->> 'cause' FROM {} WHERE {} \
             ON CONFLICT (node, process) DO UPDATE SET until = excluded.until, \
               last_interval_s = excluded.last_interval_s, cause = excluded.cause",
            at("until"),
            at("last_interval_s"),
            rows[2],
            guard[2]
        ),
        format!(
            "INSERT INTO history (node, process, event, at, cause, slot, released) \
             SELECT $1, j.value ->> 'process', j.value ->> 'event', {}, j.value ->> 'cause', {}, \
               CAST(j.value ->> 'released' AS BOOLEAN) FROM {} WHERE {} ORDER BY j.key",
            at("at"),
            at("slot"),
            rows[3],
            guard[3]
        ),
        // The keys refuse a second request of a procedure the node ever had: its request is
        // made once per node.
        format!(
            "INSERT INTO requests (node, process, source, created_at, state) \
             SELECT $1, j.value ->> 'process', j.value ->> 'source', {}, 'pending' FROM {} \
             WHERE {} ORDER BY j.key ON CONFLICT DO NOTHING \
             RETURNING id, node, process, source, created_at, state",
            at("created_at"),
            rows[4],
            guard[4]
        ),
    ]
}

/// A JSON array of one object per item.
fn rows<T>(items: impl IntoIterator<Item = T>, row: impl Fn(T) -> serde_json::Value) -> String {
    serde_json::Value::Array(items.into_iter().map(row).collect()).to_string()
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
    bool: for<'q> Encode<'q, DB> + Type<DB>,
    Option<String>: for<'q> Encode<'q, DB> + Type<DB>,
{
    /// Every node's record and every slot's holder: two statements, whatever the fleet's size.
    pub(crate) async fn fleet(conn: &mut DB::Connection) -> Result<Fleet> {
        let nodes = Self::records(conn, None).await?;
        let slots = sqlx::query::<DB>("SELECT slot, holder, acquired_at FROM slots ORDER BY slot")
            .fetch_all(&mut *conn)
            .await
            .context("reading slots")?;
        Ok(Fleet {
            nodes: nodes.iter().map(overview).collect::<Result<_>>()?,
            slots: slots.iter().map(slot_holder).collect::<Result<_>>()?,
            notice: None,
        })
    }

    /// `query` with the first parameters of [`UPDATE_NODE`]: `record`'s node and fields.
    pub(crate) fn bind_row<'q>(
        query: Query<'q, DB, DB::Arguments<'q>>,
        record: &'q NodeRecord,
    ) -> Query<'q, DB, DB::Arguments<'q>> {
        query
            .bind(record.node.as_str())
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
            .bind(record.last_result_at)
            .bind(record.group.as_deref())
    }

    /// A write's decision: the node's record, fenced by the writer's session when an agent
    /// writes (a node without a record is then fenced too; an operator's write of an unknown
    /// node is `NoSuchNode`), and rota-core's answer; a refused write is an error.
    pub(crate) async fn decide(
        conn: &mut DB::Connection,
        writer: Writer<'_>,
        write: &Write,
    ) -> Result<(Read, Applied)> {
        let (node, session) = (writer.node(), writer.session());
        let read = Self::record(conn, node, session)
            .await?
            .filter(|read| session.is_none() || read.current)
            .ok_or_else(|| Error::unwritable(node, session))?;
        let applied = read.record.apply(write, read.now)?;
        Ok((read, applied))
    }

    /// `node`'s record (its row, slot, open requests and backoffs) as a write reads it, in one
    /// statement (one snapshot).
    pub(crate) async fn record(
        conn: &mut DB::Connection,
        node: &NodeName,
        session: Option<&Session>,
    ) -> Result<Option<Read>> {
        let read = async |conn: &mut DB::Connection| {
            let rows = Self::records(conn, Some((node, session.map(|s| s.id)))).await?;
            rows.first()
                .map(|row| {
                    Ok(Read {
                        record: overview(row)?,
                        current: row.column("current")?,
                        version: row.column("version")?,
                        now: row.column("now")?,
                    })
                })
                .transpose()
        };
        read(conn)
            .await
            .map_err(|e: Error| e.of_node(node.as_str()))
    }

    /// Every node's record, or with `only` one node's and the rest of a [`Read`] with the
    /// session given: one statement, the open requests and backoffs beside each row as JSON.
    async fn records(
        conn: &mut DB::Connection,
        only: Option<(&NodeName, Option<i64>)>,
    ) -> Result<Vec<DB::Row>> {
        let (of_node, read) = match only {
            Some(_) => (
                "WHERE n.node = $1",
                format!(
                    ", EXISTS (SELECT 1 FROM sessions se WHERE se.id = n.session_id \
                       AND se.id = CAST($2 AS BIGINT) AND NOT se.superseded \
                       AND se.deadline > {now}) AS current, {now} AS now, {version} AS version",
                    now = DB::NOW,
                    version = DB::VERSION,
                ),
            ),
            None => ("", String::new()),
        };
        let sql = format!(
            "SELECT {NODE_COLUMNS}{read}, \
               (SELECT {requests} FROM requests q \
                 WHERE q.node = n.node AND q.state IN ('pending', 'active')) AS requests, \
               (SELECT {backoffs} FROM backoff k WHERE k.node = n.node) AS backoffs \
             FROM nodes n LEFT JOIN slots s ON s.holder = n.node {of_node} ORDER BY n.node",
            requests = DB::json_objects(
                "'id', q.id, 'process', q.process, 'source', q.source, \
                 'created_at', q.created_at, 'state', q.state",
                "q.id"
            ),
            backoffs = DB::json_objects(
                "'process', k.process, 'until', k.until, \
                 'last_interval_s', k.last_interval_s, 'cause', k.cause",
                "k.process"
            ),
        );
        let mut query = sqlx::query::<DB>(&sql);
        if let Some((node, id)) = only {
            query = query.bind(node.as_str()).bind(id);
        }
        query.fetch_all(&mut *conn).await.context("reading nodes")
    }

    /// A waiter's look at the queue, outside a write transaction: how many changes it waits
    /// for, or `None` when it holds a slot or its turn has come. Waiters behind the front take
    /// no lock, so a release does not set off a stampede of write transactions.
    pub(crate) async fn waits(conn: &mut DB::Connection, session: &Session) -> Result<Option<u64>> {
        Ok(match Self::look(conn, session, false).await? {
            Look::Turn(Turn::Wait { changes }) => Some(changes),
            Look::Holds(_) | Look::Turn(Turn::Granted(_)) => None,
        })
    }

    /// `Store::try_acquire_slot` in a write transaction: the look again, locked, so that grants
    /// are decided one at a time, and the slot [`schedule`] names taken while it is free.
    pub(crate) async fn acquire(conn: &mut DB::Connection, session: &Session) -> Result<Acquire> {
        let slot = match Self::look(conn, session, true).await? {
            Look::Holds(slot) => return Ok(Acquire::Granted(slot)),
            Look::Turn(Turn::Wait { changes }) => return Ok(Acquire::Wait { changes }),
            Look::Turn(Turn::Granted(slot)) => slot,
        };
        let taken = sqlx::query::<DB>(DB::TAKE_SLOT)
            .bind(i64::from(slot))
            .bind(session.node.as_str())
            .fetch_optional(&mut *conn)
            .await
            .context("taking a slot")?;
        Ok(match taken {
            Some(_) => Acquire::Granted(slot),
            None => Acquire::Wait { changes: 1 },
        })
    }

    /// The node's look at the queue and the slots, in one statement ([`queue::look_sql`]).
    async fn look(conn: &mut DB::Connection, session: &Session, locked: bool) -> Result<Look> {
        let row = sqlx::query::<DB>(&queue::look_sql::<DB>(locked))
            .bind(session.node.as_str())
            .bind(session.id)
            .fetch_optional(&mut *conn)
            .await
            .context("reading the queue")?;
        queue::look(row, session)
    }

    /// The fleet's settings, each a key of `rota_meta`.
    pub(crate) async fn settings(conn: &mut DB::Connection) -> Result<Settings> {
        let rows = sqlx::query::<DB>("SELECT key, value FROM rota_meta")
            .fetch_all(&mut *conn)
            .await
            .context("reading the settings")?;
        let rows = rows
            .iter()
            .map(|row| Ok((row.column("key")?, row.column("value")?)))
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
            rollout: rollout_setting(value("rollout").as_deref())?,
            groups: groups_setting(value("groups").as_deref())?,
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
        let Some(sql) = history_sql(part, filter) else {
            return Ok(History::default());
        };
        let process = filter.process.as_ref().map(ToString::to_string);
        let rows = sqlx::query::<DB>(&sql)
            .bind(filter.node.as_ref().map(NodeName::as_str))
            .bind(process.as_deref())
            .bind(filter.event.map(HistoryEvent::as_str))
            .bind(filter.since)
            .bind(filter.until)
            .fetch_all(&mut *conn)
            .await
            .context("reading history")?;
        history_of(part, &rows)
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
            .map(|row| row.try_column("name"))
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
                .try_column("version")
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
        row.column("now")
    }

    /// Opens a session of `node`, superseding its older ones, and registers the node (idle) if
    /// it is new, in the store's write transaction. The node's row is locked first, as every
    /// write of the node locks it, so that a write of the old session either commits before
    /// the new session exists or is refused.
    pub(crate) async fn open_session(
        conn: &mut DB::Connection,
        node: &NodeName,
        ttl_ms: i64,
    ) -> Result<Session> {
        const CONTEXT: &str = "opening a session";
        let lock = format!(
            "SELECT n.node FROM nodes n WHERE n.node = $1 {}",
            DB::LOCK_NODE
        );
        let supersede = "UPDATE sessions SET superseded = TRUE WHERE node = $1 AND NOT superseded";
        for sql in [lock.as_str(), supersede] {
            let query = sqlx::query::<DB>(sql).bind(node.as_str());
            query.execute(&mut *conn).await.context(CONTEXT)?;
        }
        let opened = sqlx::query::<DB>(&format!(
            "INSERT INTO sessions (node, started_at, deadline) \
             VALUES ($1, {now}, {now} + CAST($2 AS BIGINT)) RETURNING id, started_at",
            now = DB::NOW
        ))
        .bind(node.as_str())
        .bind(ttl_ms)
        .fetch_one(&mut *conn)
        .await
        .context(CONTEXT)?;
        let id: i64 = opened.column("id")?;
        sqlx::query::<DB>(
            "INSERT INTO nodes (node, session_id, state, since) VALUES ($1, $2, 'idle', $3) \
             ON CONFLICT (node) DO UPDATE SET session_id = excluded.session_id",
        )
        .bind(node.as_str())
        .bind(id)
        .bind(opened.column::<i64>("started_at")?)
        .execute(&mut *conn)
        .await
        .context(CONTEXT)?;
        Ok(Session {
            id,
            node: node.clone(),
        })
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
            Some(row) => row.column("slot")?,
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
            Setting::Rollout(rollout) => {
                Self::set_meta(conn, "rollout", Some(rollout.to_string())).await?;
                Ok(None)
            }
            Setting::Groups(groups) => {
                Self::set_meta(conn, "groups", Some(groups.to_string())).await?;
                Ok(None)
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

    /// Sets (or with `None` removes) one of the settings; a removal returns the value it had.
    async fn set_meta(
        conn: &mut DB::Connection,
        key: &str,
        value: Option<String>,
    ) -> Result<Option<String>> {
        let query = match value {
            Some(value) => sqlx::query::<DB>(
                "INSERT INTO rota_meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value \
                 RETURNING CAST(NULL AS TEXT) AS value",
            )
            .bind(key)
            .bind(value),
            None => {
                sqlx::query::<DB>("DELETE FROM rota_meta WHERE key = $1 RETURNING value").bind(key)
            }
        };
        let row = query.fetch_optional(&mut *conn).await;
        let row = row.context("writing a setting")?;
        Ok(row.map(|row| row.column("value")).transpose()?.flatten())
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
