//! A node's procedure ledger in the cluster (see `procedure_ledger`): written before a
//! RotaNode write that holds more archived procedure requests than it keeps, read when a
//! procedure's request is looked for that the RotaNode no longer holds, and remembered by
//! this process between the two.

use std::collections::HashMap;

use kube::ResourceExt;
use kube::api::PostParams;
use rota_kube_client::is_conflict;
use rota_store::{Result, Session};

use super::KubeStore;
use super::cas::{CAS_ATTEMPTS, Edit, Seen, jitter};
use super::history::{Chunk, Owner, ROTA_WINDOWS, owner_uid};
use crate::crd::{RotaNode, RotaNodeStatus};
use crate::error::{Context, KubeError};
use crate::procedure_ledger::{self, Ledger};
use crate::window::{RotaWindow, ledger_name};
use rota_core::Process;

/// Label on every procedure ledger: the tag of the node whose requests it holds. The ring's
/// chunks carry `rota.dev/node-tag` instead, so neither is listed with the other.
pub(super) const LEDGER_LABEL: &str = "rota.dev/procedure-ledger-of";

impl KubeStore {
    /// The ledger of the RotaNode `owner` as this process last read or wrote it (empty, at 0
    /// moves, before either).
    pub(super) fn known_ledger(&self, owner: &str) -> Ledger {
        let ledgers = self.inner.ledgers.lock().unwrap_or_else(|e| e.into_inner());
        ledgers.get(owner).cloned().unwrap_or_default()
    }

    fn remember_ledger(&self, owner: &str, ledger: &Ledger) {
        let mut ledgers = self.inner.ledgers.lock().unwrap_or_else(|e| e.into_inner());
        let known = ledgers.entry(owner.to_owned()).or_default();
        if ledger.moves >= known.moves {
            *known = ledger.clone();
        }
    }

    /// Reads the ledger of the RotaNode `owner` (uid `uid`): the object, if any, and what it
    /// holds for that RotaNode (nothing when it is missing or another RotaNode's, one of the
    /// same name deleted before).
    async fn read_ledger(&self, owner: &str, uid: &str) -> Result<(Option<RotaWindow>, Ledger)> {
        let name = ledger_name(owner);
        let found = self
            .rota_windows()
            .get_opt(&name)
            .await
            .context("get", ROTA_WINDOWS, name)?;
        let ledger = found
            .as_ref()
            .filter(|w| owner_uid(w) == Some(uid))
            .map(|w| Ledger {
                moves: w.spec.sequence,
                requests: w.spec.procedure_requests.clone(),
            })
            .unwrap_or_default();
        self.remember_ledger(owner, &ledger);
        Ok((found, ledger))
    }

    /// Every node's ledger, by the uid of the RotaNode that owns it: one list.
    pub(super) async fn all_ledgers(&self) -> Result<HashMap<String, Ledger>> {
        let selector = format!("{},{LEDGER_LABEL}", self.selector());
        let windows = self.list_windows(&selector).await?;
        Ok(windows
            .into_iter()
            .filter_map(|w| {
                let uid = owner_uid(&w)?.to_owned();
                let ledger = Ledger {
                    moves: w.spec.sequence,
                    requests: w.spec.procedure_requests,
                };
                Some((uid, ledger))
            })
            .collect())
    }

