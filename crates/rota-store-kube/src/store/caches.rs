//! What this process remembers of each node between requests (the sessions it opened, the
//! RotaNodes and slot Leases it last read or wrote, the newest RotaNode revision it saw, the
//! `Wait` answers it gave), and the agent's reads answered from it. Every lock of these caches
//! is taken here.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rota_core::{NodeName, NodeState};
use rota_store::{Acquire, Millis, Result, Session, now_millis};

use super::KubeStore;
use crate::crd::{RotaNode, RotaNodeStatus};
use crate::slots;
use crate::view::revision;

/// How long a waiter's place in the queue is taken as known while the change counter stands
/// still (see `try_acquire_slot`).
pub(super) const WAIT_CACHE: Millis = 5_000;
/// The same for a waiter far back in the queue, give or take a random half: its look lists
/// every node ahead of it, and what the counter misses (a waiter ahead that died, an
/// operator's change announces itself with a wake) moves it a few places at most, which the
/// margin between `far` and `near` absorbs. At 5 s, the looks of 1,000 waiters kept the test
/// API server busy listing until its requests timed out; at 5 minutes, 5,000 waiting nodes
/// look about 17 times a second.
pub(super) const FAR_WAIT_CACHE: Millis = 300_000;

/// A RotaNode as this process last read or wrote it.
#[derive(Clone)]
pub(super) struct Known {
    pub(super) object: RotaNode,
    /// When it was read or written.
    at: Millis,
    /// Whether the agent's reads may still be answered from it (see `own_object`); the own
    /// RotaNodes' watch clears it when the RotaNode is deleted.
    answers_reads: bool,
    /// Whether `held` was up to date with it then: it came with a list of the Leases, or from
    /// writes that started from such an object and were never refused (nobody else wrote it
    /// in between, so neither did an operator who gave the slot back).
    pub(super) with_lease: bool,
}

/// A `Wait` answer and the change counter it was computed at.
#[derive(Clone, Copy, Debug)]
pub(super) struct CachedWait {
    session: i64,
    counter: u64,
    at: Millis,
    changes: u64,
    /// How long it stands while the counter stands still.
    valid: Millis,
    /// The session stood fewer than `far` places back when told to wait: its answer stood
    /// `WAIT_CACHE`, and its next look may find its turn come (see `acquire_slot`).
    near: bool,
}

/// A session as this process last saw it.
#[derive(Clone, Copy, Debug)]
pub(super) struct LocalSession {
    pub(super) id: i64,
    /// The node was idle at the last read or write: heartbeats stay in memory.
    pub(super) idle: bool,
    /// The deadline as renewed by heartbeats, possibly later than the one in the RotaNode.
    pub(super) deadline: Millis,
    /// When the API server last confirmed the session.
    pub(super) checked_at: Millis,
    /// The TTL the agent last renewed it with.
    pub(super) ttl: Millis,
    /// The node's last look at the queue found it far from the front: its session is renewed
    /// sparsely (see `waiting`).
    pub(super) far_back: bool,
}

impl KubeStore {
    /// The slot Lease `node` holds: as this process last saw it, unless `fresh`. A stale one is
    /// harmless: every write of a Lease is a compare-and-swap that fails on it, and the writes
    /// of the RotaNode that name its slot are only made by the node's own agent, which learns
    /// of a lost slot at the next fence.
    pub(super) async fn lease_of(&self, node: &NodeName, fresh: bool) -> Result<Option<Lease>> {
        if !fresh {
            let held = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(lease) = held.get(node.as_str()) {
                return Ok(Some(lease.clone()));
            }
        }
        self.held_lease(node).await
    }

    pub(super) fn cache_lease(&self, node: &NodeName, lease: &Lease) {
        let mut held = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
        held.insert(node.as_str().into(), lease.clone());
    }

    pub(super) fn forget_lease(&self, node: &NodeName) {
        let mut held = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
        held.remove(node.as_str());
    }

