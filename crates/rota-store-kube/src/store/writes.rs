//! `Store::write`: each (writer, write) pair handed to the code that does it on Kubernetes: the
//! agent's fenced edits of its RotaNode (here, and its transitions in `transitions`) and the
//! operator's commands (`operator`).

use rota_core::{NodeName, NodeState, Process, Write};
use rota_store::{Blocked, Error, NodeRecord, Outcome, Result, Session, Writer, Written};

use super::KubeStore;
use super::cas::Edit;
use super::events::outcome_event;
use crate::crd::{BlockedStatus, RotaNode, RotaNodeStatus, Timestamp};
use crate::history_ring::bounded;
use crate::status;

impl KubeStore {
    /// `Store::write`.
    pub(super) async fn write_node(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        match writer {
            Writer::Agent(session) => self.agent_write(session, write).await,
            Writer::Fenced(session, ttl) => match write {
                Write::Transition(transition) => {
                    let record = self.fenced_transition(session, transition, ttl).await?;
                    Ok(written(record))
                }
                write => {
                    self.fence_session(session, ttl).await?;
                    self.agent_write(session, write).await
                }
            },
            Writer::Operator(node) => self.operator_write(node, write).await,
        }
    }

    async fn agent_write(&self, session: &Session, write: Write) -> Result<Written> {
        match write {
            Write::Transition(transition) => {
                Ok(written(self.apply(session, transition, None).await?))
            }
            Write::AddRequest { process, source } => {
                self.agent_request(session, &process, &source).await
            }
            Write::CancelRequest { process } => self.agent_cancel(session, &process).await,
            Write::CompleteRequest { process, outcome } => {
                self.complete(session, &process, &outcome).await
            }
            Write::SetBlocked(blocked) => self.set_blocked(session, blocked.as_ref()).await,
            Write::Unlock { .. } => Err(self.refused(&session.node, "unlock", OPERATORS).await),
            Write::Retry => Err(self.refused(&session.node, "retry", OPERATORS).await),
        }
    }

    async fn operator_write(&self, node: &NodeName, write: Write) -> Result<Written> {
        match write {
            Write::AddRequest { process, source } => {
                let (request, changed, object) =
                    self.operator_request(node, &process, &source).await?;
                Ok(Written {
                    record: self.operator_record(&object).await?,
                    request: Some(request),
                    changed,
                })
            }
            Write::CancelRequest { process } => {
                let (changed, object) = self.operator_cancel(node, &process).await?;
                Ok(Written {
                    record: self.operator_record(&object).await?,
                    request: None,
                    changed,
                })
            }
            Write::Unlock { reason } => Ok(written(self.operator_unlock(node, &reason).await?)),
            Write::Retry => Ok(written(self.operator_retry(node).await?)),
            Write::Transition(_) => Err(self.refused(node, "a transition", AGENTS).await),
            Write::CompleteRequest { .. } => {
                Err(self.refused(node, "completing a request", AGENTS).await)
            }
            Write::SetBlocked(_) => Err(self.refused(node, "a block reason", AGENTS).await),
        }
    }

    async fn agent_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<Written> {
        let ((request, created), status, _) = self
            .edit_with_ledger(session, false, &[process], |status, seen, ledger| {
                let (request, created) =
                    status::add_request(status, process, source, seen.now, ledger);
                Ok(if created {
                    Edit::Write((request, created))
                } else {
                    Edit::Keep((request, created))
                })
            })
            .await?;
        Ok(Written {
            record: self.agent_record(session, &status),
            request: Some(status::request_record(&session.node, &request)),
            changed: created,
        })
    }

