//! The slot Leases `rota-slot-<n>` (see `slots`): listing them (from the Lease watch's view
//! when it has them all), taking one by create or compare-and-swap, renewing it for the
//! fence, giving it back, and freeing those of deleted Nodes.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, PostParams};
use rota_core::NodeName;
use rota_kube_client::{is_conflict, is_not_found};
use rota_store::{Millis, Result, Session, now_millis};
use tracing::warn;

use super::cas::CAS_ATTEMPTS;
use super::{KubeStore, LEASES, fenced};
use crate::error::{Context, KubeError};
use crate::slots::{self, SLOT_LABEL};

const NODES: &str = "nodes";

impl KubeStore {
    /// The slot Leases, from the watch's view when it holds them all (see `changes`).
    pub(super) async fn list_leases(&self) -> Result<Vec<Lease>> {
        match self.inner.changes.leases() {
            Some(leases) => Ok(leases),
            None => self.list_leases_fresh().await,
        }
    }

    /// The slot Leases, read from the API server.
    async fn list_leases_fresh(&self) -> Result<Vec<Lease>> {
        let list = self
            .inner
            .leases
            .list(&ListParams::default().labels(SLOT_LABEL))
            .await
            .context(
                "list",
                LEASES,
                format!("in namespace {}", self.inner.config.namespace),
            )?;
        for lease in &list.items {
            self.inner.changes.observe(lease, false);
        }
        Ok(list.items)
    }

    /// The slot Lease `node` holds, read from the API server.
    pub(super) async fn held_lease(&self, node: &NodeName) -> Result<Option<Lease>> {
        let held = held_by(&self.list_leases_fresh().await?, node).cloned();
        match &held {
            Some(lease) => self.cache_lease(node, lease),
            None => self.forget_lease(node),
        }
        Ok(held)
    }

    /// Gives `lease` back (compare-and-swap; re-read and retried while the node still holds
    /// it), and counts the release as a change.
    pub(super) async fn release_lease(
        &self,
        lease: &Lease,
        node: &NodeName,
        at: Millis,
    ) -> Result<()> {
        self.forget_lease(node);
        let name = lease.metadata.name.clone().unwrap_or_default();
        let mut current = lease.clone();
        for _ in 0..CAS_ATTEMPTS {
            if slots::holder(&current) != Some(node.as_str()) {
                return Ok(());
            }
            match self
                .inner
                .leases
                .replace(
                    &name,
                    &PostParams::default(),
                    &slots::released(&current, at),
                )
                .await
            {
                Ok(written) => {
                    self.inner.changes.observe(&written, true);
                    return Ok(());
                }
                Err(e) if is_conflict(&e) => {
                    match self.inner.leases.get_opt(&name).await.context(
                        "get",
                        LEASES,
                        self.lease_path(&name),
                    )? {
                        Some(lease) => current = lease,
                        None => return Ok(()),
                    }
                }
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(e).context("update", LEASES, self.lease_path(&name)),
            }
        }
        Err(KubeError::Contended {
            resource: LEASES,
            name: self.lease_path(&name),
            attempts: CAS_ATTEMPTS,
        }
        .into())
    }

    /// Writes `lease`: a compare-and-swap replace of the existing Lease `name`, or a create.
    pub(super) async fn write_lease(
        &self,
        name: &str,
        lease: &Lease,
        exists: bool,
    ) -> kube::Result<Lease> {
        if exists {
            self.inner
                .leases
                .replace(name, &PostParams::default(), lease)
                .await
        } else {
            self.inner
                .leases
                .create(&PostParams::default(), lease)
                .await
        }
    }

    /// Frees every held slot Lease whose holder's Node object is gone (deleted, or replaced by
    /// a new object of the same name), in case the garbage collector has not yet. Leases taken
    /// by nodes without a Node object are left alone. Returns how many were freed.
    pub(super) async fn free_orphaned(&self, leases: &[Lease]) -> Result<usize> {
        let mut freed = 0;
        for lease in leases {
            let (Some(holder), Some((owner, uid))) =
                (slots::holder(lease), slots::owner_node(lease))
            else {
                continue;
            };
            let node = self
                .inner
                .nodes
                .get_opt(owner)
                .await
                .context("get", NODES, owner)?;
            if node.as_ref().and_then(|n| n.metadata.uid.as_deref()) == Some(uid) {
                continue;
            }
            let Ok(holder) = NodeName::new(holder) else {
                continue;
            };
            warn!(node = %holder, lease = ?lease.metadata.name, "freeing the slot of a deleted Node");
            self.release_lease(lease, &holder, now_millis()).await?;
            freed += 1;
        }
        Ok(freed)
    }

    /// The ownerReference to `node`'s Node object, if it has one (see `slots::node_owner`).
    pub(super) async fn node_owner(&self, node: &NodeName) -> Result<Option<OwnerReference>> {
        Ok(self
            .inner
            .nodes
            .get_opt(node.as_str())
            .await
            .context("get", NODES, node.as_str())?
            .as_ref()
            .and_then(slots::node_owner))
    }

    /// Takes slot `slot` for `node` (whose Node is `owner`) with a create or a
    /// compare-and-swap; `false` if another node was faster.
    pub(super) async fn take(
        &self,
        slot: u32,
        previous: Option<&Lease>,
        node: &NodeName,
        owner: Option<OwnerReference>,
    ) -> Result<bool> {
        let released = previous.and_then(slots::released_at);
        let at = released.map_or(now_millis(), |r| now_millis().max(r + 1));
        let lease = slots::taken(slot, previous, node.as_str(), owner, at);
        let name = slots::slot_name(slot);
        let written = self.write_lease(&name, &lease, previous.is_some()).await;
        match written {
            Ok(written) => {
                self.inner.changes.observe(&written, false);
                self.cache_lease(node, &written);
                Ok(true)
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e).context(
                if previous.is_some() {
                    "update"
                } else {
                    "create"
                },
                LEASES,
                self.lease_path(&name),
            ),
        }
    }

    /// The fence's proof of the slot: a write to the Lease that succeeds only if nobody changed
    /// it since it was seen held by this node. It starts from the Lease as this process last
    /// wrote it; only a compare-and-swap lost on a fresh read refuses.
    pub(super) async fn renew_lease(&self, session: &Session) -> Result<u32> {
        for fresh in [false, true] {
            let Some(lease) = self.lease_of(&session.node, fresh).await? else {
                return Err(fenced(session));
            };
            let slot = slots::slot_of(&lease).ok_or_else(|| fenced(session))?;
            let name = lease.metadata.name.clone().unwrap_or_default();
            match self
                .inner
                .leases
                .replace(
                    &name,
                    &PostParams::default(),
                    &slots::renewed(&lease, now_millis()),
                )
                .await
            {
                Ok(written) if slots::holder(&written) == Some(session.node.as_str()) => {
                    self.inner.changes.observe(&written, true);
                    self.cache_lease(&session.node, &written);
                    return Ok(slot);
                }
                Err(e) if is_conflict(&e) && !fresh => {}
                Ok(_) => break,
                Err(e) if is_conflict(&e) || is_not_found(&e) => break,
                Err(e) => return Err(e).context("update", LEASES, self.lease_path(&name)),
            }
        }
        self.forget_lease(&session.node);
        Err(fenced(session))
    }
}

/// The slot Lease `node` holds among `leases`.
pub(super) fn held_by<'a>(leases: &'a [Lease], node: &NodeName) -> Option<&'a Lease> {
    leases
        .iter()
        .filter(|l| slots::slot_of(l).is_some())
        .find(|l| slots::holder(l) == Some(node.as_str()))
}