    pub(super) fn local_session(&self, node: &NodeName) -> Option<LocalSession> {
        let sessions = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        sessions.get(node.as_str()).copied()
    }

    /// Records what this process learnt of its session from a read or a write.
    pub(super) fn remember(&self, session: &Session, status: &RotaNodeStatus, deadline: Millis) {
        {
            let mut sessions = self
                .inner
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let entry = sessions
                .entry(session.node.as_str().to_string())
                .or_insert(LocalSession {
                    id: session.id,
                    idle: true,
                    deadline,
                    checked_at: 0,
                    ttl: 0,
                    far_back: false,
                });
            if entry.id > session.id {
                return;
            }
            let (kept, ttl, far_back) = if entry.id == session.id {
                (entry.deadline, entry.ttl, entry.far_back)
            } else {
                (0, 0, false)
            };
            *entry = LocalSession {
                id: session.id,
                idle: status.state == NodeState::Idle,
                deadline: deadline.max(kept),
                checked_at: now_millis(),
                ttl,
                far_back: far_back && status.state == NodeState::Queued,
            };
        }
        self.watch_leases_while_busy();
    }

    pub(super) fn cached(&self, node: &NodeName) -> Option<Known> {
        let objects = self.inner.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects.get(node.as_str()).cloned()
    }

    pub(super) fn cache(&self, node: &NodeName, object: &RotaNode, with_lease: bool) {
        let mut objects = self.inner.objects.lock().unwrap_or_else(|e| e.into_inner());
        // The own RotaNodes' watch may have brought a newer version already.
        let newer_known = objects
            .get(node.as_str())
            .and_then(|known| revision(&known.object.metadata))
            .zip(revision(&object.metadata))
            .is_some_and(|(known, this)| known > this);
        if newer_known {
            return;
        }
        let known = Known {
            object: object.clone(),
            at: now_millis(),
            answers_reads: true,
            with_lease,
        };
        objects.insert(node.as_str().into(), known);
        drop(objects);
        self.saw_revision(&object.metadata);
        // A look right after this handle's write (a node leaving the queue) must not wait
        // for the write's echo through the watch.
        self.view_queue(|view| view.apply(&object.metadata));
    }

    /// Takes the revision of a RotaNode this handle wrote, read or was shown (see
    /// `newest_seen`).
    pub(super) fn saw_revision(&self, meta: &ObjectMeta) {
        if let Some(this) = revision(meta) {
            let mut newest = self.inner.newest.lock().unwrap_or_else(|e| e.into_inner());
            *newest = (*newest).max(Some(this));
        }
    }

