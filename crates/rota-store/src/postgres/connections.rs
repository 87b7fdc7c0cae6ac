//! The connections of one handle: the listener's, which serves the handle's store calls too,
//! and for a handle shared by many callers a few more.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::Acquire as _;
use sqlx::postgres::{PgConnectOptions, PgListener, PgNotification, PgPool, PgPoolOptions};
use sqlx::{Connection as _, PgConnection};
use tokio::sync::{Notify, OwnedMutexGuard, Semaphore, SemaphorePermit, watch};

use super::changes::CHANNEL;
use crate::error::{Context, Result};
use crate::store::WAKE_ALL;

/// Extra connections of a handle shared by many callers (`rota simulate`, `rota bench`): every
/// call is one short statement, so a few connections serve many concurrent callers, who queue
/// here instead of on the server: there, more runnable backends than cores get preempted while
/// holding a row lock or the NOTIFY lock, and everyone behind waits (`rota bench` with 32
/// sessions on 2 cores: 8 connections in all were almost twice as fast as 32, and as fast as 4).
pub const SHARED_CONNECTIONS: usize = 7;

/// How long a connection may take to open before the call fails as unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The connections of store calls, each a [`PgListener`] (so that the one that listens can
/// serve calls as well). The primary one LISTENs; an agent's handle has no other, so an agent
/// holds one connection to the server whatever it does. While no call needs it, the listen loop
/// ([`Connections::hear`]) waits on it for notifications; a call asks for it and gets it next.
///
/// sqlx's pool (0.8) sends a Sync and waits for the server's answer every time a connection
/// comes back, a second round trip per call; these connections never go back to a pool. A
/// connection whose call did not finish (it failed, or its caller was cancelled halfway) may be
/// out of sync with the server, so it is closed instead, and a new one is opened when needed.
/// The idle ones are closed with it: a call fails most often because the server ended its
/// connections (a restart, a failover), and then every idle connection is dead too, and would
/// fail one call each (test `a_database_restart_costs_at_most_one_failed_call_and_loses_nothing`).
/// A primary connection opened again LISTENs again and wakes every waiter, since what was
/// notified in between is lost.
pub(super) struct Connections {
    options: PgConnectOptions,
    /// `None` once closed, until a call or the listen loop opens another.
    primary: Arc<tokio::sync::Mutex<Option<PgListener>>>,
    /// Asks the listen loop to hand the primary connection over.
    wanted: Notify,
    /// Connections for calls beyond the primary; none for an agent's handle.
    extra: usize,
    idle: Mutex<Vec<PgListener>>,
    permits: Semaphore,
    changes: Arc<watch::Sender<u64>>,
}

/// What the listen loop heard.
pub(super) enum Heard {
    Notification(PgNotification),
    /// A call needs the connection: it has it now.
    HandedOver,
    /// The connection is closed; the next wait opens another.
    Lost(Option<sqlx::Error>),
    /// A connection could not be opened.
    Unavailable(sqlx::Error),
}

impl Connections {
    /// Starts with the listener `open` made on its pool (already listening), and `extra` more
    /// connections at most.
    pub(super) async fn new(
        options: PgConnectOptions,
        pool: &PgPool,
        extra: usize,
        changes: Arc<watch::Sender<u64>>,
    ) -> Result<Connections> {
        let listener = listen(PgListener::connect_with(pool).await)
            .await
            .context("connecting the change listener")?;
        Ok(Connections {
            options,
            primary: Arc::new(tokio::sync::Mutex::new(Some(listener))),
            wanted: Notify::new(),
            extra,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(extra),
            changes,
        })
    }

    /// A connection for one call: the primary one for an agent's handle, otherwise an idle extra
    /// one, or a new one when none is idle and fewer than `extra` are in use, or else waits.
    pub(super) async fn checkout(&self, context: &'static str) -> Result<Checkout<'_>> {
        if self.extra == 0 {
            let mut primary = self.take_primary().await;
            if primary.is_none() {
                *primary = Some(self.open_primary().await.context(context)?);
            }
            return Ok(Checkout {
                connections: self,
                held: Held::Primary(primary),
                finished: false,
            });
        }
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)
            .context(context)?;
        let idle = self.idle().pop();
        let connection = match idle {
            Some(connection) => connection,
            None => open(&self.options).await.context(context)?,
        };
        Ok(Checkout {
            connections: self,
            held: Held::Extra {
                connection: Some(connection),
                _permit: permit,
            },
            finished: false,
        })
    }

    /// The primary connection's lock, asking the listen loop for it once this call waits in
    /// line (the lock is fair), so that the loop cannot take it again before this call.
    async fn take_primary(&self) -> OwnedMutexGuard<Option<PgListener>> {
        let mut lock = std::pin::pin!(self.primary.clone().lock_owned());
        let mut asked = false;
        std::future::poll_fn(|cx| {
            let polled = lock.as_mut().poll(cx);
            if polled.is_pending() && !asked {
                asked = true;
                self.wanted.notify_one();
            }
            polled
        })
        .await
    }

