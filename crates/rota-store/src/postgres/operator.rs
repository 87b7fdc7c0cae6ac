//! An operator's actions on a node, without a session: unlock, retry, request and cancel, each
//! a node write ([`write_node`]) that rota-core decides.

use rota_core::{NodeName, Process, Write};

use super::PostgresStore;
use super::changes::OPERATOR_WAKES;
use super::record::{Wakes, write_node};
use super::requests;
use crate::error::{Error, Result};
use crate::model::{NodeRecord, RequestRecord};

pub(super) async fn unlock(
    store: &PostgresStore,
    node: &NodeName,
    reason: &str,
) -> Result<NodeRecord> {
    let write = Write::Unlock {
        reason: reason.to_string(),
    };
    let written = write_node(
        store,
        node,
        None,
        &write,
        |_| Wakes::Known(1),
        "unlocking a node",
    )
    .await?;
    Ok(written.applied.after.record)
}

pub(super) async fn retry(store: &PostgresStore, node: &NodeName) -> Result<NodeRecord> {
    let written = write_node(
        store,
        node,
        None,
        &Write::Retry,
        |_| Wakes::Known(1),
        "retrying a node",
    )
    .await?;
    Ok(written.applied.after.record)
}

pub(super) async fn request(
    store: &PostgresStore,
    node: &NodeName,
    process: &Process,
    source: &str,
) -> Result<(RequestRecord, bool)> {
    requests::add(store, node, None, process, source, OPERATOR_WAKES).await
}

pub(super) async fn cancel(
    store: &PostgresStore,
    node: &NodeName,
    process: &Process,
) -> Result<bool> {
    match requests::cancel(store, node, None, process, OPERATOR_WAKES).await {
        Err(Error::NoSuchNode { .. }) => Ok(false),
        canceled => canceled,
    }
}
