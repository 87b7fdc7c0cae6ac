//! How a queued node's session is renewed (see the crate docs, "Waiting"): as usual near the
//! front of the queue, and sparsely far from it, where nobody's turn depends on whether it is
//! alive.
//!
//! A heartbeat of a node that waits far back writes its RotaNode only when the long deadline
//! it wrote last has less than [`SPARSE_RENEW_BEFORE`] left, with a new one
//! [`SPARSE_TTL`] away, marked `sparse`: at most six writes an hour, instead of one every third
//! of `--session-ttl`. In between it renews in memory, as an idle node does. The others' looks
//! count a sparse waiter as alive only while it has `near` places or more ahead of it; once its
//! own look finds it fewer than `far` places from the front (well before `near`), it renews as
//! usual again at once, with the short deadline. So a waiter whose agent died far back holds
//! nobody up: by the time it nears the front, the others pass it over, as they pass over one
//! whose session ran out.

use std::time::Duration;

use rota_core::NodeState;
use rota_store::{Millis, Result, Session};

use super::KubeStore;
use super::caches::LocalSession;
use super::cas::Edit;
use crate::crd::{RotaNodeStatus, Timestamp};

/// The deadline a sparse renewal writes.
pub(super) const SPARSE_TTL: Millis = 20 * 60 * 1000;
/// A sparse renewal is written once the last one has less than this left: every ten minutes.
pub(super) const SPARSE_RENEW_BEFORE: Millis = 10 * 60 * 1000;

impl KubeStore {
    /// Records whether the node's look at the queue found it far back, and renews its session
    /// as usual at once if it came near while renewed sparsely.
    pub(super) async fn wait_far_back(
        &self,
        session: &Session,
        status: &RotaNodeStatus,
        far_back: bool,
    ) -> Result<()> {
        let Some(ttl) = self.with_local(session, |local| {
            local.far_back = far_back;
            local.ttl
        }) else {
            return Ok(());
        };
        let sparse = status.session.as_ref().is_some_and(|s| s.sparse);
        if !far_back && sparse && ttl > 0 {
            self.renew_queued(session, ttl).await?;
        }
        Ok(())
    }

    /// Whether a heartbeat of `session` may stay in memory: the node waits far back and its
    /// sparse deadline, as this process last wrote or read it, is far enough away.
    pub(super) fn sparse_in_memory(&self, session: &Session, now: Millis) -> bool {
        let far_back = self
            .local_session(&session.node)
            .is_some_and(|l| l.id == session.id && l.far_back);
        far_back
            && self.cached(&session.node).is_some_and(|known| {
                let Some(status) = known.object.status.as_ref() else {
                    return false;
                };
                status.state == NodeState::Queued
                    && status.session.as_ref().is_some_and(|s| {
                        s.id == session.id && s.sparse && s.deadline.0 - now > SPARSE_RENEW_BEFORE
                    })
            })
    }

    /// Writes the renewal of a node with work: sparse while it waits far back, else as usual.
    /// Coming near, the long deadline gives way to the short one, so that a node that dies
    /// near the front holds the others up no longer than `ttl`.
    pub(super) async fn renew_queued(
        &self,
        session: &Session,
        ttl: Millis,
    ) -> Result<(bool, RotaNodeStatus)> {
        let far_back = self
            .local_session(&session.node)
            .is_some_and(|l| l.id == session.id && l.far_back);
        if !far_back {
            // The long deadline this process remembers would be written back with the edit.
            self.cap_local_deadline(session, rota_store::now_millis().saturating_add(ttl));
        }
        let (written, status, _) = self
            .edit(session, false, |status, seen| {
                if status.state == NodeState::Idle {
                    return Ok(Edit::Keep(false));
                }
                let sparse = far_back && status.state == NodeState::Queued;
                let ttl = if sparse { SPARSE_TTL } else { ttl };
                let deadline = seen.now.saturating_add(ttl);
                if let Some(current) = status.session.as_mut() {
                    current.deadline = if current.sparse && !sparse {
                        Timestamp(deadline)
                    } else {
                        Timestamp(current.deadline.0.max(deadline))
                    };
                    current.sparse = sparse;
                }
                Ok(Edit::Write(true))
            })
            .await?;
        Ok((written, status))
    }

    /// Brings the deadline this process renewed `session` to in memory down to `deadline`.
    fn cap_local_deadline(&self, session: &Session, deadline: Millis) {
        self.with_local(session, |local| {
            local.deadline = local.deadline.min(deadline)
        });
    }

    /// Records the TTL the agent renews `session` with, for a renewal the store makes itself.
    pub(super) fn remember_ttl(&self, session: &Session, ttl: Millis) {
        self.with_local(session, |local| local.ttl = ttl);
    }

    /// `f` on what this process knows of `session`, if it is the one it knows.
    fn with_local<T>(
        &self,
        session: &Session,
        f: impl FnOnce(&mut LocalSession) -> T,
    ) -> Option<T> {
        let mut sessions = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        sessions
            .get_mut(session.node.as_str())
            .filter(|l| l.id == session.id)
            .map(f)
    }
}

/// The TTL a heartbeat renews with, in milliseconds.
pub(super) fn ttl_ms(ttl: Duration) -> Millis {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}