    /// Before `object` is written: moves its archived procedure requests to its ledger when it
    /// holds more than it keeps, and lets them go from `object` once they are there (the write
    /// of `object` commits the move). Leaves them where they are when the ledger changed under
    /// every attempt: the next write tries again.
    pub(super) async fn move_procedure_requests(&self, object: &mut RotaNode) -> Result<()> {
        let Some(owner) = Owner::of(object) else {
            return Ok(());
        };
        let Some(status) = object.status.as_mut() else {
            return Ok(());
        };
        if !procedure_ledger::due(status) {
            return Ok(());
        }
        let api = self.rota_windows();
        for attempt in 0..CAS_ATTEMPTS {
            let (found, ledger) = self.read_ledger(&owner.name, &owner.uid).await?;
            let next = procedure_ledger::with_moved(&ledger, status);
            let mut window = owner.window(
                &ledger_name(&owner.name),
                &self.inner.config.namespace,
                (LEDGER_LABEL, status.tag),
                next.moves,
                Chunk::Ledger(next.requests.clone()),
            );
            let written = match &found {
                None => api.create(&PostParams::default(), &window).await,
                Some(found) => {
                    window.metadata.resource_version = found.resource_version();
                    api.replace(&window.name_any(), &PostParams::default(), &window)
                        .await
                }
            };
            match written {
                Ok(written) if written.spec.procedure_requests.len() != next.requests.len() => {
                    return Err(KubeError::CrdOutdated {
                        resource: ROTA_WINDOWS,
                        field: "spec.procedureRequests",
                    }
                    .into());
                }
                Ok(_) => {
                    self.remember_ledger(&owner.name, &next);
                    procedure_ledger::commit(status, next.moves);
                    return Ok(());
                }
                Err(e) if is_conflict(&e) => tokio::time::sleep(jitter(attempt)).await,
                Err(e) => return Err(e).context("write", ROTA_WINDOWS, window.name_any()),
            }
        }
        Ok(())
    }

    /// [`KubeStore::edit`] for a write that may add requests for `processes`: `edit` gets the
    /// node's ledger as current as finding their earlier requests needs. This process's own
    /// copy serves unless the RotaNode no longer holds one of them and counts more moves than
    /// that copy, and only then is the ledger read.
    pub(super) async fn edit_with_ledger<T>(
        &self,
        session: &Session,
        with_lease: bool,
        processes: &[&Process],
        mut edit: impl FnMut(&mut RotaNodeStatus, &Seen, &Ledger) -> Result<Edit<T>>,
    ) -> Result<(T, RotaNodeStatus, Seen)> {
        let owner = self.object_name(&session.node);
        let mut ledger = self.known_ledger(&owner);
        for _ in 0..CAS_ATTEMPTS {
            let mut counted = 0;
            let (value, status, seen) = self
                .edit(session, with_lease, |status, seen| {
                    if processes
                        .iter()
                        .any(|p| procedure_ledger::stale(status, p, &ledger))
                    {
                        counted = status.procedure_ledger;
                        return Ok(Edit::Keep(None));
                    }
                    Ok(match edit(status, seen, &ledger)? {
                        Edit::Write(value) => Edit::Write(Some(value)),
                        Edit::Keep(value) => Edit::Keep(Some(value)),
                    })
                })
                .await?;
            if let Some(value) = value {
                return Ok((value, status, seen));
            }
            // The edit read the RotaNode afresh before it asked for the ledger.
            let uid = match self.cached(&session.node) {
                Some(known) => known.object.uid(),
                None => self
                    .get_rota_node(&session.node)
                    .await?
                    .and_then(|o| o.uid()),
            };
            ledger = self
                .current_ledger(&owner, &uid.unwrap_or_default(), counted)
                .await?;
        }
        Err(self.contended(&session.node))
    }

    /// The ledger of the RotaNode `owner` (uid `uid`), read, which the RotaNode says holds at
    /// least `counted` moves: an error that says what to do when it does not (deleted by
    /// hand), since no procedure can be requested for the node before the ones it ran are
    /// known again.
    pub(super) async fn current_ledger(
        &self,
        owner: &str,
        uid: &str,
        counted: u64,
    ) -> Result<Ledger> {
        let (_, ledger) = self.read_ledger(owner, uid).await?;
        if ledger.moves < counted {
            return Err(KubeError::Unreadable {
                kind: "RotaNode",
                name: owner.to_owned(),
                field: "status.procedureLedger",
                problem: format!(
                    "counts {counted} moves of closed procedure requests into the RotaWindow \
                     {}, which holds {} of this RotaNode's: it was deleted or replaced, so \
                     which procedures already ran on the node is not known, and none is \
                     requested for it; restore the object, or set status.procedureLedger to 0 \
                     (`kubectl edit rotanode {owner}`) to accept that \
                     every procedure still matching the node may run on it again",
                    ledger_name(owner),
                    ledger.moves,
                ),
            }
            .into());
        }
        Ok(ledger)
    }
}
