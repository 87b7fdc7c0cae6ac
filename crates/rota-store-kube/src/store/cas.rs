//! Compare-and-swap writes of RotaNodes: `replace` on the `resourceVersion` read, the fenced
//! `edit` behind every write of a node's agent, and the pause that spreads out the racers
//! of a lost compare-and-swap.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use rota_core::{NodeName, NodeState};
use rota_kube_client::is_conflict;
use rota_store::{Error, Millis, Result, Session, now_millis};

use super::{KubeStore, ROTA_NODES, fenced, node_name};
use crate::crd::{RotaNode, RotaNodeStatus, SCHEMA, Timestamp};
use crate::error::{Context, KubeError};
use crate::{queue_labels, slots};

/// How often one write may lose its compare-and-swap before the store gives up.
pub(super) const CAS_ATTEMPTS: u32 = 16;

/// What a fenced edit does after looking at the node.
pub(super) enum Edit<T> {
    Write(T),
    Keep(T),
}

/// What an edit sees besides the node: the time and the slot Lease the node holds.
pub(super) struct Seen {
    pub(super) now: Millis,
    pub(super) held: Option<Lease>,
}

impl Seen {
    pub(super) fn slot(&self) -> Option<u32> {
        self.held.as_ref().and_then(slots::slot_of)
    }

    /// The time for history entries: never before the node took its slot (see `slots`).
    pub(super) fn history_time(&self) -> Millis {
        let acquired = self.held.as_ref().and_then(slots::acquired_at);
        acquired.map_or(self.now, |a| a.max(self.now))
    }
}

impl KubeStore {
    /// Writes `object` if it is unchanged since it was read, and keeps what was written (with
    /// `with_lease`, see `Known`); `None` when it was not.
    pub(super) async fn replace(
        &self,
        mut object: RotaNode,
        with_lease: bool,
    ) -> Result<Option<RotaNode>> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let node = node_name(&object).ok();
        self.move_history(&mut object).await?;
        // A move makes the RotaNode forget what it moved: it waits until an answer has shown
        // that the CRD keeps `procedureLedger` (an older one drops it, and the requests with it).
        if self.inner.schema_kept.load(Ordering::Relaxed) {
            self.move_procedure_requests(&mut object).await?;
        }
        if let Some(status) = object.status.as_mut() {
            status.schema = SCHEMA;
        }
        // The own RotaNodes' watch may bring this write before its answer does.
        let _writing = node.as_ref().map(|node| self.writing(node));
        let state = object.status.as_ref().map_or(NodeState::Idle, |s| s.state);
        // A sparse renewal is for a node waiting far back only (see `waiting`).
        if state != NodeState::Queued
            && let Some(session) = object.status.as_mut().and_then(|s| s.session.as_mut())
        {
            session.sparse = false;
        }
        let labels = object.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.extend(self.labels(state));
        if let Some(status) = &object.status {
            queue_labels::mirror(labels, status);
        }
        match self
            .inner
            .rota_nodes
            .replace(&name, &PostParams::default(), &object)
            .await
        {
            Ok(written) => {
                self.schema_kept(&written)?;
                self.inner.reporter.observe(&written);
                if let Some(node) = &node {
                    self.cache(node, &written, with_lease);
                }
                Ok(Some(written))
            }
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(e).context("update", ROTA_NODES, name),
        }
    }

    /// Whether the answer to a write of a RotaNode kept its `schema`: an older CRD drops the
    /// fields it does not know, and rota stops rather than lose them.
    pub(super) fn schema_kept(&self, written: &RotaNode) -> Result<()> {
        if let Some(outdated) = outdated(written) {
            return Err(outdated.into());
        }
        self.inner.schema_kept.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The fenced compare-and-swap behind every write of a node's agent: reads the RotaNode
    /// (and, with `with_lease`, the slot Lease the node holds), refuses a session that is not
    /// current, lets `edit` change the status, and writes it back only if nothing changed in
    /// between, else starts over.
    ///
    /// An agent is almost always the only writer of its RotaNode, so the first attempt starts
    /// from the object as this process last saw it, without reading it again: if it is stale,
    /// the write fails its compare-and-swap and the next attempt reads. A refusal (fenced, or
    /// a conflict of `edit`) is only ever given on a fresh read.
    pub(super) async fn edit<T>(
        &self,
        session: &Session,
        with_lease: bool,
        mut edit: impl FnMut(&mut RotaNodeStatus, &Seen) -> Result<Edit<T>>,
    ) -> Result<(T, RotaNodeStatus, Seen)> {
        let mut cached = self.cached(&session.node);
        for _ in 0..CAS_ATTEMPTS {
            let (mut object, fresh, held, lease_known) = match cached.take() {
                Some(known) => {
                    let held = if with_lease {
                        self.lease_of(&session.node, false).await?
                    } else {
                        None
                    };
                    (known.object, false, held, known.with_lease)
                }
                None => {
                    let lease = async {
                        if with_lease {
                            self.held_lease(&session.node).await
                        } else {
                            Ok(None)
                        }
                    };
                    match tokio::try_join!(self.get_rota_node(&session.node), lease)? {
                        (Some(object), held) => (object, true, held, with_lease),
                        (None, _) => return Err(fenced(session)),
                    }
                }
            };
            if fresh {
                self.cache(&session.node, &object, lease_known);
            }
            let seen = Seen {
                now: now_millis(),
                held,
            };
            let mut status = object.status.take().unwrap_or_default();
            if !self.session_ok(&status, session, seen.now) {
                if fresh {
                    return Err(fenced(session));
                }
                continue;
            }
            let value = match edit(&mut status, &seen) {
                Ok(Edit::Keep(value)) if fresh => {
                    let deadline = status.session.as_ref().map_or(0, |s| s.deadline.0);
                    self.remember(session, &status, deadline);
                    return Ok((value, status, seen));
                }
                Ok(Edit::Write(value)) => value,
                Err(e) if fresh => return Err(e),
                Ok(Edit::Keep(_)) | Err(_) => continue,
            };
            // A deadline renewed in memory while idle is written with the next write.
            let local = self
                .local_session(&session.node)
                .filter(|l| l.id == session.id)
                .map_or(0, |l| l.deadline);
            if let Some(current) = status.session.as_mut() {
                current.deadline = Timestamp(current.deadline.0.max(local));
            }
            let deadline = status.session.as_ref().map_or(0, |s| s.deadline.0);
            object.status = Some(status);
            if let Some(written) = self.replace(object, lease_known).await? {
                let status = written.status.unwrap_or_default();
                self.remember(session, &status, deadline);
                return Ok((value, status, seen));
            }
        }
        Err(self.contended(&session.node))
    }

    /// Why a write of `node`'s RotaNode gave up: it lost every compare-and-swap.
    pub(super) fn contended(&self, node: &NodeName) -> Error {
        KubeError::Contended {
            resource: ROTA_NODES,
            name: self.object_name(node),
            attempts: CAS_ATTEMPTS,
        }
        .into()
    }
}

