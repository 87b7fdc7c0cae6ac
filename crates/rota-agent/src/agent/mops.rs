//! The window's procedures (MOPs), run by the priority rule of docs/design.md §5: starting the
//! ones the rule clears, recording each attempt's end, failing a request whose procedure is
//! gone.

use rota_core::{ProcedureEntry, Process};
use rota_observer::WorkOutcome;
use rota_store::{NodeRecord, Outcome, ProcedureRecord, RequestRecord, StoreExt};
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Agent, Running};
use crate::crash_points;
use crate::error::Result;
use crate::procedures::{ORPHAN_POLL, RunState, attempt_run};

impl Agent {
    /// Moves the window's procedures on, by the priority rule of docs/design.md §5: records an
    /// attempt that ended, starts the procedures the rule clears, or waits for a change.
    pub(super) async fn run_procedures(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        requests: &[&RequestRecord],
    ) -> Result<()> {
        let procedures = self.procedure_map().await?;
        let mut entries = Vec::new();
        let mut ready = Vec::new();
        let mut orphans = false;
        for request in requests {
            let Process::Mop(name) = &request.process else {
                continue;
            };
            let Some(procedure) = procedures.get(name) else {
                let cause = format!("procedure {name} no longer exists");
                return self
                    .procedure_failed(running, request, None, None, cause)
                    .await;
            };
            let latest = running.runner.latest(request.id)?;
            let next = latest.as_ref().map_or(0, |a| a.index + 1);
            let waiting = match latest {
                None => attempt_run(request.id, 0),
                Some(attempt) => match attempt.state {
                    RunState::Running => {
                        orphans |= running.runner.is_orphan(&attempt.run);
                        entries.push(entry(request, procedure, true));
                        continue;
                    }
                    RunState::Exited(code) if code == 0 || !attempt.recorded => {
                        return self
                            .procedure_exited(running, request, procedure, &attempt.run, code)
                            .await;
                    }
                    RunState::Interrupted if !attempt.recorded && !procedure.spec.retry => {
                        let cause = format!(
                            "procedure {name} was interrupted: its agent stopped while it ran and it is no \
                             longer running (set retry to run it again)"
                        );
                        return self
                            .procedure_failed(
                                running,
                                request,
                                Some(procedure),
                                Some(&attempt.run),
                                cause,
                            )
                            .await;
                    }
                    RunState::Interrupted if !attempt.recorded => {
                        warn!(node = %self.config.node, procedure = name, run = attempt.run, "an interrupted attempt runs again (retry)");
                        attempt_run(request.id, next)
                    }
                    // A recorded failure and a node back in maintenance: an operator retried.
                    _ => attempt_run(request.id, next),
                },
            };
            entries.push(entry(request, procedure, false));
            ready.push((waiting, *request, procedure));
        }
        let mut anything_running = entries.iter().any(|e| e.running);
        let mut started = false;
        for id in rota_core::startable(&entries) {
            let Some((run, request, procedure)) = ready
                .iter()
                .find(|(_, r, _)| u64::try_from(r.id).ok() == Some(id))
            else {
                continue;
            };
            let spec = &procedure.spec;
            let Some(script) = &procedure.script else {
                let cause = format!(
                    "the script of procedure {} could not be read (its ConfigMap or key is missing)",
                    spec.name
                );
                return self
                    .procedure_failed(running, request, Some(procedure), None, cause)
                    .await;
            };
            if let Err(e) = spec.check_pin(script) {
                return self
                    .procedure_failed(running, request, Some(procedure), None, e.to_string())
                    .await;
            }
            // Running scripts are never stopped; outside the maintenance hours no new one
            // starts, and once none runs, the rest waits for the next window.
            if !self.within_hours(running) {
                if anything_running {
                    break;
                }
                let next = format!("procedure {}", spec.name);
                return self.postpone(running, record, &next).await;
            }
            self.prove_slot(running).await?;
            running.runner.start(run, spec, script)?;
            crash_points::reached(crash_points::AFTER_PROCEDURE_START);
            info!(node = %self.config.node, procedure = spec.name, priority = %spec.priority, run, "procedure started");
            anything_running = true;
            started = true;
        }
        if started {
            return Ok(());
        }
        let until = orphans.then(|| Instant::now() + ORPHAN_POLL);
        self.wait(running, until, None).await
    }

    /// Records an attempt that ended: a success closes its request (asking for the reboot it
    /// wants first, so that the reboot joins this window), a failure fails the node closed.
    pub(super) async fn procedure_exited(
        &self,
        running: &mut Running,
        request: &RequestRecord,
        procedure: &ProcedureRecord,
        run: &str,
        code: i32,
    ) -> Result<()> {
        let spec = &procedure.spec;
        let summary = running.runner.summary(run, spec, code);
        if code != 0 {
            let cause = format!("procedure {} failed: {summary}", spec.name);
            return self
                .procedure_failed(running, request, Some(procedure), Some(run), cause)
                .await;
        }
        if spec.reboot {
            let source = request.process.to_string();
            self.store
                .add_request(&running.session, &Process::Reboot, &source)
                .await?;
        }
        self.store
            .complete_request(
                &running.session,
                &request.process,
                &Outcome::Succeeded {
                    detail: Some(summary),
                },
            )
            .await?;
        crash_points::reached(crash_points::AFTER_PROCEDURE_RECORDED);
        running.runner.finish(spec)?;
        info!(node = %self.config.node, procedure = spec.name, run, "procedure finished");
        self.tell(|o| o.work_ended(&request.process, WorkOutcome::Finished, None));
        Ok(())
    }

    /// Records a procedure's failure; the store fails the node closed in the same write.
    pub(super) async fn procedure_failed(
        &self,
        running: &mut Running,
        request: &RequestRecord,
        procedure: Option<&ProcedureRecord>,
        run: Option<&str>,
        cause: String,
    ) -> Result<()> {
        warn!(node = %self.config.node, process = %request.process, cause, "procedure failed; the node keeps its slot and cordon");
        let policy = procedure.map_or(self.config.backoff, |p| (&p.spec.backoff).into());
        self.store
            .complete_request(
                &running.session,
                &request.process,
                &Outcome::Failed {
                    cause: cause.clone(),
                    policy,
                },
            )
            .await?;
        if let Some(run) = run {
            running.runner.mark_recorded(run)?;
        }
        if let Some(procedure) = procedure {
            running.runner.finish(&procedure.spec)?;
        }
        self.tell(|o| o.work_ended(&request.process, WorkOutcome::Failed, Some(&cause)));
        Ok(())
    }
}

/// A request as the priority rule sees it: requests arrive in id order on a node.
fn entry(request: &RequestRecord, procedure: &ProcedureRecord, running: bool) -> ProcedureEntry {
    let id = u64::try_from(request.id).unwrap_or(0);
    ProcedureEntry {
        id,
        priority: procedure.spec.priority,
        arrival: id,
        running,
        exclusive: procedure.spec.exclusive,
    }
}
