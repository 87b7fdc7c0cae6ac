//! rota's store on Kubernetes (docs/design.md §7): [`KubeStore`] implements
//! [`rota_store::Store`] with objects of the cluster itself.
//!
//! # Layout
//!
//! - `store`: [`KubeStore`], its configuration and the `Store` impl, one file per concern.
//! - [`audit_record`]: the `RotaAuditRecord` custom resource, the operators' audit trail.
//! - [`crd`]: the `RotaNode` custom resource, a node's state, session and the history of the
//!   window under way.
//! - [`window`]: the `RotaWindow` custom resource, one chunk of a node's past history.
//! - `history_ring`: the pure half of the history's ring: when entries move, who may
//!   overwrite a ring place, how readers merge.
//! - [`procedure`]: the `Procedure` custom resource and its status's types.
//! - `procedures`: submitting and listing Procedures, with their scripts.
//! - `procedure_status`: writing each Procedure's status in the background.
//! - `status`: the pure half: what a write does to a RotaNode's status, and its records.
//! - [`slots`]: slots as Leases `rota-slot-<i>`, pure: who holds one, taking and releasing.
//! - `queue_labels`: what a look at the queue needs, mirrored into RotaNode labels.
//! - [`ids`]: history and request ids without a shared counter (node tags).
//! - `changes`: the watch on the slot Leases, and `Store::changes`.
//! - `config_view`: the watch on rota's ConfigMaps: settings, wakes, scripts.
//! - `view`: what a watch keeps of one kind of object.
//! - [`preflight`]: what the store checks of the cluster when it connects.
//! - [`permissions`]: the permissions an agent needs, checked as it starts.
//! - `error`: [`KubeError`], naming the verb and resource that failed.
//!
//! The store passes the same conformance suite as the SQLite store (`tests/conformance.rs`,
//! against a real control plane).
//!
//! # Objects
//!
//! - **Slots**: Leases `rota-slot-0..k-1` in the rota namespace (default `rota-system`),
//!   taken and given back by create or compare-and-swap on `resourceVersion`; never with a
//!   lease duration (see [`slots`]). A held Lease has an ownerReference to its holder's Node,
//!   so the garbage collector frees the slot when the Node is deleted; the store also frees
//!   such a slot itself when it finds one while waiting.
//! - **Node state**: a cluster-scoped [`RotaNode`] per node, whose status holds the state,
//!   session, requests, backoff and the history of the window under way (see [`crd`]). Every
//!   write is a compare-and-swap `replace` on its `resourceVersion`, so the object stays small
//!   (about 2 KB): texts are cut at 160 characters, and only 2 closed requests are kept.
//! - **History**: cluster-scoped [`RotaWindow`]s `<rotanode>-<n mod 50>`, owned by the
//!   RotaNode. A write of a RotaNode whose history holds an entry that releases the slot, a
//!   long cause, or more than 4 entries first writes them all, whole, to the next ring place,
//!   then removes them and counts the chunk in the same compare-and-swap; readers take only
//!   chunks the RotaNode counted, each entry once (see `history_ring`).
//! - **Concurrency**: key `concurrency` of the ConfigMap `rota-config` in the rota namespace
//!   (1 when unset, as in SQLite).
//! - **Node tags** (which keep history ids unique, see [`ids`]): a Lease
//!   `rota-node-tag-<tag>` in the rota namespace per node, held by its RotaNode's name and
//!   owned by the RotaNode (the garbage collector deletes it with the RotaNode); nodes of
//!   earlier versions took theirs from key `nextNodeTag` of `rota-config`.
//! - **Procedures**: a cluster-scoped [`Procedure`] per maintenance procedure, named after it
//!   (see [`procedure`]); a `scriptConfigMap` names a ConfigMap of the rota namespace. A
//!   procedure runs at most once per node, ever: its requests stay in the RotaNode (closed
//!   ones in `status.procedureRequests` once they leave the bounded `requests`), and past 4
//!   closed ones they move to the node's procedure ledger, the [`RotaWindow`]
//!   `<rotanode>-procedures` (see `procedure_ledger`). The agents'
//!   stores write each Procedure's status (per-node state, counts, `Complete`) in the
//!   background, by compare-and-swap (see `procedure_status`).
//! - **Audit records**: a [`RotaAuditRecord`] in the rota namespace per unlock, retry, request,
//!   cancel, pause, resume and procedure submission, with who (the API user) and why; written
//!   once, read only by `rota history` (see [`audit_record`]).
//! - **Events**: every transition, unlock, retry and procedure outcome records a Kubernetes
//!   Event on the Node.
//!
//! # Sessions, clocks and heartbeats
//!
//! A session is `status.session` (`id`, `deadline`) of the node's RotaNode. Every write of an
//! agent reads the RotaNode, refuses the write (`Fenced`) unless the session there is the
//! writer's and its deadline has not passed, and writes back with the `resourceVersion` it
//! read, so a newer session opened in between makes the write fail and start over.
//!
//! An idle agent must not write every few seconds (a large idle fleet would keep the API server
//! and etcd busy for nothing), so heartbeats of an idle node stay in the agent's memory: the
//! renewed deadline is written with the node's next write (leaving idle writes it). Nobody else
//! needs an idle node's deadline: the queue only looks at queued nodes' sessions, and those are
//! renewed in the RotaNode (a write per heartbeat, `ttl / 3`, only while the node is queued or
//! in its window; far from the front of the queue, every ten minutes: see "Waiting"). A newer session of the node (another agent taking it over) reaches an idle
//! agent through the watch of its own RotaNode; without that watch, it asks the API server (a
//! read) every five minutes whether its session is still current. So an idle agent sends no
//! writes, and no reads either while its watches stand.
//!
//! # Waiting
//!
//! A queued node far from the front of the queue renews its session sparsely: a long deadline
//! written every ten minutes, marked `sparse` (and labelled `rota.dev/session-sparse`), instead
//! of a write every third of the TTL; near the front it renews as usual, and the others' looks
//! count a sparse waiter near the front as dead. See `store::waiting` and docs/design.md §7.
//!
//! Deadlines and history times come from the agents' clocks, not the API server's: **agents'
//! clocks must be synchronised** (NTP) to well within the session TTL. A skewed clock can make
//! a queued node look dead to the others (served out of order) or alive too long (the others
//! wait); it cannot grant a slot twice, which only the Leases' compare-and-swap decides. The
//! one ordering that matters for the history replay (a slot's next `started` after the last
//! holder's release) is kept even across skewed clocks, through the Lease (see [`slots`]).
//!
//! # Watches
//!
//! Three while the agent's node is idle, four while it is queued or in its window (see
//! `store::watches`):
//!
//! - the ConfigMaps of rota's namespace, from the start (see `config_view`): the pause and the
//!   concurrency are read from `rota-config` there, an operator's pause, resume or new
//!   concurrency wakes the agents of every process at once, and the procedures' scripts come
//!   from it too;
//! - the Procedures' metadata, once an agent opened a session (see `procedure_view`): a new,
//!   deleted or changed procedure wakes the agents, and between changes their looks are
//!   answered from the last list;
//! - the agent's own RotaNode, by name (every RotaNode of the installation for a handle with
//!   several agents, as in `rota simulate`): a change someone else made (an operator, a hand
//!   edit, a newer session) replaces what the handle answers the agent's reads from, and wakes
//!   it, so its periodic re-read asks nothing;
//! - the slot Leases, only while a node of the handle's agents is queued or in its window (see
//!   `changes`): a release wakes waiting agents through it, and its events keep the view of
//!   the Leases that a look at the queue reads instead of listing them (a consistent list
//!   waits for the API server's cache to catch up with etcd).
//!
//! # Round trips
//!
//! A maintenance window is a chain of reads and writes, each waiting for the API server, so the
//! store keeps the chain short without giving up a compare-and-swap:
//!
//! - reads that do not depend on each other are sent at once (the queue, the concurrency and
//!   the Node when asking for a slot; the object and the Leases of a node);
//! - a look at the queue lists the queued RotaNodes' metadata only (consistently when it may
//!   grant, from the API server's cache or the handle's watch of every RotaNode when it tells
//!   the waiter to wait; see `store/acquire.rs`): their
//!   place, session deadline and blocked mark are mirrored into labels (`rota.dev/queued-at`,
//!   `rota.dev/session-deadline`, `rota.dev/blocked`) at every write (see `queue_labels`), and
//!   its concurrency, like the pause read before anything disruptive, comes from the watch of
//!   `rota-config`;
//! - a write of an agent starts from the RotaNode as this process last wrote or read it, and
//!   the Lease as it last took or renewed it; a stale one fails its compare-and-swap and is
//!   read again, so only a fresh read ever refuses;
//! - the agent's reads of its own node are answered from the RotaNode this process last wrote
//!   or read, while the watch of its own RotaNode is synced and until an operator's wake for
//!   the node: only an operator writes it besides the agent, and the agent's next
//!   compare-and-swap notices (the fence guards everything disruptive);
//! - the fence writes the RotaNode (session) and the Lease (slot) at the same time;
//! - Events are sent in the background;
//! - an idle agent sends no request at all once its watches have listed: its looks at
//!   [`AGENT_PROCEDURE_POLL`] are answered from them. An operator's command that concerns it
//!   also writes key `wake` of `rota-config` (a node's name, or `*` for a new procedure), which
//!   its ConfigMap watch delivers, in case its own watches are down.
//!
//! # Isolation
//!
//! [`KubeStoreConfig::namespace`] holds the installation's Leases and ConfigMap, and every
//! RotaNode is labelled `rota.dev/namespace=<namespace>`; the store only lists RotaNodes with
//! its label. [`KubeStoreConfig::name_prefix`] (empty in production) goes before every
//! RotaNode's name, so that tests sharing a cluster can use the same node names.

