//! Requests: added and canceled by an agent under its session or by an operator, completed
//! one by one inside the window; each a node write ([`write_node`]) that rota-core decides.

use rota_core::{NodeName, Process, Write};

use super::PostgresStore;
use super::queries::{REQUEST_COLUMNS, existing_request};
use super::record::{Wakes, write_node};
use crate::error::{Context, Error, Result};
use crate::model::{Outcome, RequestRecord, Session};
use crate::rows::request_record;

/// Records a request for `process` unless one stands for it; fenced by `session` when an
/// agent asks, for a known node when an operator does. `wakes` is what a new request sends.
pub(super) async fn add(
    store: &PostgresStore,
    node: &NodeName,
    session: Option<&Session>,
    process: &Process,
    source: &str,
    wakes: u64,
) -> Result<(RequestRecord, bool)> {
    const CONTEXT: &str = "recording a request";
    let write = Write::AddRequest {
        process: process.clone(),
        source: source.to_string(),
    };
    let written = write_node(
        store,
        node,
        session,
        &write,
        |_| Wakes::IfOpened(wakes),
        CONTEXT,
    )
    .await?;
    if let Some(request) = written.opened.into_iter().next() {
        return Ok((request, true));
    }
    if let Some(open) = written
        .applied
        .after
        .open_requests
        .into_iter()
        .find(|r| &r.process == process)
    {
        return Ok((open, false));
    }
    // A procedure's request is made once per node: the one made before stands for it.
    let mut conn = store.connections.checkout(CONTEXT).await?;
    let existing =
        existing_request(conn.connection().await.context(CONTEXT)?, node, process).await?;
    conn.finish();
    match existing {
        Some(row) => Ok((request_record(&row)?, false)),
        None => Err(Error::NoSuchNode { node: node.clone() }),
    }
}

pub(super) async fn add_request(
    store: &PostgresStore,
    session: &Session,
    process: &Process,
    source: &str,
) -> Result<(RequestRecord, bool)> {
    add(store, &session.node, Some(session), process, source, 0).await
}

/// Withdraws the node's pending request for `process`; returns whether there was one.
/// `wakes` is what a withdrawn request sends.
pub(super) async fn cancel(
    store: &PostgresStore,
    node: &NodeName,
    session: Option<&Session>,
    process: &Process,
    wakes: u64,
) -> Result<bool> {
    let write = Write::CancelRequest {
        process: process.clone(),
    };
    let written = write_node(
        store,
        node,
        session,
        &write,
        |applied| Wakes::Known(if applied.closed.is_empty() { 0 } else { wakes }),
        "canceling a request",
    )
    .await?;
    Ok(!written.applied.closed.is_empty())
}

pub(super) async fn cancel_request(
    store: &PostgresStore,
    session: &Session,
    process: &Process,
) -> Result<bool> {
    cancel(store, &session.node, Some(session), process, 0).await
}

pub(super) async fn complete_request(
    store: &PostgresStore,
    session: &Session,
    process: &Process,
    outcome: &Outcome,
) -> Result<RequestRecord> {
    let write = Write::CompleteRequest {
        process: process.clone(),
        outcome: outcome.clone(),
    };
    let written = write_node(
        store,
        &session.node,
        Some(session),
        &write,
        |_| Wakes::Known(0),
        "completing a request",
    )
    .await?;
    written
        .applied
        .request(process)
        .cloned()
        .ok_or_else(|| Error::NotActive {
            node: session.node.clone(),
            process: process.clone(),
        })
}

pub(super) async fn open_requests(
    store: &PostgresStore,
    node: &NodeName,
) -> Result<Vec<RequestRecord>> {
    let mut conn = store.connections.checkout("reading requests").await?;
    let rows = sqlx::query(&format!(
        "SELECT {REQUEST_COLUMNS} FROM requests \
         WHERE node = $1 AND state IN ('pending', 'active') ORDER BY id"
    ))
    .bind(node.as_str())
    .fetch_all(&mut *conn)
    .await
    .context("reading requests")?;
    conn.finish();
    rows.iter().map(request_record).collect()
}

pub(super) async fn all_requests(store: &PostgresStore) -> Result<Vec<RequestRecord>> {
    let mut conn = store.connections.checkout("reading requests").await?;
    let rows = sqlx::query(&format!(
        "SELECT {REQUEST_COLUMNS} FROM requests ORDER BY id"
    ))
    .fetch_all(&mut *conn)
    .await
    .context("reading requests")?;
    conn.finish();
    rows.iter().map(request_record).collect()
}
