//! The `RotaWindow` custom resource: one ended maintenance window of a node, written once as
//! the window ends and never changed (docs/design.md §7). It holds what the window's RotaNode
//! recorded since the window before: history entries, steps and closed requests.
//!
//! It is created before the write of the RotaNode that ends the window, which lists its name in
//! `status.windows`: readers take only the windows their RotaNode lists, so one whose RotaNode
//! write then failed is never read. Its name is the node's, its first entry's id and a digest
//! of its content, so that a retry of the same write creates the same object (an
//! `AlreadyExists` is its success) and a retry that decided otherwise creates another.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::crd::{HistoryStatus, RequestStatus, StepStatus};

/// How many ended windows a node keeps unless configured otherwise: the oldest are deleted.
pub const KEPT_WINDOWS: usize = 20;

/// One ended window: its spec is written whole, once.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "rota.dev",
    version = "v1alpha1",
    kind = "RotaWindow",
    plural = "rotawindows",
    shortname = "rw",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"From","type":"date","jsonPath":".spec.history[0].at"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RotaWindowSpec {
    /// The Kubernetes node (or host) name, as in its RotaNode's `spec.node`.
    #[schemars(length(min = 1, max = 253))]
    pub node: String,
    /// The history entries, oldest first.
    #[serde(default)]
    pub history: Vec<HistoryStatus>,
    /// The states the node entered, and when.
    #[serde(default)]
    pub steps: Vec<StepStatus>,
    /// The requests closed (done or canceled).
    #[serde(default)]
    pub closed: Vec<RequestStatus>,
}

impl RotaWindowSpec {
    /// The object's name for this content of the window of RotaNode `rota_node`.
    pub fn name(&self, rota_node: &str) -> String {
        let first = self.history.first().map_or(0, |h| h.id);
        let content = serde_json::to_string(self).unwrap_or_default();
        let digest = rota_core::sha256_hex(&content);
        format!("{rota_node}-{first}-{}", &digest[..10])
    }
}

/// The CustomResourceDefinition as installed.
pub fn rota_window_crd() -> CustomResourceDefinition {
    RotaWindow::crd()
}
