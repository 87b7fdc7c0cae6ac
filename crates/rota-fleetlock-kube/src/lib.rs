//! `rota fleetlock --store kube`: the FleetLock server of rota-fleetlock in a Kubernetes
//! cluster (docs/design.md §10). A FleetLock host is a Node labelled [`HOST_LABEL`]`=true`:
//! its Zincati asks the server for its turn, and the server does for its Node what an agent
//! does for its own (cordon, drain through the Eviction API, verify, uncordon), in the same
//! store (the RotaNode named after the Node, granted by the scheduler).
//!
//! Such a Node runs no agent: the server opens the node's session in the store itself, which
//! would supersede an agent's. The chart keeps its agents' DaemonSet off the labelled Nodes.
//!
//! - `platform`: [`KubePlatform`], what the server does to a host's Node, and its boot id;
//! - `ids`: [`NodeIds`], which labelled Node a client id is (its machine id gives the id);
//! - `permissions`: the check, at start, that the server's account may do all of it;
//! - `error`: the crate's error type.

mod error;
mod ids;
mod permissions;
mod platform;

pub use error::{Error, Result};
pub use ids::NodeIds;
pub use permissions::check_permissions;
pub use platform::{KubePlatform, NodeActionsConfig};

/// The label that makes a Node a FleetLock host (with the value [`HOST_LABEL_VALUE`]): the
/// operator sets it on the Nodes whose Zincati asks rota's FleetLock server.
pub const HOST_LABEL: &str = "rota.dev/fleetlock";
/// The value of [`HOST_LABEL`] on a FleetLock host.
pub const HOST_LABEL_VALUE: &str = "true";
/// The label selector of the FleetLock hosts' Nodes.
pub const HOST_SELECTOR: &str = "rota.dev/fleetlock=true";
