//! rota's node actions in a Kubernetes cluster (docs/design.md §3): cordon, drain through the
//! Eviction API with kubectl's safety rules, uncordon, and [`KubeActions`], which gives them to
//! the agent together with the reboot and health commands.
//!
//! - `actions`: [`KubeActions`], the agent's node actions in a cluster (a
//!   [`rota_actions::NodeActions`]);
//! - `annotations`: the annotations of `--annotate-nodes` (the reboot in progress, the last
//!   reboot's start and end);
//! - `conditions`: the node lifecycle conditions of KEP-5683 (`MaintenancePlanned`,
//!   `DrainInProgress`, `Drained`, `MaintenanceInProgress`) that the agent sets on its Node;
//! - `drain`: cordon, evict, and wait until the evicted pods are gone and the wait-completed
//!   ones have completed;
//! - `selection`: which pods the drain evicts, waits for, leaves alone or refuses;
//! - `selector`: label selectors, matched against the pods the drain lists;
//! - `health_gate`: the health gate before the slot goes back (the evicted workloads whole
//!   again, and optionally every PodDisruptionBudget satisfied);
//! - `node`: the Node object: cordon, uncordon, its labels, its taints, its Ready condition and
//!   the patch of its status;
//! - `node_labels`: the labels rota sets in its cordon and its uncordon, and the pending taint;
//! - `error`: the crate's error type, which names the call and the object.
mod actions;
mod annotations;
mod conditions;
mod drain;
mod error;
mod health_gate;
mod node;
mod node_labels;
mod selection;
mod selector;

pub use actions::{DEFAULT_REBOOT_COMMAND, KubeActions};
pub use annotations::{
    LAST_REBOOT_FINISHED_ANNOTATION, LAST_REBOOT_STARTED_ANNOTATION, REBOOT_IN_PROGRESS_ANNOTATION,
};
pub use conditions::{
    DRAIN_IN_PROGRESS, DRAINED, MAINTENANCE_IN_PROGRESS, MAINTENANCE_PLANNED, ROTA_REASON_PREFIX,
};
pub use drain::{DrainOptions, Progress, WAIT_COMPLETED_TIMEOUT, drain, drain_with_progress};
pub use error::{Error, Refusal, RefusalReason, Result};
pub use health_gate::{
    EVICTED_ANNOTATION, Evicted, Workload, check_gate, evicted, unsatisfied_pdbs,
    workloads_not_restored,
};
pub use node::{any_carries, check_ready, cordon, is_cordoned, labels, uncordon};
pub use node_labels::{NodeLabels, parse_labels, parse_taint_key};
pub use selection::{DRAIN_ANNOTATION, MIRROR_ANNOTATION, WAIT_COMPLETED};
pub use selector::Selector;
