//! The connections of one handle's store calls.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::error::{Context, Result};

/// Connections per handle for store calls (the listener has one more of its own). Every call is
/// one short statement, so a few connections serve many concurrent callers, who queue here
/// instead of on the server: there, more runnable backends than cores get preempted while
/// holding a row lock or the NOTIFY lock, and everyone behind waits (`rota bench` with 32
/// sessions on 2 cores: 8 connections in all were almost twice as fast as 32, and as fast as
/// 4). A fleet's agents also stay far below `max_connections`.
pub(super) const MAX_CONNECTIONS: usize = 7;

/// The connections of store calls. sqlx's pool (0.8) sends a Sync and waits for the server's
/// answer every time a connection comes back, a second round trip per call that also keeps the
/// connection from the next caller that long. These are handed back as they are. A connection
/// whose call did not finish (it failed, or its caller was cancelled halfway) may be out of
/// step with the server, so it is closed instead, and a new one is opened when needed. The idle
/// ones are closed with it: a call fails most often because the server ended its connections
/// (a restart, a failover), and then every idle connection is dead too, and would fail one
/// call each (test `a_database_restart_costs_at_most_one_failed_call_and_loses_nothing`).
pub(super) struct Connections {
    options: PgConnectOptions,
    idle: Mutex<Vec<PgConnection>>,
    permits: Semaphore,
}

impl Connections {
    pub(super) fn new(options: PgConnectOptions) -> Connections {
        Connections {
            options,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(MAX_CONNECTIONS),
        }
    }

    /// An idle connection, or a new one when none is idle and fewer than `MAX_CONNECTIONS`
    /// are in use; otherwise waits for one.
    pub(super) async fn checkout(&self, context: &'static str) -> Result<Checkout<'_>> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)
            .context(context)?;
        let idle = self.idle().pop();
        let connection = match idle {
            Some(connection) => connection,
            None => PgConnection::connect_with(&self.options)
                .await
                .context(context)?,
        };
        Ok(Checkout {
            connections: self,
            connection: Some(connection),
            _permit: permit,
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<PgConnection>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One connection while a call uses it. [`Checkout::finish`] hands it back; a checkout dropped
/// without it closes its connection and the idle ones (see [`Connections`]).
pub(super) struct Checkout<'a> {
    connections: &'a Connections,
    /// Taken out only by `finish` and `drop`, which end the checkout.
    connection: Option<PgConnection>,
    _permit: SemaphorePermit<'a>,
}

impl Checkout<'_> {
    /// The call is complete and the connection ready for the next one.
    pub(super) fn finish(mut self) {
        if let Some(connection) = self.connection.take() {
            self.connections.idle().push(connection);
        }
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if self.connection.take().is_some() {
            self.connections.idle().clear();
        }
    }
}

impl Deref for Checkout<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.connection
            .as_ref()
            .expect("a checkout holds its connection until it ends")
    }
}

impl DerefMut for Checkout<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.connection
            .as_mut()
            .expect("a checkout holds its connection until it ends")
    }
}
