//! The RotaNodes of this handle's agents: the newest of each that this process wrote, read or
//! was shown by their watch, and the compare-and-swap edit behind every write of one.
//!
//! The watch is kube-runtime's watcher, of the agent's own RotaNode by name (of every RotaNode
//! of the installation once a handle serves several agents, as in `rota simulate`). An event
//! newer than what the handle knows (someone else wrote: the scheduler's grant, an operator)
//! moves the change counter on, which wakes the agent. Its own writes come back as events of
//! a version it already knows, and move nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use rota_core::NodeName;
use rota_kube_api::crd::{RotaNode, Timestamp};
use rota_kube_client::is_conflict;
use rota_store::{Error, Millis, Result, Session, WAKE_ALL, now_millis};
use tokio::task::AbortHandle;
use tracing::debug;

use super::{KubeStore, ROTA_NODES, fenced};
use crate::changes::Changes;
use crate::error::{Context, KubeError};

/// How often one write may lose its compare-and-swap before the store gives up.
const CAS_ATTEMPTS: u32 = 16;

/// What an edit does after looking at the node.
pub(super) enum Edit<T> {
    /// Write the object as edited.
    Write(T),
    /// Write nothing; an answer given only on a fresh read.
    Keep(T),
    /// Write nothing; an answer this handle's view of the node is enough for (a stale one
    /// only delays it: the watch brings the newer object and wakes the agent).
    Answer(T),
}

pub(super) struct Own {
    api: Api<RotaNode>,
    changes: Arc<Changes>,
    known: Mutex<HashMap<String, RotaNode>>,
    /// The RotaNodes watched, and the watch.
    watched: Mutex<(BTreeSet<String>, Option<AbortHandle>)>,
    /// Whether the watch has listed them and not failed since.
    synced: AtomicBool,
    /// What this handle's writes under way sent, by RotaNode: their event may come before
    /// their answer, and must not wake the agent as if someone else had written.
    sending: Mutex<HashMap<String, Vec<serde_json::Value>>>,
}

/// What a write of a RotaNode sets: its spec and status.
fn content(object: &RotaNode) -> serde_json::Value {
    serde_json::json!([object.spec, object.status])
}

/// A write under way, until dropped.
pub(super) struct Sending<'a> {
    own: &'a Own,
    name: String,
    content: serde_json::Value,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        let mut sending = self.own.sending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = sending.get_mut(&self.name) {
            if let Some(i) = list.iter().position(|c| *c == self.content) {
                list.swap_remove(i);
            }
            if list.is_empty() {
                sending.remove(&self.name);
            }
        }
    }
}

/// An object's resourceVersion as a number: the API server's are etcd revisions.
fn version(object: &RotaNode) -> u64 {
    object
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Own {
    pub(super) fn new(api: Api<RotaNode>, changes: Arc<Changes>) -> Own {
        Own {
            api,
            changes,
            known: Mutex::default(),
            watched: Mutex::default(),
            synced: AtomicBool::new(false),
            sending: Mutex::default(),
        }
    }

    /// RotaNode `name` as known, if this handle's watch follows it and has listed: what the
    /// watch shows is then as current as the API server's cache.
    pub(super) fn get(&self, name: &str) -> Option<RotaNode> {
        let follows = {
            let watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
            watched.0.contains(name) && self.synced.load(Ordering::SeqCst)
        };
        follows.then(|| self.lock().get(name).cloned()).flatten()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RotaNode>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `object` if it is newer than what is known; whether it was.
    pub(super) fn put(&self, object: &RotaNode) -> bool {
        let mut known = self.lock();
        let name = object.name_any();
        if known
            .get(&name)
            .is_some_and(|k| version(k) >= version(object))
        {
            return false;
        }
        known.insert(name, object.clone());
        true
    }

    /// Marks a write of `object` as under way.
    pub(super) fn send(&self, object: &RotaNode) -> Sending<'_> {
        let sending = Sending {
            own: self,
            name: object.name_any(),
            content: content(object),
        };
        let mut all = self.sending.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(sending.name.clone())
            .or_default()
            .push(sending.content.clone());
        sending
    }

    /// Keeps a watched `object`, and whether someone else wrote it: it is newer than what is
    /// known, and not what a write of this handle under way sent.
    fn watched(&self, object: &RotaNode) -> bool {
        if !self.put(object) {
            return false;
        }
        let sending = self.sending.lock().unwrap_or_else(|e| e.into_inner());
        let sent = sending.get(&object.name_any());
        !sent.is_some_and(|list| list.contains(&content(object)))
    }

    pub(super) fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Watches RotaNode `name` from now on: by name while it is the handle's only one, else
    /// every RotaNode `selector` picks.
    pub(super) fn watch(self: &Arc<Self>, name: &str, selector: &str) {
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        if !watched.0.insert(name.to_string()) {
            return;
        }
        let config = match watched.0.len() {
            1 => watcher::Config::default().fields(&format!("metadata.name={name}")),
            2 => watcher::Config::default().labels(selector),
            _ => return,
        };
        if let Some(old) = watched.1.take() {
            old.abort();
        }
        self.synced.store(false, Ordering::SeqCst);
        let own = Arc::downgrade(self);
        let stream = watcher(self.api.clone(), config);
        watched.1 = Some(
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let Some(own) = own.upgrade() else { return };
                    match event {
                        // A jump, not a step: an idle agent waits for one (an edit by hand
                        // of its requests must wake it), a waiting one for any change.
                        Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                            if own.watched(&object) {
                                own.changes.bump(WAKE_ALL);
                            }
                        }
                        Ok(watcher::Event::Delete(object)) => {
                            own.forget(&object.name_any());
                            own.changes.bump(WAKE_ALL);
                        }
                        Ok(watcher::Event::InitDone) => own.synced.store(true, Ordering::SeqCst),
                        Ok(watcher::Event::Init) => {}
                        Err(e) => {
                            own.synced.store(false, Ordering::SeqCst);
                            debug!(error = %e, "the watch of own RotaNodes failed; retrying");
                        }
                    }
                }
            })
            .abort_handle(),
        );
    }

    /// Whether a watch runs, and has listed its RotaNodes and not failed since.
    pub(super) fn watching(&self) -> (bool, bool) {
        let watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        (watched.1.is_some(), self.synced.load(Ordering::SeqCst))
    }

    pub(super) fn abort(&self) {
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(watch) = watched.1.take() {
            watch.abort();
        }
    }
}

