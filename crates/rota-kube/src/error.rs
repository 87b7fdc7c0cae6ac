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
        StoreError::Backend(Box::new(e))
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
