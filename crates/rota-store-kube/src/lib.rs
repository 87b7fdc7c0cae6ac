//! rota's store on Kubernetes (docs/design.md §7): [`KubeStore`] implements
//! [`rota_store::Store`] for a node's agent and an operator's commands, with objects of the
//! cluster itself. The slots are granted by the scheduler (`rota-scheduler`), not here. The
//! objects themselves, and the start-up checks, are [`rota_kube_api`]'s.
//!
//! # Map
//!
//! | concept | what it is | who writes it | file |
//! |---|---|---|---|
//! | [`RotaNode`](rota_kube_api::RotaNode) | one per node: `spec.grant` (the scheduler's), `status` (its agent's record, the history of the open window) | scheduler (spec), agent (status) | [`crd`](rota_kube_api::crd) |
//! | grant | the slot the scheduler gave the node, whose Lease names it | scheduler | [`crd`](rota_kube_api::crd) |
//! | take-up | `status.slot` set to the grant, in the write that opens the window (or the first fence) | agent | `store/turns.rs` |
//! | withdrawal | a grant not taken up in time, or a Lease not in use, taken back (`spec.withdrawn`) | scheduler | [`crd`](rota_kube_api::crd) |
//! | slot Lease | `rota-slot-<i>`: names the node it is granted to; no duration | scheduler (take), agent (give back its own) | [`slots`](rota_kube_api::slots) |
//! | session | the agent's incarnation (`status.session`); every agent write checks it | agent | `store/sessions.rs` |
//! | fence | right before anything disruptive: the session, the grant taken up, its Lease naming the node | agent | `store/turns.rs` |
//! | record | a RotaNode's status as rota-core's record; rota-core decides every write | agent, operator | [`record`] |
//! | [`RotaWindow`](rota_kube_api::RotaWindow) | one ended window of a node, written once, listed in `status.windows` (the last 20 kept) | agent, operator | [`window`](rota_kube_api::window) |
//! | `rota-config` | the ConfigMap of the concurrency, the pause, the rollout, and the procedures' fingerprint | operator, scheduler (`procedures`) | `store/settings.rs` |
//! | [`Procedure`](rota_kube_api::Procedure) | a maintenance procedure; its status counts the nodes | operator (spec), scheduler (status) | [`procedure`](rota_kube_api::procedure) |
//! | [`RotaAuditRecord`](rota_kube_api::RotaAuditRecord) | one operator command, with who and why | operator | [`audit_record`](rota_kube_api::audit_record) |
//! | Event | every transition but the queueing, on the Node | agent | `store/events.rs` |
//!
//! Every write is a compare-and-swap on the object's `resourceVersion`. An agent follows its own
//! RotaNode with kube-runtime's watcher (`store/own.rs`): the scheduler's grant and an
//! operator's write wake it. A waiting or idle node writes nothing: heartbeats are kept in
//! memory until the node is in its window (`store/sessions.rs`). Deadlines come from the
//! agents' clocks, which must be synchronised (NTP) to well within the session TTL.
//!
//! [`KubeStoreConfig::namespace`] holds the installation's Leases and ConfigMap, and every
//! RotaNode and RotaWindow is labelled `rota.dev/namespace=<namespace>`.
//! [`KubeStoreConfig::name_prefix`] (empty in production) goes before every RotaNode's name, so
//! that tests sharing a cluster can use the same node names.

pub mod record;

mod changes;
mod error;
mod procedures;
mod store;
mod watches;

pub use error::KubeError;
pub use procedures::SUBMITTED_AT_ANNOTATION;
pub use store::{KubeStore, KubeStoreConfig, NAMESPACE_LABEL, PROCEDURES_KEY, settings_of};
pub use watches::procedures_fingerprint;

use std::time::Duration;

/// How often an agent on this store with work re-reads it: only a safety net, as the watches
/// report releases and other writers' changes; a re-read asks the API server only while the
/// watch of the agent's own RotaNode is down.
pub const AGENT_STORE_POLL: Duration = Duration::from_secs(300);

/// How often an idle agent on this store looks for new procedures and at its own RotaNode. A
/// look is answered without a request from the watch of the node's RotaNode and from the last
/// list of the procedures, while the fingerprint the scheduler publishes in `rota-config` is
/// that list's; a look lists them again only after a change. New procedures and operators'
/// changes wake the agents at once, through `rota-config` (keys `procedures` and `wake`).
pub const AGENT_PROCEDURE_POLL: Duration = Duration::from_secs(60);
