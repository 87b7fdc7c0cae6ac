//! One incarnation of the agent: opening its session (a newer one fences every older one),
//! renewing it in the background, and the fleet's concurrency and rollout it configures on
//! start.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::Retryable as _;
use rota_core::Rollout;
use rota_observer::AgentObserver;
use rota_sentinel::SentinelWatcher;
use rota_store::{RetryPauses, Session, Setting, Store, StoreExt, retry_pauses};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{Agent, Ended, Running, SessionLost};
use crate::error::{Error, Result};
use crate::procedures::Runner;

impl Agent {
    /// Opens the node's session, waiting for a store that restarts; `None` on shutdown.
    pub(super) async fn open_session(&self) -> Result<Option<Session>> {
        let open = || async {
            // Independent: a restart after a reboot waits for neither before the other.
            let (configured, session) = tokio::join!(
                self.configure_fleet(),
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

    /// Runs the state handlers under one session until shutdown, a fatal error or the session's loss.
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
        let renewal = Arc::new(Renewal::new(
            self.config.session_ttl,
            self.config.idle_session_ttl,
        ));
        let heartbeat = tokio::spawn(heartbeat(
            self.store.clone(),
            session.clone(),
            renewal.clone(),
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
            procedures_due: None,
            idle: false,
            renewal,
            turn_at: None,
            fenced: None,
            health_ahead: None,
            healthy_since: None,
            drain_delay: None,
            reboot_delay: None,
            within_hours_seen: None,
            pending: None,
            in_window: None,
            checked: None,
            unavailable: RetryPauses::new(),
        };
        let result = self.run_handlers(&mut running).await;
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

    /// Before a handler that others may wait on (the node queues, or has work): renews a session
    /// that was renewed with the idle TTL with the short one first, so that a node that dies
    /// right after it queues holds up no waiter behind it for longer than `--session-ttl`.
    pub(super) async fn renew_busy(&self, running: &Running) -> Result<()> {
        if running.renewal.is_idle() {
            self.store
                .heartbeat(&running.session, self.config.session_ttl)
                .await?;
            running.renewal.set_idle(false);
        }
        Ok(())
    }

    /// Sets the fleet's concurrency and rollout where this agent is configured with values
    /// that differ from the stored ones.
    pub(super) async fn configure_fleet(&self) -> Result<()> {
        let config = &self.config;
        if config.concurrency.is_none()
            && config.batches.is_none()
            && config.failure_budget.is_none()
            && config.group_rules.is_none()
        {
            return Ok(());
        }
        let settings = self.store.settings().await?;
        if let Some(concurrency) = config.concurrency
            && settings.concurrency != Some(concurrency)
        {
            if let Some(current) = settings.concurrency {
                warn!(
                    from = current,
                    to = concurrency,
                    "changing the fleet's concurrency"
                );
            }
            self.store.set_concurrency(concurrency).await?;
        }
        // The flags state the whole rollout, as the chart renders them for every agent alike
        // (and as its node-scoped policy allows): a part not given is the default.
        let rollout = Rollout {
            batches: config.batches.clone().unwrap_or_default(),
            failure_budget: config.failure_budget,
        };
        let configured = config.batches.is_some() || config.failure_budget.is_some();
        if configured && rollout != settings.rollout {
            warn!(from = %settings.rollout, to = %rollout, "changing the fleet's rollout");
            self.store.set(Setting::Rollout(rollout)).await?;
        }
        if let Some(groups) = &config.group_rules {
            groups.check(config.concurrency.unwrap_or(settings.slots()))?;
        }
        if let Some(groups) = &config.group_rules
            && *groups != settings.groups
        {
            warn!(from = %settings.groups, to = %groups, "changing the fleet's slot groups");
            self.store.set(Setting::Groups(groups.clone())).await?;
        }
        Ok(())
    }
}

/// Which TTL the session is renewed with, a third of it apart. An idle node's session is
/// waited on by nobody: no slot holder's, and no waiter's ahead in the queue. On SQLite and
/// PostgreSQL it is renewed with the long idle TTL, so that an idle agent sends one statement
/// every few minutes; the node renews with the short TTL before it queues or works
/// ([`Agent::renew_busy`]).
pub(super) struct Renewal {
    ttl: Duration,
    idle_ttl: Option<Duration>,
    idle: AtomicBool,
    /// Wakes the heartbeat to renew at once with the new TTL.
    changed: Notify,
}

impl Renewal {
    fn new(ttl: Duration, idle_ttl: Option<Duration>) -> Renewal {
        Renewal {
            ttl,
            idle_ttl,
            idle: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn is_idle(&self) -> bool {
        self.idle.load(Ordering::Acquire)
    }

    /// Renews with the idle TTL from now on (`true`) or with the short one; a store with no
    /// idle TTL always renews with the short one.
    pub(super) fn set_idle(&self, idle: bool) {
        let idle = idle && self.idle_ttl.is_some();
        if self.idle.swap(idle, Ordering::AcqRel) != idle {
            self.changed.notify_one();
        }
    }

    fn ttl(&self) -> Duration {
        match self.idle_ttl {
            Some(idle_ttl) if self.is_idle() => idle_ttl,
            _ => self.ttl,
        }
    }
}

/// Keeps the session alive; a refused heartbeat means another agent took over the node.
async fn heartbeat(
    store: Arc<dyn Store>,
    session: Session,
    renewal: Arc<Renewal>,
    cancel: CancellationToken,
    lost: Arc<Mutex<Option<SessionLost>>>,
    observers: Vec<Arc<dyn AgentObserver>>,
) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(renewal.ttl() / 3) => {}
            // Going idle renews at once with the long TTL; going busy, the agent has renewed
            // with the short one itself, and the next renewal is a short period away.
            () = renewal.changed.notified() => if !renewal.is_idle() { continue; }
        }
        let ttl = renewal.ttl();
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
