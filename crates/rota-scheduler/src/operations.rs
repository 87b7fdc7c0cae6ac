//! A grant and a withdrawal, carried out by compare-and-swap on the objects as the fleet's read
//! showed them, in the model checker's order (`crates/rota-core/tests/scheduler_model`):
//!
//! - a grant writes the slot's Lease from free to the node, then the node's `spec.grant`;
//! - a withdrawal writes the node's RotaNode first (the grant removed if it was not taken up,
//!   and the withdrawal recorded in `spec.withdrawn`: a write that fails if the agent took the
//!   grant up since the read), then the Lease back to free.
//!
//! A compare-and-swap that fails ends the operation: the next read decides again.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, ResourceExt};
use rota_core::NodeName;
use rota_core::grants::{Operation, Withdrawal};
use rota_kube_api::crd::{GrantSpec, Timestamp, WithdrawnSpec};
use rota_kube_api::{RotaNode, slots};
use rota_kube_client::is_conflict;
use rota_store::now_millis;
use tracing::{debug, info, warn};

use crate::fleet::Read;

pub(crate) struct Operations {
    rota_nodes: Api<RotaNode>,
    leases: Api<Lease>,
    nodes: Api<Node>,
    recorder: Recorder,
}

impl Operations {
    pub(crate) fn new(client: Client, namespace: &str, recorder: Recorder) -> Operations {
        Operations {
            rota_nodes: Api::all(client.clone()),
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client, namespace),
            recorder,
        }
    }

    /// Carries `operation` out; whether it did (a lost compare-and-swap does nothing).
    pub(crate) async fn carry_out(&self, read: &Read, operation: &Operation) -> bool {
        let done = match operation {
            Operation::Grant { node, slot } => self.grant(read, node, *slot).await,
            Operation::Withdraw { node, slot, why } => self.withdraw(read, node, *slot, *why).await,
        };
        done.unwrap_or_else(|e| {
            warn!(error = %e, ?operation, "an operation of the scheduler failed; the next read decides again");
            false
        })
    }

    async fn grant(&self, read: &Read, node: &NodeName, slot: u32) -> Result<bool, kube::Error> {
        let Some(mut rota_node) = read.rota_node(node) else {
            return Ok(false);
        };
        let lease = read.lease(slot);
        if lease.as_deref().and_then(slots::holder).is_some() {
            return Ok(false);
        }
        // The Lease is owned by the Node (if the cluster has one of that name), so that the
        // garbage collector frees the slot of a Node deleted during its window.
        let owner = self.nodes.get_opt(node.as_str()).await?;
        let owner = owner.as_ref().and_then(slots::node_owner);
        let now = now_millis();
        let taken = slots::taken(slot, lease.as_deref(), node.as_str(), owner, now);
        let written = match lease {
            Some(_) => {
                let name = slots::slot_name(slot);
                self.leases
                    .replace(&name, &PostParams::default(), &taken)
                    .await
            }
            None => self.leases.create(&PostParams::default(), &taken).await,
        };
        if !written_or_lost(written)? {
            return Ok(false);
        }
        rota_node.spec.grant = Some(GrantSpec {
            slot,
            at: Timestamp(now),
        });
        let name = rota_node.name_any();
        let version = rota_node.metadata.resource_version.clone();
        let done = written_or_lost(
            self.rota_nodes
                .replace(&name, &PostParams::default(), &rota_node)
                .await,
        )?;
        debug!(node = %node, slot, ?version, done, "granted");
        Ok(done)
    }

    async fn withdraw(
        &self,
        read: &Read,
        node: &NodeName,
        slot: u32,
        why: Withdrawal,
    ) -> Result<bool, kube::Error> {
        let Some(lease) = read.lease(slot) else {
            return Ok(false);
        };
        if let Some(mut rota_node) = read.rota_node(node) {
            let not_taken_up = matches!(why, Withdrawal::NotTakenUp | Withdrawal::Blocked);
            if not_taken_up && rota_node.spec.grant.map(|g| g.slot) == Some(slot) {
                rota_node.spec.grant = None;
            }
            let reason = match why {
                Withdrawal::NotTakenUp => "notTakenUp",
                Withdrawal::Blocked => "blocked",
                Withdrawal::Unused => "unused",
            };
            rota_node.spec.withdrawn = Some(WithdrawnSpec {
                slot,
                at: Timestamp(now_millis()),
                reason: reason.into(),
            });
            let name = rota_node.name_any();
            let version = rota_node.metadata.resource_version.clone();
            let status = rota_node.status.as_ref();
            debug!(node = %node, slot, ?why, ?version, state = ?status.map(|s| s.state), queued_at = ?status.and_then(|s| s.queued_at), taken = ?status.and_then(|s| s.slot), grant = ?rota_node.spec.grant, "withdrawing");
            let written = self
                .rota_nodes
                .replace(&name, &PostParams::default(), &rota_node)
                .await;
            if !written_or_lost(written)? {
                return Ok(false);
            }
        }
        let released = slots::released(&lease, now_millis());
        let name = slots::slot_name(slot);
        let written = self
            .leases
            .replace(&name, &PostParams::default(), &released)
            .await;
        let done = written_or_lost(written)?;
        if done {
            self.record(node, slot, why).await;
        }
        Ok(done)
    }

    /// Every withdrawal is logged and recorded as an Event on the Node.
    async fn record(&self, node: &NodeName, slot: u32, why: Withdrawal) {
        let note = match why {
            Withdrawal::NotTakenUp => format!(
                "rota: slot {slot} withdrawn from node {node}: its agent did not take the grant up in time; the node waits until its agent writes again"
            ),
            Withdrawal::Blocked => format!(
                "rota: slot {slot} withdrawn from node {node}: it became blocked before its agent took the grant up"
            ),
            Withdrawal::Unused => {
                format!(
                    "rota: slot {slot} taken back from node {node}, which was in no window of it"
                )
            }
        };
        info!(node = %node, slot, ?why, "withdrawn");
        let reference = rota_kube_api::node_reference(node.as_str());
        let event = Event {
            type_: match why {
                Withdrawal::NotTakenUp => EventType::Warning,
                Withdrawal::Blocked | Withdrawal::Unused => EventType::Normal,
            },
            reason: "SlotWithdrawn".into(),
            note: Some(note),
            action: "Scheduling".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            warn!(node = %node, error = %e, "could not record a withdrawal as an Event");
        }
    }
}

/// `Ok(true)` when written, `Ok(false)` when the compare-and-swap (or a create) lost.
fn written_or_lost<T>(written: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match written {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(e),
    }
}
