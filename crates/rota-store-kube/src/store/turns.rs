//! A node's turn: taking up the grant the scheduler wrote into its RotaNode, and the fence on
//! the Lease the grant names. An agent never takes a Lease; it gives back only its own.
//!
//! The take-up costs no write of its own: the node's first fenced write, or the write that
//! opens its window, carries it (see [`take_up`]).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use rota_core::{NodeName, NodeState};
use rota_kube_api::crd::RotaNode;
use rota_kube_api::slots;
use rota_kube_client::is_conflict;
use rota_store::{Acquire, Result, Session, now_millis};
use tracing::warn;

use super::own::Edit;
use super::{KubeStore, fenced};
use crate::error::{Context, KubeError};

const LEASES: &str = "leases.coordination.k8s.io";
/// How long a node waits for its grant before it asks whether a scheduler runs: twice the
/// chart's leader Lease duration, the longest a failover takes.
const WAITED_FOR_A_SCHEDULER: rota_store::Millis = 30_000;

impl KubeStore {
    /// `Store::try_acquire_slot`: the slot the node is in its window of, or its grant, which
    /// the window's first write takes up (refused if the scheduler withdrew it since); else
    /// wait for the node's RotaNode to change. Waiting writes nothing, but a withdrawal
    /// is answered once, to show that the agent lives.
    ///
    /// A node that has waited for its grant longer than a failover takes, while no scheduler
    /// runs, is told that instead, as the store being unavailable: its agent's `/readyz` and
    /// `rota status` say so.
    pub(super) async fn take_turn(&self, session: &Session) -> Result<Acquire> {
        let acquire = self.ask(session).await?;
        // A node may wait a moment for any grant: only one that has waited longer than a
        // failover takes looks for a scheduler.
        let known = self.rota_node(&session.node, false).await?;
        let waited = known
            .and_then(|o| o.status?.queued_at)
            .is_some_and(|at| now_millis().saturating_sub(at.0) > WAITED_FOR_A_SCHEDULER);
        if acquire.slot().is_none()
            && waited
            && let Some(state) = self.no_scheduler().await?
        {
            return Err(KubeError::NoScheduler {
                lease: self.lease_path(slots::LEADER_LEASE),
                state,
            }
            .into());
        }
        Ok(acquire)
    }

    /// How often a waiting handle reads the leader Lease at most.
    const SCHEDULER_RECHECK: Duration = Duration::from_secs(15);

    /// `None` while a scheduler leads (its leader Lease was renewed within twice its duration,
    /// for the clocks' skew), else what the Lease shows. Read at most every
    /// [`Self::SCHEDULER_RECHECK`], and only by a node that waits for its grant.
    pub(super) async fn no_scheduler(&self) -> Result<Option<String>> {
        if let Some((at, seen)) = &*self
            .inner
            .scheduler_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            && at.elapsed() < Self::SCHEDULER_RECHECK
        {
            return Ok(seen.clone());
        }
        let path = self.lease_path(slots::LEADER_LEASE);
        let lease = self
            .inner
            .leases
            .get_opt(slots::LEADER_LEASE)
            .await
            .context("get", LEASES, path)?;
        let seen = leader_missing(lease.as_ref(), now_millis());
        *self
            .inner
            .scheduler_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((std::time::Instant::now(), seen.clone()));
        Ok(seen)
    }

    async fn ask(&self, session: &Session) -> Result<Acquire> {
        // Read before the edit: `edit` clears the withdrawal in the object it hands over.
        let known = self.rota_node(&session.node, false).await?;
        let withdrawn = known.is_some_and(|o| o.spec.withdrawn.is_some());
        let (acquire, _) = self
            .edit(&session.node, Some(session), |object, _| {
                let grant = object.spec.grant;
                let Some(status) = object.status.as_mut() else {
                    return Ok(Edit::Keep(Acquire::Wait { changes: 1 }));
                };
                Ok(match (status.slot, grant) {
                    (Some(slot), _) => Edit::Answer(Acquire::Granted(slot)),
                    (None, Some(grant)) if status.state == NodeState::Queued => {
                        Edit::Answer(Acquire::Granted(grant.slot))
                    }
                    _ if withdrawn => Edit::Write(Acquire::Wait { changes: 1 }),
                    _ => Edit::Answer(Acquire::Wait { changes: 1 }),
                })
            })
            .await?;
        Ok(acquire)
    }

