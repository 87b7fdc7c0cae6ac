//! Errors of the Kubernetes store. Each names the verb and the resource that failed, so that a
//! missing RBAC permission reads as what to grant.

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
    #[error(
        "the RotaNode resource (rotanodes.rota.dev) is not installed in this cluster: apply \
         charts/rota/crds/rotanodes.yaml ({source})"
    )]
    CrdMissing {
        #[source]
        source: kube::Error,
    },
}

impl From<KubeError> for StoreError {
    fn from(e: KubeError) -> StoreError {
        if matches!(&e, KubeError::Api { source, .. } if is_unavailable(source)) {
            StoreError::Unavailable(Box::new(e))
        } else {
            StoreError::Backend(Box::new(e))
        }
    }
}

/// Whether the API server could not be reached, or could not serve the call for now (a
/// restart, an overload): the agent tries again instead of stopping. A refusal of what was
/// asked (a missing permission, an invalid object, a lost compare-and-swap) is not.
pub fn is_unavailable(e: &kube::Error) -> bool {
    match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        kube::Error::Api(status) => matches!(status.code, 429 | 500 | 502 | 503 | 504),
        _ => false,
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

/// Whether the API server refused a write because the object changed since it was read (or,
/// for a create, because it exists): a lost compare-and-swap.
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.is_conflict() || status.is_already_exists())
}

pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.is_not_found())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use kube::core::Status;

    use super::{Context, is_unavailable};

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

    #[test]
    fn an_overloaded_server_is_unavailable_and_a_refusal_is_not() {
        let status = |code| kube::Error::Api(Status::failure("x", "y").with_code(code).boxed());
        for code in [429, 500, 502, 503, 504] {
            assert!(is_unavailable(&status(code)), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 410, 422] {
            assert!(!is_unavailable(&status(code)), "{code}");
        }
    }
}
