//! The check at start: the server's account may do everything the server does (see
//! [`rota_kube_api::permissions::fleetlock_permissions`]), so that a missing permission stops
//! it at once, named, instead of failing a host's window halfway with its Node cordoned.

use kube::Client;
use rota_kube_api::permissions::{self, Permission};
use tracing::warn;

use crate::error::{Error, Result};

/// Fails naming every permission the server needs and lacks; warns of the courtesies it
/// lacks (the Events, the Node's lifecycle conditions), without which it still works.
pub async fn check_permissions(client: &Client, namespace: &str) -> Result<()> {
    let wanted = permissions::fleetlock_permissions(namespace);
    let missing = permissions::missing(client, &wanted).await?;
    let (needed, courtesy): (Vec<Permission>, Vec<Permission>) =
        missing.into_iter().partition(Permission::needed);
    if !courtesy.is_empty() {
        warn!(
            "the FleetLock server's service account lacks {}: each host's Node goes without \
             what they write",
            permissions::describe(&courtesy)
        );
    }
    if needed.is_empty() {
        return Ok(());
    }
    Err(Error::Permissions {
        count: needed.len(),
        missing: permissions::describe(&needed),
    })
}