    /// `Store::fence`: the session is current, its node in its window of slot `i` (the grant
    /// it took up), and the Lease of `i` names the node; the session is extended by `ttl`.
    /// A node refused before anything disrupted it (still `queued`) gives its window up: its
    /// grant was written by hand, or the Lease went to another node.
    pub(super) async fn prove_turn(&self, session: &Session, ttl: Duration) -> Result<u32> {
        let now = now_millis();
        let deadline = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        self.remember_deadline(&session.node, session.id, deadline);
        let known = self.rota_node(&session.node, false).await?;
        let guess = known.and_then(|mut o| {
            take_up(&mut o);
            o.status?.slot
        });
        let renew = self.edit(&session.node, Some(session), |object, _| {
            take_up(object);
            let slot = object.status.as_ref().and_then(|s| s.slot);
            match (slot, object.spec.grant) {
                (Some(slot), Some(grant)) if grant.slot == slot => Ok(Edit::Write(slot)),
                _ => Err(fenced(session)),
            }
        });
        let (slot, named) = match guess {
            Some(guess) => {
                let ((slot, _), named) =
                    tokio::try_join!(renew, self.lease_names(guess, &session.node))?;
                (slot, named && slot == guess)
            }
            None => {
                let (slot, _) = renew.await?;
                (slot, self.lease_names(slot, &session.node).await?)
            }
        };
        if named {
            return Ok(slot);
        }
        warn!(node = %session.node, slot, "the Lease of the node's grant does not name it: fenced");
        self.give_up(session).await?;
        Err(fenced(session))
    }

    /// Whether the Lease of `slot` names `node`.
    pub(super) async fn lease_names(&self, slot: u32, node: &NodeName) -> Result<bool> {
        let name = slots::slot_name(slot);
        let lease = self.inner.leases.get_opt(&name).await.context(
            "get",
            LEASES,
            self.lease_path(&name),
        )?;
        Ok(lease.as_ref().and_then(slots::holder) == Some(node.as_str()))
    }

    /// Gives up a window nothing disrupted yet: the grant and the slot taken up are cleared,
    /// and the node waits for its turn again.
    async fn give_up(&self, session: &Session) -> Result<()> {
        self.edit(&session.node, Some(session), |object, _| {
            let Some(status) = object.status.as_mut() else {
                return Ok(Edit::Keep(()));
            };
            if status.state != NodeState::Queued {
                return Ok(Edit::Keep(()));
            }
            status.slot = None;
            object.spec.grant = None;
            Ok(Edit::Write(()))
        })
        .await?;
        Ok(())
    }

    /// Gives the Lease of `slot` back if it still names `node`: after the node's RotaNode
    /// recorded the end of its window, so that a crash in between leaves a Lease the scheduler
    /// takes back, never a window without its Lease.
    pub(super) async fn release_lease(&self, slot: u32, node: &NodeName) -> Result<()> {
        let name = slots::slot_name(slot);
        let path = self.lease_path(&name);
        for attempt in 0..8 {
            let lease: Option<Lease> =
                self.inner
                    .leases
                    .get_opt(&name)
                    .await
                    .context("get", LEASES, path.clone())?;
            let Some(lease) = lease.filter(|l| slots::holder(l) == Some(node.as_str())) else {
                return Ok(());
            };
            let released = slots::released(&lease, now_millis());
            match self
                .inner
                .leases
                .replace(&name, &PostParams::default(), &released)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => {
                    tokio::time::sleep(super::jitter(attempt)).await;
                }
                Err(e) => return Err(e).context("update", LEASES, path),
            }
        }
        Ok(())
    }
}

/// What the leader Lease shows when no scheduler leads: missing, held by nobody, or not
/// renewed within twice its duration before `now`; `None` while one does.
fn leader_missing(lease: Option<&Lease>, now: rota_store::Millis) -> Option<String> {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return Some("does not exist".into());
    };
    let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
        return Some("is held by nobody".into());
    };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15)) * 1000;
    let renewed = spec.renew_time.as_ref().map_or(0, |t| t.0.as_millisecond());
    (now.saturating_sub(renewed) > 2 * duration).then(|| {
        format!(
            "names {holder}, who has not renewed it for {}s",
            now.saturating_sub(renewed) / 1000
        )
    })
}

/// Takes the grant of a node still queued up: its `status.slot` becomes the grant's, unless
/// the scheduler withdrew it. Done to the object of the node's first fenced write, or of the
/// write that opens its window, so that the take-up rides on that write.
pub(super) fn take_up(object: &mut RotaNode) {
    let grant = object
        .spec
        .grant
        .filter(|_| object.spec.withdrawn.is_none());
    if let (Some(status), Some(grant)) = (object.status.as_mut(), grant)
        && status.slot.is_none()
        && status.state == NodeState::Queued
    {
        status.slot = Some(grant.slot);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;

    const NOW: rota_store::Millis = 1_800_000_000_000;

    fn leader(holder: Option<&str>, renewed_ago_s: i64) -> Lease {
        let renewed = k8s_openapi::jiff::Timestamp::from_millisecond(NOW - renewed_ago_s * 1000)
            .expect("a time");
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(renewed)),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_scheduler_leads_while_its_lease_is_renewed() {
        assert_eq!(leader_missing(Some(&leader(Some("a"), 5)), NOW), None);
        assert_eq!(
            leader_missing(Some(&leader(Some("a"), 29)), NOW),
            None,
            "within twice its duration, for the clocks' skew"
        );
        let stale = leader_missing(Some(&leader(Some("a"), 31)), NOW).expect("stale");
        assert!(
            stale.contains("names a") && stale.contains("31s"),
            "{stale}"
        );
        assert_eq!(
            leader_missing(Some(&leader(None, 1)), NOW).as_deref(),
            Some("is held by nobody")
        );
        assert_eq!(leader_missing(None, NOW).as_deref(), Some("does not exist"));
    }
}
