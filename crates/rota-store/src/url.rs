use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::postgres::{PostgresStore, redact};
use crate::sqlite::SqliteStore;
use crate::store::Store;

/// Where state lives, as given by `--store`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: relative (`sqlite://rota.db`) or absolute (`sqlite:///var/lib/rota.db`).
    Sqlite(PathBuf),
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?OPTIONS]` (or `postgresql://…`), as
    /// libpq takes it; kept whole and handed to the driver.
    Postgres(String),
}

const ALLOWED: &str = "expected sqlite://PATH (e.g. sqlite:///var/lib/rota/rota.db) or \
    postgres://USER@HOST[:PORT]/DATABASE (e.g. postgres://rota@db.example:5432/rota)";

impl FromStr for StoreUrl {
    type Err = Error;

    fn from_str(url: &str) -> Result<StoreUrl> {
        // The error is logged and printed: a password in the URL must not be.
        let invalid = |reason: String| Error::Url {
            url: redact(url),
            reason,
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(format!("no scheme; {ALLOWED}")));
        };
        match scheme {
            "sqlite" => {
                let path = rest.split('?').next().unwrap_or_default();
                if path.is_empty() {
                    return Err(invalid(format!("empty path; {ALLOWED}")));
                }
                Ok(StoreUrl::Sqlite(PathBuf::from(path)))
            }
            "postgres" | "postgresql" => {
                let host = rest.split(['/', '?']).next().unwrap_or_default();
                if host.rsplit('@').next().unwrap_or_default().is_empty() {
                    return Err(invalid(format!("no host; {ALLOWED}")));
                }
                Ok(StoreUrl::Postgres(url.to_string()))
            }
            other => Err(invalid(format!("unknown scheme {other:?}; {ALLOWED}"))),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            StoreUrl::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

impl StoreUrl {
    /// The store's short name, for logs and JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreUrl::Sqlite(_) => "sqlite",
            StoreUrl::Postgres(_) => "postgres",
        }
    }

    /// Connects to the store, applying migrations.
    pub async fn open(&self) -> Result<Arc<dyn Store>> {
        match self {
            StoreUrl::Sqlite(path) => Ok(Arc::new(SqliteStore::open(path).await?)),
            StoreUrl::Postgres(url) => Ok(Arc::new(PostgresStore::open(url).await?)),
        }
    }

    /// [`StoreUrl::open`] for a handle that many callers share at once (a simulated fleet, a
    /// benchmark): a PostgreSQL handle gets more connections than one agent's.
    pub async fn open_shared(&self) -> Result<Arc<dyn Store>> {
        match self {
            StoreUrl::Sqlite(_) => self.open().await,
            StoreUrl::Postgres(url) => Ok(Arc::new(PostgresStore::open_shared(url).await?)),
        }
    }
}
