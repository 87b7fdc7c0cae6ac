//! rota's objects in the Kubernetes API, which its store, its scheduler and its commands share:
//! the custom resources, the slot Leases, and what an installation must give each of rota's
//! accounts, checked as a process starts.
//!
//! | module | what it holds |
//! |---|---|
//! | [`crd`] | `RotaNode`: one per node; `spec` the scheduler's grant, `status` its agent's record |
//! | [`window`] | `RotaWindow`: one ended window of a node, written once |
//! | [`procedure`] | `Procedure`: a maintenance procedure; its status counts the nodes |
//! | [`audit_record`] | `RotaAuditRecord`: one operator command, with who and why |
//! | [`slots`] | the slot Leases `rota-slot-<i>` and the leader Lease |
//! | [`permissions`] | the RBAC of the agent's and the scheduler's accounts, checked at start |
//! | [`preflight`] | the CRDs, the namespace and the credentials, checked at start |

pub mod audit_record;
pub mod crd;
pub mod permissions;
pub mod preflight;
pub mod procedure;
pub mod slots;
pub mod window;

mod error;

pub use audit_record::{RotaAuditRecord, RotaAuditRecordSpec, rota_audit_record_crd};
pub use crd::{RotaNode, RotaNodeSpec, RotaNodeStatus, rota_node_crd};
pub use error::ApiError;
pub use procedure::{Procedure, ProcedureBody, ProcedureStatus, procedure_crd};
pub use window::{RotaWindow, RotaWindowSpec, rota_window_crd};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The ConfigMap of an installation's settings: the concurrency, the pause, the rollout's
/// start, the operators' wakes and the procedures' fingerprint.
pub const CONFIG_MAP: &str = "rota-config";

/// Every custom resource rota uses, as `charts/rota/crds/` installs them: what a test or a
/// simulation that sets up a cluster of its own applies.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        rota_node_crd(),
        rota_window_crd(),
        procedure_crd(),
        rota_audit_record_crd(),
    ]
}

/// The Node `node`, as the Events of its maintenance refer to it.
pub fn node_reference(node: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.into()),
        ..ObjectReference::default()
    }
}
