//! A node's own requests: adding, canceling, completing one, and what blocks the node; and an
//! operator's request or cancel. The core decides each ([`rota_core::Write`]); a request of a
//! procedure the node ever had is the one stored.

use rota_core::{NodeName, Process, Write};
use sqlx::SqliteConnection;

use super::record::write_node;
use crate::error::{Context, Error, Result};
use crate::model::{Blocked, Outcome, RequestRecord, Session};
use crate::rows::request_record;

/// The request that stands for `process` on `node`: its open one, or for a procedure any one
/// ever made (a procedure's request is made once per node).
async fn existing_request(
    conn: &mut SqliteConnection,
    node: &NodeName,
    process: &Process,
) -> Result<Option<RequestRecord>> {
    let row = sqlx::query(
        "SELECT * FROM requests WHERE node = ? AND process = ? \
         AND (state IN ('pending', 'active') OR process LIKE 'mop/%') ORDER BY id DESC LIMIT 1",
    )
    .bind(node.as_str())
    .bind(process.to_string())
    .fetch_optional(&mut *conn)
    .await
    .context("reading requests")?;
    row.as_ref().map(request_record).transpose()
}

/// Records a request for `process` unless one stands for it; fenced by `session` when an
/// agent asks, for a known node when an operator does.
pub(in crate::sqlite) async fn add_request(
    conn: &mut SqliteConnection,
    node: &NodeName,
    session: Option<&Session>,
    process: &Process,
    source: &str,
) -> Result<(RequestRecord, bool)> {
    let write = Write::AddRequest {
        process: process.clone(),
        source: source.to_string(),
    };
    let written = write_node(conn, node, session, &write).await?;
    if let Some(request) = written.opened.into_iter().next() {
        return Ok((request, true));
    }
    let existing = existing_request(conn, node, process).await?;
    existing
        .map(|request| (request, false))
        .ok_or_else(|| Error::NoSuchNode { node: node.clone() })
}

/// Withdraws the node's pending request for `process`; returns whether there was one.
pub(in crate::sqlite) async fn cancel_request(
    tx: &mut SqliteConnection,
    node: &NodeName,
    session: Option<&Session>,
    process: &Process,
) -> Result<bool> {
    let write = Write::CancelRequest {
        process: process.clone(),
    };
    let written = write_node(tx, node, session, &write).await?;
    Ok(!written.applied.closed.is_empty())
}

pub(in crate::sqlite) async fn set_blocked(
    tx: &mut SqliteConnection,
    session: &Session,
    blocked: Option<&Blocked>,
) -> Result<bool> {
    let write = Write::SetBlocked(blocked.cloned());
    let written = write_node(tx, &session.node, Some(session), &write).await?;
    Ok(written.applied.changed)
}

pub(in crate::sqlite) async fn complete_request(
    tx: &mut SqliteConnection,
    session: &Session,
    process: &Process,
    outcome: &Outcome,
) -> Result<RequestRecord> {
    let write = Write::CompleteRequest {
        process: process.clone(),
        outcome: outcome.clone(),
    };
    let written = write_node(tx, &session.node, Some(session), &write).await?;
    written
        .applied
        .request(process)
        .cloned()
        .ok_or_else(|| Error::NotActive {
            node: session.node.clone(),
            process: process.clone(),
        })
}
