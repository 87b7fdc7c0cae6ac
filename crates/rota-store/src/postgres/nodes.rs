//! A node's own writes and reads: a transition and a blocked reason are node writes
//! ([`write_node`]), with their window's requests, history, backoff and slot.

use rota_core::{NodeName, Write};

use super::PostgresStore;
use super::queries::fetch_node;
use super::record::{Wakes, write_node};
use crate::error::{Context, Result};
use crate::model::{Blocked, NodeOverview, NodeRecord, Session, Transition};
use crate::rows::{ALL_BACKOFFS_SQL, ALL_OPEN_REQUESTS_SQL, all_nodes_sql, node_record};

pub(super) async fn set_blocked(
    store: &PostgresStore,
    session: &Session,
    blocked: Option<&Blocked>,
) -> Result<bool> {
    let write = Write::SetBlocked(blocked.cloned());
    // A node blocked no longer holds the queue up behind it.
    let written = write_node(
        store,
        &session.node,
        Some(session),
        &write,
        |applied| Wakes::Known(u64::from(applied.changed)),
        "recording why the node is blocked",
    )
    .await?;
    Ok(written.applied.changed)
}

pub(super) async fn transition(
    store: &PostgresStore,
    session: &Session,
    transition: Transition,
) -> Result<NodeRecord> {
    let wakes = u64::from(transition.wakes());
    let written = write_node(
        store,
        &session.node,
        Some(session),
        &Write::Transition(transition),
        |_| Wakes::Known(wakes),
        "recording a transition",
    )
    .await?;
    Ok(written.applied.after.record)
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
