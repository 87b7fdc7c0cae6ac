//! `Store::write`: a compare-and-swap of the node's RotaNode with what rota-core decides on it.
//! An ended window is created as its `RotaWindow` first, named in the RotaNode's write; the
//! windows no longer kept are deleted, and the Lease of a window that ended given back, after
//! it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use rota_core::{Applied, NodeName, Write};
use rota_kube_api::crd::{RotaNode, RotaNodeStatus};
use rota_kube_api::window::{RotaWindow, RotaWindowSpec};
use rota_kube_client::{is_conflict, is_not_found};
use rota_store::{Error, RequestRecord, Result, WindowChange, Writer, Written, now_millis};
use tracing::warn;

use super::events::{outcome_event, transition_event};
use super::turns::take_up;
use super::{KubeStore, fenced, jitter};
use crate::error::Context;
use crate::record::{self, Persisted};

const ROTA_WINDOWS: &str = "rotawindows.rota.dev";
/// How often one write may lose its compare-and-swap before the store gives up.
const ATTEMPTS: u32 = 16;

impl KubeStore {
    /// `Store::write`. A [`Writer::Fenced`] write also reads the Lease of the node's slot at the
    /// same time, and is refused (though written) unless it names the node.
    pub(super) async fn apply_write(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        let node = writer.node();
        let Writer::Fenced(session, ttl) = writer else {
            return self.persist(writer, &write).await;
        };
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.remember_deadline(node, session.id, now_millis().saturating_add(ttl));
        let known = self.rota_node(node, false).await?;
        let Some(slot) = known.and_then(|mut o| {
            take_up(&mut o);
            o.status?.slot
        }) else {
            return Err(fenced(session));
        };
        let (written, named) =
            tokio::try_join!(self.persist(writer, &write), self.lease_names(slot, node))?;
        if !named {
            return Err(fenced(session));
        }
        Ok(written)
    }

    async fn persist(&self, writer: Writer<'_>, write: &Write) -> Result<Written> {
        let (node, session) = (writer.node(), writer.session());
        let name = self.object_name(node);
        let mut fresh = session.is_none();
        for attempt in 0..ATTEMPTS {
            let Some(mut object) = self.rota_node(node, fresh).await? else {
                return Err(match session {
                    Some(session) => fenced(session),
                    None => Error::NoSuchNode { node: node.clone() },
                });
            };
            let now = now_millis();
            let checked = match session {
                Some(session) => self.session_current(&object, session, now).and_then(|()| {
                    if matches!(writer, Writer::Fenced(..)) || opens_window(write) {
                        take_up(&mut object);
                    }
                    fenced_slot(writer, &object)
                }),
                None => Ok(()),
            };
            let kept = self.inner.config.kept_windows;
            let decided = checked.and_then(|()| decide(&mut object, node, &name, write, now, kept));
            let (applied, persisted, released) = match decided {
                Ok(decided) => decided,
                Err(e) if fresh => return Err(e),
                Err(_) => {
                    fresh = true;
                    continue;
                }
            };
            if !applied.changed {
                if fresh {
                    return Ok(written(node, write, applied, persisted.opened, &object));
                }
                fresh = true;
                continue;
            }
            if let Some(session) = session {
                self.renew_in_object(&mut object, session);
            }
            if let Some(window) = &persisted.window {
                self.create_window(&object, window).await?;
            }
            let Some(stored) = self.replace(object).await? else {
                fresh = true;
                tokio::time::sleep(jitter(attempt)).await;
                continue;
            };
            self.after_write(node, write, &persisted, released).await;
            return Ok(written(node, write, applied, persisted.opened, &stored));
        }
        Err(crate::error::KubeError::Contended {
            resource: super::ROTA_NODES,
            name,
            attempts: ATTEMPTS,
        }
        .into())
    }