pub mod audit_record;
pub mod crd;
pub mod ids;
pub mod permissions;
pub mod preflight;
pub mod procedure;
pub mod slots;
pub mod window;

mod changes;
mod config_view;
mod error;
mod history_ring;
mod node_requests;
mod procedure_ledger;
mod procedure_status;
mod procedure_view;
mod procedures;
mod queue_labels;
mod status;
mod store;
mod view;

pub use audit_record::{RotaAuditRecord, RotaAuditRecordSpec, rota_audit_record_crd};
pub use crd::{RotaNode, RotaNodeSpec, RotaNodeStatus, rota_node_crd};
pub use error::KubeError;
pub use procedure::{Procedure, ProcedureBody, ProcedureStatus, procedure_crd};
pub use procedures::SUBMITTED_AT_ANNOTATION;
pub use store::{CONFIG_MAP, KubeStore, KubeStoreConfig, NAMESPACE_LABEL, STATE_LABEL};
pub use window::{RotaWindow, RotaWindowSpec, rota_window_crd};

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

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

/// How often an agent on this store with work re-reads it: only a safety net, as the watches
/// report releases and other writers' changes; a re-read asks the API server only while the
/// watch of the agent's own RotaNode is down.
pub const AGENT_STORE_POLL: Duration = Duration::from_secs(300);

/// How often an idle agent on this store looks for new procedures and at its own RotaNode. A
/// look is answered from the watches of the Procedures and of the node's RotaNode, without a
/// request, while they stand; it costs two requests (a list and a read) only while they are
/// down. New procedures and operators' changes wake the agents at once, through those watches
/// and `rota-config` (key `wake`).
pub const AGENT_PROCEDURE_POLL: Duration = Duration::from_secs(60);
