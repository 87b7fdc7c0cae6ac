//! A transition of a node's agent (`Write::Transition`, and the fenced one): one fenced edit
//! of its RotaNode, the slot given back when the window ends, and its Event; and the fence.

use std::time::Duration;

use rota_core::Process;
use rota_store::{Error, NodeRecord, Result, Session, Transition, WindowChange};

use super::KubeStore;
use super::cas::Edit;
use super::events::transition_event;
use super::waiting::ttl_ms;
use crate::crd::Timestamp;
use crate::{history_ring, status};

impl KubeStore {
    /// One transition of a node's agent; with `fence` (a session TTL) it also renews the
    /// session as the fence does.
    pub(super) async fn apply(
        &self,
        session: &Session,
        transition: Transition,
        fence: Option<Duration>,
    ) -> Result<NodeRecord> {
        let fence = fence.map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        self.forget_wait(&session.node);
        let releases = transition.window.releases_slot();
        // The Lease is read only where it matters: to give it back, and to name the slot (and
        // date the history after it was taken) when the window opens. Other transitions keep the
        // slot recorded at the opening.
        let with_lease = releases || transition.window == WindowChange::Open;
        let processes: Vec<&Process> = transition.requests.iter().map(|(p, _)| p).collect();
        let (slot, status, seen) = self
            .edit_with_ledger(session, with_lease, &processes, |status, seen, ledger| {
                if status.state != transition.from {
                    return Err(Error::Refused(rota_core::RecordError::Conflict {
                        node: session.node.clone(),
                        expected: transition.from,
                        actual: status.state,
                    }));
                }
                let slot = if with_lease { seen.slot() } else { status.slot };
                status::apply_transition(status, &transition, slot, seen.history_time());
                for (process, source) in &transition.requests {
                    status::add_request(status, process, source, seen.now, ledger);
                }
                if let (Some(ttl), Some(current)) = (fence, status.session.as_mut()) {
                    let deadline = seen.now.saturating_add(ttl);
                    current.deadline = Timestamp(current.deadline.0.max(deadline));
                }
                Ok(Edit::Write(slot))
            })
            .await?;
        let lease = seen.held.as_ref().filter(|_| releases);
        if let Some(lease) = lease {
            let released = history_ring::last_entry_at(&status).unwrap_or(seen.now);
            self.release_lease(lease, &session.node, released).await?;
        }
        // A Lease given back counts itself (its change from held to free); any other transition that
        // wakes waiters counts here: one change either way, as in the SQL stores.
        if transition.wakes() && lease.is_none() {
            self.inner.changes.bump(1);
        }
        let slot = if releases { None } else { slot };
        let (type_, reason, note) = transition_event(&transition, &session.node);
        self.emit(&session.node, type_, reason, note);
        Ok(status::node_record(&session.node, &status, slot))
    }

    /// `Store::fence`: the session renewed in the RotaNode and the slot's Lease renewed.
    pub(super) async fn fence_session(&self, session: &Session, ttl: Duration) -> Result<u32> {
        let ttl_ms = ttl_ms(ttl);
        let current = self.edit(session, false, |status, seen| {
            if let Some(current) = status.session.as_mut() {
                let deadline = seen.now.saturating_add(ttl_ms);
                current.deadline = Timestamp(current.deadline.0.max(deadline));
            }
            Ok(Edit::Write(()))
        });
        // The two proofs are independent writes: both must succeed before anything disruptive,
        // in whichever order they land.
        let (current, slot) = tokio::join!(current, self.renew_lease(session));
        current?;
        slot
    }

    /// A transition that something disruptive follows at once, with the fence's proof. Its two
    /// proofs, the session (the transition's own compare-and-swap on the RotaNode, which
    /// renews the session as the fence does) and the slot (the Lease), go out at once: what
    /// follows waits for one round trip instead of two. A transition that gives the
    /// slot back fences first: renewing the Lease while giving it back would race on its
    /// compare-and-swap.
    pub(super) async fn fenced_transition(
        &self,
        session: &Session,
        transition: Transition,
        ttl: Duration,
    ) -> Result<NodeRecord> {
        if transition.window.releases_slot() {
            self.fence_session(session, ttl).await?;
            return self.apply(session, transition, None).await;
        }
        let (record, slot) = tokio::join!(
            self.apply(session, transition, Some(ttl)),
            self.renew_lease(session)
        );
        slot?;
        record
    }
}
