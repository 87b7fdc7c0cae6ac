//! An operator's commands on a node (unlock, retry, request, cancel): compare-and-swap
//! writes of its RotaNode without a session, each followed by a wake of the node's agent.

use kube::runtime::events::EventType;
use rota_core::{NodeName, NodeState, Process};
use rota_store::{Error, NodeRecord, RequestRecord, Result, now_millis};

use super::KubeStore;
use super::cas::{CAS_ATTEMPTS, Seen};
use crate::crd::RotaNode;
use crate::{history_ring, procedure_ledger, status};

impl KubeStore {
    /// An operator's unlock: ends the node's window and gives its slot back.
    pub(super) async fn operator_unlock(
        &self,
        node: &NodeName,
        reason: &str,
    ) -> Result<NodeRecord> {
        for _ in 0..CAS_ATTEMPTS {
            let Some(mut object) = self.get_rota_node(node).await? else {
                return Err(Error::NoSuchNode { node: node.clone() });
            };
            let held = self.held_lease(node).await?;
            let seen = Seen {
                now: now_millis(),
                held,
            };
            let mut status = object.status.take().unwrap_or_default();
            if seen.held.is_none() && !status.state.holds_slot() {
                return Err(Error::Refused(rota_core::RecordError::NotAllowed {
                    node: node.clone(),
                    state: status.state,
                    write: "unlock",
                    needs: "holds a slot",
                }));
            }
            status::apply_unlock(&mut status, reason, seen.slot(), seen.history_time());
            object.status = Some(status);
            let Some(written) = self.replace(object, false).await? else {
                continue;
            };
            let status = written.status.unwrap_or_default();
            match &seen.held {
                Some(lease) => {
                    let released = history_ring::last_entry_at(&status).unwrap_or(seen.now);
                    self.release_lease(lease, node, released).await?;
                }
                None => self.inner.changes.bump(1),
            }
            self.emit(
                node,
                EventType::Warning,
                "Unlocked",
                format!("rota: node {node} unlocked by an operator: {reason}"),
            );
            self.wake_agents(Some(node)).await;
            return Ok(status::node_record(node, &status, None));
        }
        Err(self.contended(node))
    }

    /// An operator's retry: a failed node goes back to maintaining.
    pub(super) async fn operator_retry(&self, node: &NodeName) -> Result<NodeRecord> {
        for _ in 0..CAS_ATTEMPTS {
            let Some(mut object) = self.get_rota_node(node).await? else {
                return Err(Error::NoSuchNode { node: node.clone() });
            };
            let mut status = object.status.take().unwrap_or_default();
            if status.state != NodeState::Failed {
                return Err(Error::Refused(rota_core::RecordError::NotAllowed {
                    node: node.clone(),
                    state: status.state,
                    write: "retry",
                    needs: "is failed",
                }));
            }
            status::enter(&mut status, NodeState::Maintaining, now_millis());
            object.status = Some(status);
            let Some(written) = self.replace(object, false).await? else {
                continue;
            };
            self.inner.changes.bump(1);
            self.emit(
                node,
                EventType::Normal,
                "Retried",
                format!("rota: node {node} retried by an operator"),
            );
            self.wake_agents(Some(node)).await;
            let leases = self.list_leases().await?;
            return self.record_of(&written, &leases);
        }
        Err(self.contended(node))
    }

    /// An operator's request: one for the node, unless it has one. Returns the request, whether
    /// it was created now, and the RotaNode as it read or wrote it.
    pub(super) async fn operator_request(
        &self,
        node: &NodeName,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool, RotaNode)> {
        for _ in 0..CAS_ATTEMPTS {
            let Some(mut object) = self.get_rota_node(node).await? else {
                return Err(Error::NoSuchNode { node: node.clone() });
            };
            let mut status = object.status.take().unwrap_or_default();
            let owner = self.object_name(node);
            let mut ledger = self.known_ledger(&owner);
            if procedure_ledger::stale(&status, process, &ledger) {
                let uid = object.metadata.uid.clone().unwrap_or_default();
                ledger = self
                    .current_ledger(&owner, &uid, status.procedure_ledger)
                    .await?;
            }
            let (request, created) =
                status::add_request(&mut status, process, source, now_millis(), &ledger);
            object.status = Some(status);
            if !created {
                return Ok((status::request_record(node, &request), false, object));
            }
            if let Some(written) = self.replace(object, false).await? {
                self.wake_agents(Some(node)).await;
                return Ok((status::request_record(node, &request), true, written));
            }
        }
        Err(self.contended(node))
    }

    /// An operator's cancel of the node's open request for `process`, if any. Returns whether
    /// there was one, and the RotaNode as it read or wrote it.
    pub(super) async fn operator_cancel(
        &self,
        node: &NodeName,
        process: &Process,
    ) -> Result<(bool, RotaNode)> {
        for _ in 0..CAS_ATTEMPTS {
            let Some(mut object) = self.get_rota_node(node).await? else {
                return Err(Error::NoSuchNode { node: node.clone() });
            };
            let mut status = object.status.take().unwrap_or_default();
            let canceled = status::cancel_request(&mut status, process, now_millis());
            object.status = Some(status);
            if !canceled {
                return Ok((false, object));
            }
            if let Some(written) = self.replace(object, false).await? {
                self.wake_agents(Some(node)).await;
                return Ok((true, written));
            }
        }
        Err(self.contended(node))
    }
}