/// The error for the answer to a write of a RotaNode that lacks the `schema` it was sent
/// with: an older CRD's pruning.
fn outdated(written: &RotaNode) -> Option<KubeError> {
    (written.status.as_ref().map_or(0, |s| s.schema) != SCHEMA).then_some(KubeError::CrdOutdated {
        resource: ROTA_NODES,
        field: "status.schema",
    })
}

/// A pause of up to 10 ms × 2^attempt (at most 1 s), random enough to break up a herd: the
/// clock's nanoseconds differ between the racers.
pub(crate) fn jitter(attempt: u32) -> Duration {
    let ceiling = 10u64.saturating_mul(1 << attempt.min(7)).min(1000);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    Duration::from_millis(nanos % ceiling + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer an older CRD gives: the status without the fields it does not know.
    fn answered(status: serde_json::Value) -> RotaNode {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "rota.dev/v1alpha1",
            "kind": "RotaNode",
            "metadata": { "name": "node-a" },
            "spec": { "node": "node-a" },
            "status": status,
        }))
        .expect("a RotaNode")
    }

    #[test]
    fn an_answer_cut_down_by_an_older_crd_stops_rota_with_what_to_do() {
        let pruned =
            answered(serde_json::json!({ "state": "idle", "since": "2026-12-03T10:00:00Z" }));
        let text = outdated(&pruned).expect("refused").to_string();
        assert!(text.contains("rotanodes.rota.dev"), "{text}");
        assert!(
            text.contains("kubectl apply -f charts/rota/crds/"),
            "{text}"
        );
        let kept = answered(serde_json::json!({
            "state": "idle",
            "since": "2026-12-03T10:00:00Z",
            "schema": SCHEMA,
        }));
        assert!(outdated(&kept).is_none());
    }
}