    /// The newest revision of a RotaNode this handle wrote, read or was shown.
    pub(super) fn newest_seen(&self) -> Option<u64> {
        *self.inner.newest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The RotaNode of a node whose agent runs in this process, for its reads between writes.
    ///
    /// The agent reads its node at the start of every pass of its loop, right after the write
    /// that ended the last one, and nobody but the agent writes an agent's RotaNode except an
    /// operator (unlock, retry). So the object this process last wrote or read is the answer while the own
    /// RotaNodes' watch is synced, which brings every write someone else made (see `recent`).
    /// An operator's command also announces its write with a wake (`wake_agents`), and what
    /// this process saw of the node before that wake arrived is not used. Nothing unsafe
    /// follows from a stale answer: every write of the agent is a compare-and-swap that fails
    /// on the stale object, and everything disruptive is fenced. Other nodes' objects (an
    /// operator's reads) always come from the API server.
    pub(super) async fn own_object(&self, node: &NodeName) -> Result<Option<RotaNode>> {
        if let Some(known) = self.recent(node) {
            return Ok(Some(known.object));
        }
        let object = self.get_rota_node(node).await?;
        if let Some(object) = &object
            && self.local_session(node).is_some()
        {
            self.cache(node, object, false);
        }
        Ok(object)
    }

    /// What `own_object` answers with without asking, if anything: only while the own
    /// RotaNodes' watch has listed them and not failed since, as without it a change nobody
    /// announced (a `kubectl edit`, a wake lost with its watch) would go unseen.
    pub(super) fn recent(&self, node: &NodeName) -> Option<Known> {
        self.local_session(node)?;
        if !self.own_watched() {
            return None;
        }
        // An operator's wake says that the node changed after what this process saw of it.
        let woken = self.inner.settings.woken_at(node.as_str());
        self.cached(node)
            .filter(|known| known.answers_reads && known.at > woken)
    }

    /// The slot a node whose agent runs in this process holds, as this process last saw its
    /// Lease (see `lease_of`).
    pub(super) fn own_slot(&self, node: &NodeName) -> Option<u32> {
        let held = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(node.as_str()).and_then(slots::slot_of)
    }

    pub(super) fn cached_wait(&self, session: &Session, counter: u64, now: Millis) -> Option<u64> {
        let waits = self.inner.waits.lock().unwrap_or_else(|e| e.into_inner());
        waits
            .get(session.node.as_str())
            .filter(|w| w.session == session.id && now - w.at < w.valid)
            .and_then(|w| (w.counter.wrapping_add(w.changes)).checked_sub(counter))
            .filter(|left| *left > 0)
    }

    /// Whether this handle told the session to wait near the front of the queue since its
    /// node last changed state (an answer to a waiter far back stands longer).
    pub(super) fn answered_near(&self, session: &Session) -> bool {
        let waits = self.inner.waits.lock().unwrap_or_else(|e| e.into_inner());
        waits
            .get(session.node.as_str())
            .is_some_and(|w| w.session == session.id && w.near)
    }

    pub(super) fn cache_wait(
        &self,
        session: &Session,
        counter: u64,
        now: Millis,
        changes: u64,
        valid: Millis,
        near: bool,
    ) -> Acquire {
        let mut waits = self.inner.waits.lock().unwrap_or_else(|e| e.into_inner());
        waits.insert(
            session.node.as_str().into(),
            CachedWait {
                session: session.id,
                counter,
                at: now,
                changes,
                valid,
                near,
            },
        );
        Acquire::Wait { changes }
    }

    pub(super) fn forget_wait(&self, node: &NodeName) {
        let mut waits = self.inner.waits.lock().unwrap_or_else(|e| e.into_inner());
        waits.remove(node.as_str());
    }

    /// Records the session `open_session` just opened for `node`.
    pub(super) fn open_local(&self, node: &NodeName, local: LocalSession) {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.as_str().into(), local);
        self.watch_for_agents();
        self.watch_leases_while_busy();
    }

    /// Renews an idle node's session in memory only (see `heartbeat`).
    pub(super) fn renew_locally(&self, session: &Session, deadline: Millis) {
        let mut sessions = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = sessions.get_mut(session.node.as_str()) {
            entry.deadline = entry.deadline.max(deadline);
        }
    }

    /// Drops the deadline renewed in memory, so that a closed session is over here at once.
    pub(super) fn end_locally(&self, session: &Session) {
        let mut sessions = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = sessions.get_mut(session.node.as_str())
            && entry.id == session.id
        {
            entry.deadline = 0;
        }
    }

    /// The nodes whose agents opened a session on this handle.
    pub(super) fn local_nodes(&self) -> Vec<NodeName> {
        let sessions = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        sessions
            .keys()
            .filter_map(|n| NodeName::new(n).ok())
            .collect()
    }

    /// Whether a node of this handle's agents was queued or in its window when last seen.
    pub(super) fn any_local_busy(&self) -> bool {
        let sessions = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        sessions.values().any(|s| !s.idle)
    }

    /// Whether an agent runs on this handle: it opened a session.
    pub(super) fn has_local_sessions(&self) -> bool {
        !self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Makes `node`'s next reads go to the API server (see `own_object`), until this process
    /// reads or writes its RotaNode again.
    pub(super) fn stop_answering_reads(&self, node: &NodeName) {
        let mut objects = self.inner.objects.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = objects.get_mut(node.as_str()) {
            known.answers_reads = false;
        }
    }
}