    /// A new primary connection, listening; every waiter is woken to read what it missed.
    async fn open_primary(&self) -> std::result::Result<PgListener, sqlx::Error> {
        let listener = listen(open(&self.options).await).await?;
        self.changes.send_modify(|n| *n = n.wrapping_add(WAKE_ALL));
        Ok(listener)
    }

    /// Waits on the primary connection for a notification until a call needs it.
    pub(super) async fn hear(&self) -> Heard {
        let mut primary = self.primary.clone().lock_owned().await;
        if primary.is_none() {
            match self.open_primary().await {
                Ok(listener) => *primary = Some(listener),
                Err(e) => return Heard::Unavailable(e),
            }
        }
        let Some(listener) = primary.as_mut() else {
            return Heard::Lost(None);
        };
        let received = tokio::select! {
            biased;
            () = self.wanted.notified() => return Heard::HandedOver,
            received = listener.try_recv() => received,
        };
        match received {
            Ok(Some(notification)) => Heard::Notification(notification),
            Ok(None) => {
                *primary = None;
                Heard::Lost(None)
            }
            Err(e) => {
                *primary = None;
                Heard::Lost(Some(e))
            }
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<PgListener>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One attempt to connect, closed at once, before a pool connects.
///
/// sqlx's pool tries a refused connection (too many connections, a server starting up or
/// down) again and again until its timeout, a few times a second. So one attempt of its own
/// comes first, closed before the pool's opens (never two at once): a refusal comes back at
/// once, and the caller's growing pauses decide when to ask again.
pub(super) async fn probe(options: &PgConnectOptions) -> std::result::Result<(), sqlx::Error> {
    let probe = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(options))
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)??;
    // The server has taken a connection: how this one ends does not matter.
    let _ = probe.close().await;
    Ok(())
}

/// Opens a connection on a pool of its own, which only ever holds it: a closed connection is
/// replaced by a new listener, never by the pool. A refusal comes back at once (see [`probe`]).
async fn open(options: &PgConnectOptions) -> std::result::Result<PgListener, sqlx::Error> {
    probe(options).await?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .idle_timeout(None)
        .max_lifetime(None)
        .test_before_acquire(false)
        .connect_lazy_with(options.clone());
    PgListener::connect_with(&pool).await
}

/// Subscribes a new connection to the changes channel.
async fn listen(
    listener: std::result::Result<PgListener, sqlx::Error>,
) -> std::result::Result<PgListener, sqlx::Error> {
    let mut listener = listener?;
    // A lost connection is reported, not reconnected inside the wait: a call would wait for it.
    listener.eager_reconnect(false);
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// One connection while a call uses it. [`Checkout::finish`] hands it back; a checkout dropped
/// without it closes its connection and the idle ones (see [`Connections`]).
pub(super) struct Checkout<'a> {
    connections: &'a Connections,
    held: Held<'a>,
    finished: bool,
}

enum Held<'a> {
    /// Holds `Some` until the checkout ends.
    Primary(OwnedMutexGuard<Option<PgListener>>),
    Extra {
        /// Taken out only by `finish` and `drop`, which end the checkout.
        connection: Option<PgListener>,
        _permit: SemaphorePermit<'a>,
    },
}

impl Checkout<'_> {
    /// The connection itself, for a helper that takes one; opened again if it was lost.
    pub(super) async fn connection(
        &mut self,
    ) -> std::result::Result<&mut PgConnection, sqlx::Error> {
        (&mut **self).acquire().await
    }

    /// The call is complete and the connection ready for the next one.
    pub(super) fn finish(mut self) {
        if let Held::Extra { connection, .. } = &mut self.held
            && let Some(connection) = connection.take()
        {
            self.connections.idle().push(connection);
        }
        self.finished = true;
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        match &mut self.held {
            Held::Primary(primary) => drop(primary.take()),
            Held::Extra { connection, .. } => drop(connection.take()),
        }
        self.connections.idle().clear();
    }
}

impl Deref for Checkout<'_> {
    type Target = PgListener;

    fn deref(&self) -> &PgListener {
        let connection = match &self.held {
            Held::Primary(primary) => primary.as_ref(),
            Held::Extra { connection, .. } => connection.as_ref(),
        };
        connection.expect("a checkout holds its connection until it ends")
    }
}

impl DerefMut for Checkout<'_> {
    fn deref_mut(&mut self) -> &mut PgListener {
        let connection = match &mut self.held {
            Held::Primary(primary) => primary.as_mut(),
            Held::Extra { connection, .. } => connection.as_mut(),
        };
        connection.expect("a checkout holds its connection until it ends")
    }
}
