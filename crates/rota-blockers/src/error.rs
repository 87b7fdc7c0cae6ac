/// A blocker's configuration that cannot be used: names the flag, the value and what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{flag} {value:?}: {reason}")]
    Invalid {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("{flag} needs {needs}")]
    Needs {
        flag: &'static str,
        needs: &'static str,
    },
    #[error("building the HTTP client for Prometheus: {0}")]
    Client(#[source] reqwest::Error),
}

/// Why Prometheus could not say which alerts are active.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Request(#[source] reqwest::Error),
    #[error("answered {status}")]
    Status { status: reqwest::StatusCode },
    #[error("answered with an unexpected body: {0}")]
    Body(#[source] reqwest::Error),
    #[error("answered with status {status:?}: {error}")]
    Failed { status: String, error: String },
}
