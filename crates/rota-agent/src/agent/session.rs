//! One incarnation of the agent: opening its session (a newer one fences every older one),
//! renewing it in the background, and the concurrency it configures on start.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::Retryable as _;
use rota_sentinel::SentinelWatcher;
use rota_store::{RetryPauses, Session, Store, retry_pauses};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{Agent, Ended, Running, SessionLost};
use crate::error::{Error, Result};
use crate::observer::AgentObserver;
use crate::procedures::Runner;

impl Agent {
    /// Opens the node's session, waiting for a store that restarts; `None` on shutdown.
    pub(super) async fn open_session(&self) -> Result<Option<Session>> {
        let open = || async {
            // Independent: a restart after a reboot waits for neither before the other.
            let (configured, session) = tokio::join!(
                self.configure_concurrency(),
                self.store
                    .open_session(&self.config.node, self.config.session_ttl)
            );
            configured.and(session.map_err(Error::from))
        };
        // A database that restarts as the agent starts is waited for; anything else (a refused
        // database, a missing permission) stops the agent with its error.
        let opened = open
            .retry(retry_pauses())
            .when(|e| matches!(e, Error::Store(e) if e.is_unavailable()))
            .notify(|e, pause| {
                if let Error::Store(e) = e {
                    self.unavailable(e, pause);
                }
            });
        tokio::select! {
            () = self.cancel.cancelled() => Ok(None),
            opened = opened => opened.map(Some),
        }
    }

    /// Runs the steps under one session until shutdown, a fatal error or the session's loss.
    pub(super) async fn incarnation(
        &self,
        session: Session,
        boot_id: String,
        watcher: &SentinelWatcher,
        runner: Runner,
    ) -> (Ended, Runner) {
        self.tell(|o| o.session(true));
        let cancel = self.cancel.child_token();
        let lost = Arc::new(Mutex::new(None));
        let heartbeat = tokio::spawn(heartbeat(
            self.store.clone(),
            session.clone(),
            self.config.session_ttl,
            cancel.clone(),
            lost.clone(),
            self.observers.clone(),
        ));
        let mut running = Running {
            session,
            boot_id,
            cancel: cancel.clone(),
            sentinels: watcher.subscribe(),
            changes: self.store.changes(),
            reboot: None,
            reboot_ran: None,
            sentinels_dirty: true,
            changes_at_read: 0,
            procedure_exits: runner.exited(),
            runner,
            ensured: HashSet::new(),
            procedures_checked: None,
            turn_at: None,
            fenced: None,
            health_ahead: None,
            healthy_since: None,
            window_seen: None,
            pending: None,
            checked: None,
            unavailable: RetryPauses::new(),
        };
        let result = self.run_steps(&mut running).await;
        self.tell(|o| o.session(false));
        cancel.cancel();
        let _ = heartbeat.await;
        let lost = lost.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(lost) = lost {
            return (Ended::Lost(lost), running.runner);
        }
        if let Err(e) = self.store.close_session(&running.session).await {
            warn!(error = %e, "could not close the session");
        }
        (Ended::Stopped(result), running.runner)
    }

    /// Sets the fleet's concurrency if this agent is configured with one that differs.
    pub(super) async fn configure_concurrency(&self) -> Result<()> {
        let Some(concurrency) = self.config.concurrency else {
            return Ok(());
        };
        let current = self.store.concurrency().await?;
        if current != Some(concurrency) {
            if let Some(current) = current {
                warn!(
                    from = current,
                    to = concurrency,
                    "changing the fleet's concurrency"
                );
            }
            self.store.set_concurrency(concurrency).await?;
        }
        Ok(())
    }
}

/// Keeps the session alive; a refused heartbeat means another agent took over the node.
async fn heartbeat(
    store: Arc<dyn Store>,
    session: Session,
    ttl: Duration,
    cancel: CancellationToken,
    lost: Arc<Mutex<Option<SessionLost>>>,
    observers: Vec<Arc<dyn AgentObserver>>,
) {
    let period = ttl / 3;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let why = match store.heartbeat(&session, ttl).await {
            Ok(()) => {
                observers.iter().for_each(|o| o.store_access(true));
                continue;
            }
            Err(rota_store::Error::Fenced { .. }) => SessionLost::Superseded,
            Err(rota_store::Error::Expired { .. }) => SessionLost::Expired,
            Err(e) => {
                // An agent whose session cannot be renewed is about to lose it: not ready.
                observers.iter().for_each(|o| o.store_access(false));
                warn!(error = %e, "heartbeat failed; retrying");
                continue;
            }
        };
        observers.iter().for_each(|o| o.session(false));
        *lost.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        cancel.cancel();
        return;
    }
}