impl KubeStore {
    /// Node `node`'s RotaNode: as this handle knows it, unless `fresh`, or read now.
    pub(super) async fn rota_node(&self, node: &NodeName, fresh: bool) -> Result<Option<RotaNode>> {
        let name = self.object_name(node);
        if !fresh && let Some(known) = self.inner.own.get(&name) {
            return Ok(Some(known));
        }
        let read = self.get_rota_node(node).await?;
        match &read {
            Some(object) => {
                self.inner.own.put(object);
            }
            None => self.inner.own.forget(&name),
        }
        Ok(read)
    }

    /// Writes `object` if it is unchanged since it was read; `None` when it was not.
    pub(super) async fn replace(&self, mut object: RotaNode) -> Result<Option<RotaNode>> {
        let name = object.name_any();
        object
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .extend(self.labels());
        let _sending = self.inner.own.send(&object);
        match self
            .inner
            .rota_nodes
            .replace(&name, &PostParams::default(), &object)
            .await
        {
            Ok(written) => {
                self.inner.own.put(&written);
                Ok(Some(written))
            }
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(e).context("update", ROTA_NODES, name),
        }
    }

    /// The compare-and-swap behind every write of a RotaNode: reads it (first as this handle
    /// knows it), refuses a `session` that is not current, lets `edit` change it, and writes it
    /// back only if nothing changed in between, else starts over from a fresh read. A refusal
    /// (fenced, or an error of `edit`) is only ever given on a fresh read. An agent's write
    /// also writes the deadline its heartbeats renewed in memory, and clears a withdrawal: the
    /// agent is alive.
    pub(super) async fn edit<T>(
        &self,
        node: &NodeName,
        session: Option<&Session>,
        mut edit: impl FnMut(&mut RotaNode, Millis) -> Result<Edit<T>>,
    ) -> Result<(T, RotaNode)> {
        // An operator's write reads afresh: its handle does not follow the node.
        let mut fresh = session.is_none();
        for attempt in 0..CAS_ATTEMPTS {
            let Some(mut object) = self.rota_node(node, fresh).await? else {
                return Err(match session {
                    Some(session) => fenced(session),
                    None => Error::NoSuchNode { node: node.clone() },
                });
            };
            let now = now_millis();
            if let Some(session) = session {
                match self.session_current(&object, session, now) {
                    Ok(()) => self.renew_in_object(&mut object, session),
                    Err(e) if fresh => return Err(e),
                    Err(_) => {
                        fresh = true;
                        continue;
                    }
                }
            }
            let value = match edit(&mut object, now) {
                Ok(Edit::Answer(value)) => return Ok((value, object)),
                Ok(Edit::Keep(value)) if fresh => {
                    return Ok((value, object));
                }
                Ok(Edit::Write(value)) => value,
                Err(e) if fresh => return Err(e),
                Ok(Edit::Keep(_)) | Err(_) => {
                    fresh = true;
                    continue;
                }
            };
            if let Some(written) = self.replace(object).await? {
                return Ok((value, written));
            }
            fresh = true;
            tokio::time::sleep(jitter(attempt)).await;
        }
        Err(KubeError::Contended {
            resource: ROTA_NODES,
            name: self.object_name(node),
            attempts: CAS_ATTEMPTS,
        }
        .into())
    }

    /// Whether `session` is the one `object` records, and not expired.
    pub(super) fn session_current(
        &self,
        object: &RotaNode,
        session: &Session,
        now: Millis,
    ) -> Result<()> {
        let recorded = object.status.as_ref().and_then(|s| s.session.as_ref());
        match recorded {
            Some(s) if s.id == session.id && self.deadline(session, s.deadline.0) > now => Ok(()),
            _ => Err(fenced(session)),
        }
    }

    /// The session's deadline: the later of the one written and the one renewed in memory.
    pub(super) fn deadline(&self, session: &Session, written: Millis) -> Millis {
        let deadlines = self
            .inner
            .deadlines
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match deadlines.get(session.node.as_str()) {
            Some(&(id, local)) if id == session.id => written.max(local),
            _ => written,
        }
    }

    /// Writes the deadline renewed in memory into `object`, and clears a withdrawal.
    pub(super) fn renew_in_object(&self, object: &mut RotaNode, session: &Session) {
        object.spec.withdrawn = None;
        if let Some(s) = object.status.as_mut().and_then(|s| s.session.as_mut()) {
            s.deadline = Timestamp(self.deadline(session, s.deadline.0));
        }
    }
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