    /// What follows a write: the windows no longer kept deleted, the Lease of an ended window
    /// given back, the Event. Failures here lose nothing: a window not deleted is one no
    /// RotaNode lists, and a Lease not given back is taken back by the scheduler.
    async fn after_write(
        &self,
        node: &NodeName,
        write: &Write,
        persisted: &Persisted,
        released: Option<u32>,
    ) {
        for name in &persisted.dropped {
            let deleted = self
                .inner
                .rota_windows
                .delete(name, &DeleteParams::default())
                .await;
            if let Err(e) = deleted.map(drop).or_else(ignore_not_found) {
                warn!(window = name, error = %e, "could not delete a window no longer kept");
            }
        }
        if let Some(slot) = released
            && let Err(e) = self.release_lease(slot, node).await
        {
            warn!(node = %node, slot, error = %e, "could not give the slot's Lease back; the scheduler takes it back");
        }
        let event = match write {
            Write::Transition(transition) => transition_event(transition, node),
            Write::CompleteRequest { process, outcome } => {
                Some(outcome_event(process, node, outcome))
            }
            Write::Unlock { reason } => Some((
                EventType::Warning,
                "Unlocked",
                format!("rota: node {node} unlocked by an operator: {reason}"),
            )),
            Write::Retry => Some((
                EventType::Normal,
                "Retried",
                format!("rota: node {node} retried by an operator"),
            )),
            _ => None,
        };
        if let Some((type_, reason, note)) = event {
            self.emit(node, type_, reason, note);
        }
    }

    /// Creates `window`, owned by RotaNode `owner`; one that exists already is this write's,
    /// from an attempt whose RotaNode write failed (its name is its content's).
    async fn create_window(&self, owner: &RotaNode, window: &RotaWindowSpec) -> Result<()> {
        let name = window.name(&owner.name_any());
        let object = RotaWindow {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(self.labels()),
                owner_references: Some(vec![OwnerReference {
                    api_version: RotaNode::api_version(&()).into(),
                    kind: RotaNode::kind(&()).into(),
                    name: owner.name_any(),
                    uid: owner.uid().unwrap_or_default(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: window.clone(),
        };
        match self
            .inner
            .rota_windows
            .create(&PostParams::default(), &object)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e).context("create", ROTA_WINDOWS, name),
        }
    }
}

fn ignore_not_found(e: kube::Error) -> std::result::Result<(), kube::Error> {
    if is_not_found(&e) { Ok(()) } else { Err(e) }
}

fn opens_window(write: &Write) -> bool {
    matches!(write, Write::Transition(t) if matches!(t.window, WindowChange::Open))
}

/// A fenced write needs the node in its window of the slot its grant names.
fn fenced_slot(writer: Writer<'_>, object: &RotaNode) -> Result<()> {
    let Writer::Fenced(session, _) = writer else {
        return Ok(());
    };
    let slot = object.status.as_ref().and_then(|s| s.slot);
    match (slot, object.spec.grant) {
        (Some(slot), Some(grant)) if grant.slot == slot => Ok(()),
        _ => Err(fenced(session)),
    }
}

/// rota-core's decision on `object`'s record, written into it: the answer, what the store
/// persists beside the RotaNode, and the slot the write gives back (its grant cleared).
fn decide(
    object: &mut RotaNode,
    node: &NodeName,
    name: &str,
    write: &Write,
    now: rota_store::Millis,
    kept_windows: usize,
) -> Result<(Applied, Persisted, Option<u32>)> {
    let status = object.status.get_or_insert_with(|| record::new_status(now));
    let before = record::overview(node, status);
    let applied = before.apply(write, now)?;
    let before_status = status.clone();
    let released = before
        .record
        .slot
        .filter(|_| applied.after.record.slot.is_none());
    let mut persisted = record::apply(status, node, name, &applied, kept_windows);
    if released.is_some() {
        object.spec.grant = None;
    }
    let mut applied = applied;
    if object.status.as_ref() == Some(&before_status) && released.is_none() {
        applied.changed = false;
        persisted.window = None;
    }
    Ok((applied, persisted, released))
}

/// What a write did (see [`Written`]): the request it was about, the one standing for its
/// process when it added none (a procedure's, ever).
fn written(
    node: &NodeName,
    write: &Write,
    applied: Applied,
    opened: Vec<RequestRecord>,
    object: &RotaNode,
) -> Written {
    let standing = |process| {
        let status: Option<&RotaNodeStatus> = object.status.as_ref();
        status.and_then(|s| {
            let r = s.procedures.iter().find(|r| &r.process == process)?;
            Some(record::request_record(node, r))
        })
    };
    let (request, changed) = match write {
        Write::AddRequest { process, .. } => {
            let created = !opened.is_empty();
            let request = opened
                .into_iter()
                .next()
                .or_else(|| applied.request(process).cloned())
                .or_else(|| standing(process));
            (request, created)
        }
        Write::CancelRequest { .. } => (None, !applied.closed.is_empty()),
        Write::CompleteRequest { process, .. } => {
            (applied.request(process).cloned(), applied.changed)
        }
        _ => (None, applied.changed),
    };
    Written {
        record: applied.after.record,
        request,
        changed,
    }
}
