//! A node's own writes and reads: a transition is one `rota_transition` call, with its window's
//! requests, history, backoff and slot.

use rota_core::{NodeName, NodeState, Process};
use sqlx::{Acquire as _, Row};

use super::PostgresStore;
use super::changes::CHANNEL;
use super::queries::{Written, fetch_node, written};
use super::windows::{window_result, window_write};
use crate::error::{Context, Error, Result};
use crate::model::{
    Blocked, NodeOverview, NodeRecord, RequestState, Session, Transition, WindowChange,
};
use crate::rows::{ALL_BACKOFFS_SQL, ALL_OPEN_REQUESTS_SQL, all_nodes_sql, getter, node_record};

pub(super) async fn set_blocked(
    store: &PostgresStore,
    session: &Session,
    blocked: Option<&Blocked>,
) -> Result<bool> {
    const CONTEXT: &str = "recording why the node is blocked";
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let mut tx = conn.begin().await.context(CONTEXT)?;
    let row = sqlx::query(
        "WITH current AS ( \
           SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
           WHERE n.node = $1 AND s.id = $2 AND NOT s.superseded \
             AND s.deadline > rota_now_ms() \
         ), changed AS ( \
           UPDATE nodes SET blocked_reason = $3, blocked_since = $4 \
           WHERE node = $1 AND blocked_reason IS DISTINCT FROM $3 \
             AND EXISTS (SELECT 1 FROM current) RETURNING node) \
         SELECT EXISTS (SELECT 1 FROM current) AS current, \
           EXISTS (SELECT 1 FROM changed) AS changed",
    )
    .bind(session.node.as_str())
    .bind(session.id)
    .bind(blocked.map(|b| b.reason.as_str()))
    .bind(blocked.map(|b| b.since))
    .fetch_one(&mut *tx)
    .await
    .context(CONTEXT)?;
    let get = getter(CONTEXT);
    if !row.try_get::<bool, _>("current").map_err(&get)? {
        return Err(Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        });
    }
    let changed: bool = row.try_get("changed").map_err(&get)?;
    // A node blocked no longer holds the queue up behind it.
    store.commit(tx, u64::from(changed), CONTEXT).await?;
    conn.finish();
    Ok(changed)
}

pub(super) async fn transition(
    store: &PostgresStore,
    session: &Session,
    transition: Transition,
) -> Result<NodeRecord> {
    let wakes = u64::from(transition.wakes());
    let clears_process = matches!(transition.to, NodeState::Idle | NodeState::Queued);
    let f = &transition.fields;
    let queued_at = match &transition.window {
        WindowChange::Queue { queued_at } => Some(*queued_at),
        WindowChange::Open => Some(None),
        _ => None,
    };
    let window = window_write(&transition.window);
    let w = window.as_ref();
    let backoff = w.and_then(|w| w.backoff);
    let mut conn = store.connections.checkout("recording a transition").await?;
    // With requests, migration 0010's overload also records them in the same call.
    let sql = if transition.requests.is_empty() {
        "SELECT * FROM rota_transition($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
         $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, \
         $29, $30, $31)"
    } else {
        "SELECT * FROM rota_transition($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
         $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, \
         $29, $30, $31, $32, $33)"
    };
    let mut query = sqlx::query(sql)
        .bind(session.node.as_str())
        .bind(session.id)
        .bind(transition.from.as_str())
        .bind(transition.to.as_str())
        .bind(clears_process)
        .bind(transition.process.as_ref().map(ToString::to_string))
        .bind(clears_process && f.cordoned_by_rota.is_none())
        .bind(f.pre_cordoned)
        .bind(f.cordoned_by_rota)
        .bind(f.boot_id.is_some())
        .bind(f.boot_id.clone().flatten())
        .bind(f.reboot_started_at.is_some())
        .bind(f.reboot_started_at.flatten())
        .bind(f.reboot_deadline.is_some())
        .bind(f.reboot_deadline.flatten())
        .bind(f.last_reboot_at)
        .bind(queued_at.is_some())
        .bind(queued_at.flatten())
        .bind(window_result(&transition.window))
        .bind(w.map(|w| w.from.as_str()))
        .bind(w.and_then(|w| w.to.map(RequestState::as_str)))
        .bind(w.map(|w| w.event.as_str()))
        .bind(w.and_then(|w| w.cause.as_deref()))
        .bind(
            w.filter(|w| w.fallback)
                .map(|_| Process::Reboot.to_string()),
        )
        .bind(w.is_some_and(|w| w.clears_backoff))
        .bind(w.is_some_and(|w| w.releases))
        .bind(backoff.map(|b| b.0))
        .bind(backoff.map(|b| b.1))
        .bind(backoff.map(|b| b.2))
        .bind(CHANNEL)
        .bind(store.payload(wakes));
    if !transition.requests.is_empty() {
        let (processes, sources): (Vec<String>, Vec<&str>) = transition
            .requests
            .iter()
            .map(|(process, source)| (process.to_string(), source.as_str()))
            .unzip();
        query = query.bind(processes).bind(sources);
    }
    let row = query
        .fetch_one(&mut *conn)
        .await
        .context("recording a transition")?;
    conn.finish();
    match written(&row)? {
        Written::Record(record) => {
            store.woke(wakes);
            Ok(record)
        }
        Written::Conflict(actual) => Err(Error::Conflict {
            node: session.node.clone(),
            expected: transition.from,
            actual,
        }),
        // rota_transition refuses a write only as fenced or conflicting.
        _ => Err(Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        }),
    }
}

pub(super) async fn node(store: &PostgresStore, node: &NodeName) -> Result<Option<NodeRecord>> {
    let mut conn = store.connections.checkout("reading a node").await?;
    let record = fetch_node(conn.connection().await.context("reading a node")?, node).await?;
    conn.finish();
    Ok(record)
}

pub(super) async fn nodes(store: &PostgresStore) -> Result<Vec<NodeRecord>> {
    let mut conn = store.connections.checkout("reading nodes").await?;
    let rows = sqlx::query(&all_nodes_sql())
        .fetch_all(&mut *conn)
        .await
        .context("reading nodes")?;
    conn.finish();
    rows.iter().map(node_record).collect()
}

/// `ReadStore::overview`: three statements on one connection.
pub(super) async fn overview(store: &PostgresStore) -> Result<Vec<NodeOverview>> {
    let mut conn = store.connections.checkout("reading the fleet").await?;
    let nodes = sqlx::query(&all_nodes_sql())
        .fetch_all(&mut *conn)
        .await
        .context("reading nodes")?;
    let requests = sqlx::query(ALL_OPEN_REQUESTS_SQL)
        .fetch_all(&mut *conn)
        .await
        .context("reading requests")?;
    let backoffs = sqlx::query(ALL_BACKOFFS_SQL)
        .fetch_all(&mut *conn)
        .await
        .context("reading backoff")?;
    conn.finish();
    crate::rows::overview(&nodes, &requests, &backoffs)
}
