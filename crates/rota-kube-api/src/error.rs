//! The errors of reading rota's objects and of the start-up checks.

use rota_kube_client::CallError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Call(#[from] CallError),
    /// A field of an object that this rota cannot read: edited by hand, or written by a newer
    /// rota.
    #[error("{kind} {name}: {field}: {problem}")]
    Unreadable {
        kind: &'static str,
        /// The object (`namespace/name`, `name`).
        name: String,
        field: &'static str,
        problem: String,
    },
    #[error(
        "{} not installed in this cluster: install rota's CRDs with `kubectl apply -f \
         charts/rota/crds/` or `helm install rota charts/rota` (`helm template` renders them \
         only with `--include-crds`, and `helm upgrade` never adds them)",
        crds_are(resources)
    )]
    CrdMissing {
        /// The CRDs' names (`rotanodes.rota.dev`).
        resources: Vec<String>,
    },
    #[error(
        "the namespace {namespace} does not exist (it holds rota's slot Leases and ConfigMap; \
         --namespace names it): create it with `kubectl create namespace {namespace}`, or \
         install the chart with namespace.create=true and namespace.name={namespace}"
    )]
    NamespaceMissing { namespace: String },
    #[error(
        "the API server refused this client's credentials (401 Unauthorized): in a pod, its \
         ServiceAccount was deleted or its token is not valid: check that the ServiceAccount \
         of the pod's serviceAccountName exists (the chart creates serviceAccount.name, \
         default rota-agent, in its namespace) and delete the pod so it starts with a fresh \
         token; outside the cluster, renew the token or certificate of the kubeconfig \
         (--kubeconfig, KUBECONFIG or ~/.kube/config)"
    )]
    Unauthorized,
}

/// "the CRD x is" or "the CRDs x, y are".
fn crds_are(names: &[String]) -> String {
    match names {
        [name] => format!("the CRD {name} is"),
        _ => format!("the CRDs {} are", names.join(", ")),
    }
}

impl ApiError {
    /// A failed call to `verb` a `resource` (`name` names which one).
    pub fn call(
        verb: &'static str,
        resource: &'static str,
        name: impl Into<String>,
        source: kube::Error,
    ) -> ApiError {
        CallError::new(verb, resource, name, source).into()
    }

    /// Whether the API server could not serve the call for now (see
    /// [`rota_kube_client::is_unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ApiError::Call(e) if e.is_unavailable())
    }

    /// Whether the API server refused the call for want of a permission (403).
    pub fn is_forbidden(&self) -> bool {
        matches!(self, ApiError::Call(CallError::Forbidden { .. }))
    }
}
