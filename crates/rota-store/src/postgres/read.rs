//! A node's whole record in one statement, for every write of it and `Store::record`: its row
//! and slot with the row's version, whether the writer's session is current, the database's
//! clock, and its open requests and backoffs as arrays. (SQLite reads the same in three
//! statements, `Sql::record`, each a cheap call in the process; here each is a round trip.)

use rota_core::NodeName;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::error::{Context, Error, Result};
use crate::model::{BackoffRecord, NodeOverview, NodeRecord, RequestRecord, Session};
use crate::rows::{NODE_COLUMNS, getter, node_record, parse, request_state};
use crate::sql::Read;

fn read_sql() -> String {
    format!(
        "SELECT {NODE_COLUMNS}, rota_now_ms() AS now, n.xmin::TEXT AS version, EXISTS ( \
           SELECT 1 FROM sessions se WHERE se.id = n.session_id AND se.id = $2 \
             AND NOT se.superseded AND se.deadline > rota_now_ms()) AS current, \
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
         WHERE n.node = $1"
    )
}

/// Reads `node`'s whole record in one statement (one snapshot).
pub(super) async fn read_record(
    conn: &mut PgConnection,
    node: &NodeName,
    session: Option<&Session>,
) -> Result<Option<Read>> {
    const CONTEXT: &str = "reading the node's record";
    let row = sqlx::query(&read_sql())
        .bind(node.as_str())
        .bind(session.map(|s| s.id))
        .fetch_optional(&mut *conn)
        .await
        .context(CONTEXT)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let get = getter(CONTEXT);
    Ok(Some(Read {
        record: overview(&row)?,
        version: row.try_get("version").map_err(&get)?,
        current: row.try_get("current").map_err(&get)?,
        now: row.try_get("now").map_err(&get)?,
    }))
}

fn overview(row: &PgRow) -> Result<NodeOverview> {
    let record = node_record(row)?;
    let node = record.node.to_string();
    work(row, record).map_err(|e| e.of_node(&node))
}

/// The node's open requests and backoffs beside its row.
fn work(row: &PgRow, record: NodeRecord) -> Result<NodeOverview> {
    let get = getter("reading the node's record");
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
