//! Opening a store: the URL, the checks and migrations of the schema, and the listener.

use std::str::FromStr;
use std::sync::Arc;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use super::PostgresStore;
use super::changes::follow_changes;
use super::connections::{Connections, SHARED_CONNECTIONS, probe};
use crate::error::{Error, Result};
use crate::sql::Sql;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// The URL without its password, for messages and logs.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://…` or `postgresql://…`) and applies
    /// migrations. A database holding other programs' tables, or a rota schema newer than this
    /// binary, is refused without changing anything.
    pub async fn open(url: &str) -> Result<PostgresStore> {
        PostgresStore::open_with(url, 0).await
    }

    /// [`PostgresStore::open`] for a handle that many callers share (`rota simulate`, `rota
    /// bench`): it has a few connections (`SHARED_CONNECTIONS`) for calls besides the listener's.
    pub async fn open_shared(url: &str) -> Result<PostgresStore> {
        PostgresStore::open_with(url, SHARED_CONNECTIONS).await
    }

    async fn open_with(url: &str, extra: usize) -> Result<PostgresStore> {
        let location = redact(url);
        // Generic plans: every statement a store makes often looks rows up by key, which a
        // plan for any value does as well, and planning them anew for each of a connection's
        // first five calls cost more than running them (a fleet of 100 agents starting at once
        // spent about 2 s of the server's CPU planning).
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| Error::Url {
                url: location.clone(),
                reason: e.to_string(),
            })?
            .options([("plan_cache_mode", "force_generic_plan")]);
        // sqlx's pool serves the checks and migrations at start-up; its connection then becomes
        // the listener's. A refusal comes back from the probe at once, not after the pool's
        // own attempts, a few a second for 30 s (test
        // three_agents_ask_a_database_that_refuses_them_less_and_less_often).
        probe(&options)
            .await
            .map_err(|e| connect_error(&location, e))?;
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .map_err(|e| connect_error(&location, e))?;
        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| connect_error(&location, e))?;
        Sql::<Postgres>::check_is_rota(&mut conn, &location, &MIGRATOR).await?;
        drop(conn);
        MIGRATOR.run(&pool).await.map_err(|e| Error::NotRota {
            location: location.clone(),
            reason: format!("migration failed: {e}"),
        })?;

        // LISTEN before returning: no change committed after `open` may go unnoticed.
        let (changes, _) = watch::channel(0);
        let changes = Arc::new(changes);
        let connections = Arc::new(Connections::new(options, &pool, extra, changes.clone()).await?);
        // Tells this handle's own notifications apart from other handles'.
        let origin = fastrand::u64(..);
        let listener = tokio::spawn(follow_changes(connections.clone(), origin, changes.clone()));
        Ok(PostgresStore {
            connections,
            origin,
            changes,
            _listener: Arc::new(AbortOnDropHandle::new(listener)),
        })
    }
}

/// Why the first connection failed: the server is unavailable (refused, restarting, out of
/// connections), which an agent starting waits out, or the URL's database or user is wrong.
fn connect_error(location: &str, source: sqlx::Error) -> Error {
    let reason = format!("cannot connect: {source}");
    let error = Error::Database {
        context: "connecting",
        source,
    };
    if error.is_unavailable() {
        Error::Unavailable(format!("{location}: {reason}").into())
    } else {
        Error::Url {
            url: location.to_string(),
            reason,
        }
    }
}
