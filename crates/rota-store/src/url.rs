use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sqlite::SqliteStore;
use crate::store::Store;

/// Where state lives, as given by `--store`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: relative (`sqlite://rota.db`) or absolute (`sqlite:///var/lib/rota.db`).
    Sqlite(PathBuf),
}

const ALLOWED: &str = "expected sqlite://PATH (e.g. sqlite:///var/lib/rota/rota.db)";

impl FromStr for StoreUrl {
    type Err = Error;

    fn from_str(url: &str) -> Result<StoreUrl> {
        let invalid = |reason: String| Error::Url {
            url: url.to_string(),
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
            "postgres" | "postgresql" => Err(invalid(format!(
                "the PostgreSQL store is not built yet; {ALLOWED}"
            ))),
            other => Err(invalid(format!("unknown scheme {other:?}; {ALLOWED}"))),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
        }
    }
}

impl StoreUrl {
    /// Connects to the store, applying migrations.
    pub async fn open(&self) -> Result<Arc<dyn Store>> {
        match self {
            StoreUrl::Sqlite(path) => Ok(Arc::new(SqliteStore::open(path).await?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_relative_and_absolute_sqlite_paths() {
        assert_eq!(
            "sqlite://rota.db".parse::<StoreUrl>().ok(),
            Some(StoreUrl::Sqlite("rota.db".into()))
        );
        assert_eq!(
            "sqlite:///var/lib/rota.db".parse::<StoreUrl>().ok(),
            Some(StoreUrl::Sqlite("/var/lib/rota.db".into()))
        );
    }

    #[test]
    fn rejects_unknown_schemes_naming_the_value() {
        for bad in ["mysql://x", "rota.db", "sqlite://", "ftp://host/db"] {
            let err = bad.parse::<StoreUrl>().expect_err(bad).to_string();
            assert!(err.contains(bad), "{err}");
            assert!(err.contains("sqlite://PATH"), "{err}");
        }
    }
}