    async fn set_blocked(&self, session: &Session, blocked: Option<&Blocked>) -> Result<Written> {
        let (changed, status, _) = self
            .edit(session, false, |status, _| {
                let reason = blocked.map(|b| bounded(&b.reason));
                if status.blocked.as_ref().map(|b| &b.reason) == reason.as_ref() {
                    return Ok(Edit::Keep(false));
                }
                status.blocked = blocked.map(|b| BlockedStatus {
                    reason: bounded(&b.reason),
                    since: Timestamp(b.since),
                });
                Ok(Edit::Write(true))
            })
            .await?;
        if changed {
            // Nodes queued behind a node now blocked may go on.
            self.inner.changes.bump(1);
        }
        Ok(Written {
            record: self.agent_record(session, &status),
            request: None,
            changed,
        })
    }

    async fn agent_cancel(&self, session: &Session, process: &Process) -> Result<Written> {
        let (canceled, status, _) = self
            .edit(session, false, |status, seen| {
                Ok(if status::cancel_request(status, process, seen.now) {
                    Edit::Write(true)
                } else {
                    Edit::Keep(false)
                })
            })
            .await?;
        Ok(Written {
            record: self.agent_record(session, &status),
            request: None,
            changed: canceled,
        })
    }

    async fn complete(
        &self,
        session: &Session,
        process: &Process,
        outcome: &Outcome,
    ) -> Result<Written> {
        let (request, status, _) = self
            .edit(session, false, |status, seen| {
                let fails = matches!(outcome, Outcome::Failed { .. });
                if fails && status.state != NodeState::Maintaining {
                    return Err(Error::Refused(rota_core::RecordError::Conflict {
                        node: session.node.clone(),
                        expected: NodeState::Maintaining,
                        actual: status.state,
                    }));
                }
                let request = status::complete_request(status, process, outcome, seen.now)
                    .ok_or_else(|| {
                        Error::Refused(rota_core::RecordError::NotActive {
                            node: session.node.clone(),
                            process: process.clone(),
                        })
                    })?;
                if fails {
                    // Fail closed in the same write: a failure recorded without it would let
                    // a restarted agent start the next attempt instead of waiting.
                    status::enter(status, NodeState::Failed, seen.now);
                }
                Ok(Edit::Write(request))
            })
            .await?;
        let (type_, reason, note) = outcome_event(process, &session.node, outcome);
        self.emit(&session.node, type_, reason, note);
        Ok(Written {
            record: self.agent_record(session, &status),
            request: Some(status::request_record(&session.node, &request)),
            changed: true,
        })
    }

    /// The record an agent's write left, with the slot as this process last saw the node's
    /// Lease: what the agent's next read of its node answers (see `own_record`).
    fn agent_record(&self, session: &Session, status: &RotaNodeStatus) -> NodeRecord {
        status::node_record(&session.node, status, self.own_slot(&session.node))
    }

    /// The record of the RotaNode an operator's command read or wrote, with the slot its
    /// Lease names: one list of the Leases more (none while their watch holds them).
    async fn operator_record(&self, object: &RotaNode) -> Result<NodeRecord> {
        let leases = self.list_leases().await?;
        self.record_of(object, &leases)
    }

    /// Why this writer may not write `node` so: `write` needs a node that `needs`. Rota never
    /// asks for such a write, so reading the node's state for the error costs nothing it
    /// would otherwise spend.
    async fn refused(&self, node: &NodeName, write: &'static str, needs: &'static str) -> Error {
        match self.get_rota_node(node).await {
            Ok(Some(object)) => Error::Refused(rota_core::RecordError::NotAllowed {
                node: node.clone(),
                state: object.status.map_or(NodeState::Idle, |s| s.state),
                write,
                needs,
            }),
            Ok(None) => Error::NoSuchNode { node: node.clone() },
            Err(e) => e,
        }
    }
}

/// Who writes what an agent may not: the `needs` of its refusal.
const OPERATORS: &str = "an operator changes (`rota unlock`, `rota retry`), not its agent";
/// Who writes what an operator may not.
const AGENTS: &str = "its agent changes, under its session, not an operator";

/// The answer to a write that concerns no request.
fn written(record: NodeRecord) -> Written {
    Written {
        record,
        request: None,
        changed: true,
    }
}
