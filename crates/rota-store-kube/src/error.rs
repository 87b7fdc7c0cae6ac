//! Errors of the Kubernetes store. Each names the verb and the resource that failed, so that a
//! missing RBAC permission reads as what to grant.

use rota_kube_api::ApiError;
use rota_store::Error as StoreError;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("cannot {verb} {resource} {name}: {source}")]
    Api {
        verb: &'static str,
        resource: &'static str,
        /// The object (`namespace/name`, `name`), or the collection for `list`.
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "gave up writing {resource} {name}: it changed under every one of {attempts} compare-and-swap attempts"
    )]
    Contended {
        resource: &'static str,
        name: String,
        attempts: u32,
    },
    /// Reading rota's objects, or the start-up checks (see [`rota_kube_api`]).
    #[error(transparent)]
    Objects(#[from] ApiError),
    #[error(
        "no scheduler runs: the leader Lease {lease} {state}; windows under way go on to their \
         end, and no node is granted a slot until a scheduler runs (the chart's Deployment \
         <release>-scheduler, or `rota scheduler`)"
    )]
    NoScheduler {
        /// `namespace/rota-scheduler`.
        lease: String,
        /// What it shows: missing, held by nobody, or not renewed since when.
        state: String,
    },
}

impl KubeError {
    /// Whether the API server could not serve the call for now (see
    /// [`rota_kube_client::is_unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        match self {
            KubeError::Api { source, .. } => rota_kube_client::is_unavailable(source),
            KubeError::Objects(e) => e.is_unavailable(),
            KubeError::NoScheduler { .. } => true,
            _ => false,
        }
    }

    /// Whether the API server refused the call for want of a permission (403).
    pub fn is_forbidden(&self) -> bool {
        match self {
            KubeError::Api { source, .. } => rota_kube_client::forbidden(source).is_some(),
            KubeError::Objects(e) => e.is_forbidden(),
            _ => false,
        }
    }
}

impl From<KubeError> for StoreError {
    fn from(e: KubeError) -> StoreError {
        if e.is_unavailable() {
            StoreError::Unavailable(Box::new(e))
        } else {
            StoreError::Backend(Box::new(e))
        }
    }
}

/// Adds the verb and resource to a failed API call.
pub(crate) trait Context<T> {
    fn context(
        self,
        verb: &'static str,
        resource: &'static str,
        name: impl Into<String>,
    ) -> Result<T, StoreError>;
}

impl<T> Context<T> for Result<T, kube::Error> {
    fn context(
        self,
        verb: &'static str,
        resource: &'static str,
        name: impl Into<String>,
    ) -> Result<T, StoreError> {
        self.map_err(|source| {
            KubeError::Api {
                verb,
                resource,
                name: name.into(),
                source,
            }
            .into()
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;

    use super::Context;

    #[tokio::test]
    async fn an_api_server_that_does_not_answer_is_unavailable() {
        // A port nobody listens on any more: the connection is refused, as while the API
        // server restarts.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let url = format!("http://127.0.0.1:{port}").parse().expect("a URL");
        let client = kube::Client::try_from(kube::Config::new(url)).expect("a client");
        let failed = Api::<Node>::all(client)
            .get("n")
            .await
            .context("get", "nodes", "n")
            .expect_err("nothing answers");
        assert!(failed.is_unavailable(), "{failed:?}");
        assert!(
            failed.to_string().contains("cannot get nodes n"),
            "{failed}"
        );
    }
}
