//! Node tags (see `ids`), which keep history ids unique: claimed by creating a Lease
//! `rota-node-tag-<tag>`, then owned by the node's RotaNode; the `nextNodeTag` counter of
//! earlier versions is the fallback.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PostParams;
use rota_core::NodeName;
use rota_kube_client::{is_conflict, is_not_found};
use rota_store::Result;
use tracing::warn;

use super::cas::CAS_ATTEMPTS;
use super::settings::parse_config;
use super::{KubeStore, LEASES};
use crate::crd::RotaNode;
use crate::error::Context;
use crate::ids::{self, TAG_LIMIT};

const NEXT_TAG_KEY: &str = "nextNodeTag";

/// The Leases that claim node tags (see `claim_tag`), labelled with their tag, and how many a
/// new node tries before it falls back to the counter.
const TAG_LEASE_PREFIX: &str = "rota-node-tag-";
const TAG_LABEL: &str = "rota.dev/node-tag";
const TAG_PROBES: usize = 64;

impl KubeStore {
    /// A tag for a node that has no RotaNode yet (see `ids`): the first of its candidates whose
    /// Lease `rota-node-tag-<tag>` this call creates, or finds already held by this node (its
    /// agent stopped before it made the RotaNode). Creates do not contend with each other the
    /// way compare-and-swaps of one counter did (at a 1,000-node first start, most agents ran
    /// out of attempts there), and no agent watches these Leases. The counter of earlier
    /// versions is the fallback once the tags a node tries are all taken.
    /// Returns the tag and, unless it came from the counter, its Lease.
    pub(super) async fn claim_tag(&self, node: &NodeName) -> Result<(u32, Option<Lease>)> {
        let holder = self.object_name(node);
        for tag in ids::tag_candidates(&holder).take(TAG_PROBES) {
            let name = format!("{TAG_LEASE_PREFIX}{tag}");
            match self
                .inner
                .leases
                .create(&PostParams::default(), &tag_claim(tag, &holder, None))
                .await
            {
                Ok(created) => return Ok((tag, Some(created))),
                Err(e) if is_conflict(&e) => {}
                Err(e) => return Err(e).context("create", LEASES, self.lease_path(&name)),
            }
            let taken = self.inner.leases.get_opt(&name).await.context(
                "read",
                LEASES,
                self.lease_path(&name),
            )?;
            if let Some(lease) = taken.filter(|l| claimed_by(l, &holder)) {
                return Ok((tag, Some(lease)));
            }
        }
        warn!(node = %node, probes = TAG_PROBES, "the node tags tried are all taken; taking one from the counter");
        Ok((self.next_tag().await?, None))
    }

    /// Makes the tag Lease `claim` belong to the node's new RotaNode, so that the garbage
    /// collector deletes the claim with the RotaNode (`kubectl delete rotanode` of a node gone
    /// for good) and the tag can serve another node. Best effort: a claim left without its
    /// owner stays, as claims did before.
    pub(super) async fn own_tag(&self, rota_node: &RotaNode, tag: u32, claim: Lease) {
        let (Some(owner), Some(holder)) = (
            kube::Resource::owner_ref(rota_node, &()),
            rota_node.metadata.name.clone(),
        ) else {
            return;
        };
        let name = format!("{TAG_LEASE_PREFIX}{tag}");
        let mut current = Some(claim);
        for _ in 0..CAS_ATTEMPTS {
            // Without the claim, the garbage collector took it (its owner was this node's
            // deleted RotaNode): the tag is claimed again, for the new one.
            let (lease, exists) = match current.take() {
                Some(mut lease) => {
                    lease.metadata.owner_references = Some(vec![owner.clone()]);
                    (lease, true)
                }
                None => (tag_claim(tag, &holder, Some(owner.clone())), false),
            };
            let written = self.write_lease(&name, &lease, exists).await;
            match written {
                Ok(_) => return,
                Err(e) if is_conflict(&e) || is_not_found(&e) => {}
                Err(e) => {
                    warn!(lease = %self.lease_path(&name), error = %e, "could not tie the node's tag to its RotaNode");
                    return;
                }
            }
            match self.inner.leases.get_opt(&name).await {
                Ok(Some(lease)) if claimed_by(&lease, &holder) => current = Some(lease),
                Ok(None) => {}
                Ok(Some(_)) => {
                    warn!(lease = %self.lease_path(&name), "the node's tag was claimed by another node");
                    return;
                }
                Err(e) => {
                    warn!(lease = %self.lease_path(&name), error = %e, "could not tie the node's tag to its RotaNode");
                    return;
                }
            }
        }
    }

    /// Hands out the next node tag from the counter of earlier versions (see `ids`).
    async fn next_tag(&self) -> Result<u32> {
        let namespace = self.inner.config.namespace.clone();
        self.update_config(NEXT_TAG_KEY, |current| {
            let tag = parse_config(NEXT_TAG_KEY, current)?.unwrap_or(0);
            if tag >= TAG_LIMIT {
                // Ids stay ordered; they could only collide if two nodes with one tag wrote
                // history in the same millisecond.
                warn!(namespace, limit = TAG_LIMIT, "node tags wrap around");
            }
            Ok(((tag + 1).to_string(), tag % TAG_LIMIT))
        })
        .await
    }
}

/// The Lease that claims node tag `tag` for the RotaNode named `holder`.
fn tag_claim(tag: u32, holder: &str, owner: Option<OwnerReference>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(format!("{TAG_LEASE_PREFIX}{tag}")),
            labels: Some(BTreeMap::from([(TAG_LABEL.into(), tag.to_string())])),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_string()),
            ..LeaseSpec::default()
        }),
    }
}

fn claimed_by(lease: &Lease, holder: &str) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        == Some(holder)
}
