use rota_kube_client::CallError;

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

/// Why a blocker's question went unanswered: Prometheus could not say which alerts are active,
/// or the API server which pods run on the node or what its Node says. The Kubernetes ones
/// read as rota-kube-actions' errors of the same calls do.
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
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("node {node} does not exist")]
    NodeNotFound { node: String },
}

impl QueryError {
    /// Wraps a failed request to `verb` a `resource` (`object` names which one).
    pub(crate) fn api(
        verb: &'static str,
        resource: &'static str,
        object: impl Into<String>,
        source: kube::Error,
    ) -> QueryError {
        QueryError::Call(CallError::new(verb, resource, object, source))
    }
}
