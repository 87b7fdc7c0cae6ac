//! `rota agent` as a systemd service (`Type=notify`, packaging/systemd/rota-agent.service):
//! READY=1 once, when the agent has a current session and a store access succeeded (the moment
//! `/readyz` turns ready), WATCHDOG=1 while the agent's loop runs, STOPPING=1 when a graceful
//! shutdown begins.
//!
//! Outside systemd there is no `NOTIFY_SOCKET` and sd-notify sends nothing; a message that
//! cannot be sent is logged and never stops the agent. The variables are left in the
//! environment (removing them is unsound in a process with threads): the agent's children
//! inherit them, but systemd takes messages from the main process only (`NotifyAccess=main`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rota_observer::AgentObserver;
use sd_notify::NotifyState;
use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Tells systemd the agent is ready, the first time it is: `Metrics::ready`'s condition.
#[derive(Debug)]
pub struct Readiness {
    session: AtomicBool,
    store_ok: AtomicBool,
    told: AtomicBool,
    tell: fn(),
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness::telling(|| send(&NotifyState::Ready))
    }
}

impl Readiness {
    fn telling(tell: fn()) -> Readiness {
        Readiness {
            session: AtomicBool::new(false),
            store_ok: AtomicBool::new(false),
            told: AtomicBool::new(false),
            tell,
        }
    }

    fn check(&self) {
        // Stores before loads, all SeqCst: of two observers racing (the loop and the
        // heartbeat), at least one sees both true, and the swap lets one of them tell.
        if self.session.load(Ordering::SeqCst)
            && self.store_ok.load(Ordering::SeqCst)
            && !self.told.swap(true, Ordering::SeqCst)
        {
            (self.tell)();
        }
    }
}

impl AgentObserver for Readiness {
    fn session(&self, current: bool) {
        self.session.store(current, Ordering::SeqCst);
        self.check();
    }

    fn store_access(&self, ok: bool) {
        self.store_ok.store(ok, Ordering::SeqCst);
        self.check();
    }
}

/// Runs the agent's loop to its end. While it runs, pings systemd's watchdog at half the
/// interval systemd gives, and tells STOPPING=1 once `cancel` fires. The pings are sent from
/// the task that polls the loop: a loop that blocks its thread stops them, and systemd
/// restarts the agent.
pub async fn supervise<T>(agent: impl Future<Output = T>, cancel: &CancellationToken) -> T {
    let mut pings = ping_period(sd_notify::watchdog_enabled()).map(|period| {
        info!(period = ?period, "pinging systemd's watchdog");
        let mut pings = tokio::time::interval(period);
        // After a stall, one ping, not a burst.
        pings.set_missed_tick_behavior(MissedTickBehavior::Delay);
        pings
    });
    let mut stopping = false;
    tokio::pin!(agent);
    loop {
        // The cancel first: a loop that ends in the same poll as the signal (a server whose
        // serving stops with it) still tells systemd it is stopping.
        tokio::select! {
            biased;
            () = cancel.cancelled(), if !stopping => {
                stopping = true;
                send(&NotifyState::Stopping);
            }
            result = &mut agent => return result,
            () = tick(&mut pings) => send(&NotifyState::Watchdog),
        }
    }
}

/// Half the watchdog interval systemd asks for; none when it asks for none (or for zero, which
/// systemd never sets, but an interval of zero would spin).
fn ping_period(watchdog: Option<Duration>) -> Option<Duration> {
    watchdog.filter(|w| !w.is_zero()).map(|w| w / 2)
}

async fn tick(pings: &mut Option<Interval>) {
    match pings {
        Some(pings) => {
            pings.tick().await;
        }
        None => std::future::pending().await,
    }
}

fn send(state: &NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(std::slice::from_ref(state)) {
        warn!(error = %e, message = %state, "could not notify systemd");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn ready_is_told_once_the_session_is_open_and_the_store_answered_and_only_then() {
        static TOLD: AtomicUsize = AtomicUsize::new(0);
        let told = || TOLD.load(Ordering::SeqCst);
        let readiness = Readiness::telling(|| {
            TOLD.fetch_add(1, Ordering::SeqCst);
        });
        // The store answered the session's opening attempt, which then failed.
        readiness.store_access(true);
        readiness.session(false);
        assert_eq!(told(), 0, "no session yet");
        readiness.store_access(false);
        readiness.session(true);
        assert_eq!(
            told(),
            0,
            "the store has not answered the session's agent yet"
        );
        readiness.store_access(true);
        assert_eq!(told(), 1);
        // A lost and reopened session, a store down and up again: systemd knows already.
        readiness.session(false);
        readiness.store_access(false);
        readiness.session(true);
        readiness.store_access(true);
        assert_eq!(told(), 1);
    }

    #[test]
    fn the_watchdog_is_pinged_at_half_its_interval_and_never_at_zero() {
        assert_eq!(
            ping_period(Some(Duration::from_secs(60))),
            Some(Duration::from_secs(30))
        );
        assert_eq!(ping_period(Some(Duration::ZERO)), None);
        assert_eq!(ping_period(None), None);
    }
}
