//! The `RotaWindow` custom resource: one chunk of a node's history, written once as the chunk
//! leaves the node's RotaNode (normally: one maintenance window's entries, as it ends), so that
//! the RotaNode, rewritten at every write, stays small whatever the history's length
//! (docs/design.md §7). A node has at most [`RING_SIZE`] of them, named after its RotaNode and
//! their place in the ring; each new lap overwrites the oldest, so none is ever deleted but by
//! the garbage collector, with the RotaNode that owns them. See `history_ring`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::crd::{ArchivedRequest, HistoryStatus, StepStatus};

/// How many `RotaWindow`s a node keeps: its last 50 chunks of history.
pub const RING_SIZE: u64 = 50;

/// Label on every RotaWindow: the tag of the node whose history it holds (see `ids`), which
/// no two nodes of an installation share; a node's name may be longer than a label value.
pub const NODE_TAG_LABEL: &str = "rota.dev/node-tag";

/// One chunk of a node's history. The spec is the chunk: it is written whole, once per lap of
/// the ring. Later kinds of records of the same window (the steps inside it) go beside
/// `entries`, written in the same request.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "rota.dev",
    version = "v1alpha1",
    kind = "RotaWindow",
    plural = "rotawindows",
    shortname = "rw",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Sequence","type":"integer","jsonPath":".spec.sequence"}"#,
    printcolumn = r#"{"name":"From","type":"date","jsonPath":".spec.entries[0].at"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RotaWindowSpec {
    /// The Kubernetes node (or host) name, as in its RotaNode's `spec.node`.
    #[schemars(length(min = 1, max = 253))]
    pub node: String,
    /// The chunk's number in the node's history (0, 1, 2, …): its place in the ring is
    /// `sequence % 50`. Readers take it only below the RotaNode's `status.historyRing.written`.
    pub sequence: u64,
    /// The RotaNode's `metadata.generation` the chunk was cut from: tells a writer that meets
    /// a chunk of the same sequence whether its writer can still commit it (see
    /// `history_ring`).
    pub cut_at_generation: i64,
    /// The history entries, oldest first, with their causes whole.
    pub entries: Vec<HistoryStatus>,
    /// In the node's procedure ledger only (`<rotanode>-procedures`, outside the ring, its
    /// `sequence` the count of moves into it): the closed procedure requests that left the
    /// RotaNode, one per procedure the node ever had (see `procedure_ledger`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub procedure_requests: Vec<ArchivedRequest>,
    /// The states the node entered up to the chunk's last entry, and when: the steps inside
    /// the window (the RotaNode's `steps` as the chunk was cut).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepStatus>,
}

/// The CustomResourceDefinition as installed.
pub fn rota_window_crd() -> CustomResourceDefinition {
    RotaWindow::crd()
}

/// The name of ring place `sequence % 50` of the RotaNode `owner`: `<owner>-<place>`, or,
/// for an owner name too long to take the suffix within the 253 characters of a name, its
/// first 230 characters and a hash of the whole.
pub fn ring_name(owner: &str, sequence: u64) -> String {
    owned_name(owner, &(sequence % RING_SIZE).to_string())
}

/// The name of the procedure ledger of the RotaNode `owner`: `<owner>-procedures`, shortened
/// as [`ring_name`] shortens. No ring place ends in letters, so the two never meet.
pub fn ledger_name(owner: &str) -> String {
    owned_name(owner, "procedures")
}

/// `<owner>-<suffix>`, or, past the 253 characters of a name, the owner's first 230
/// characters and a hash of the whole before the suffix.
fn owned_name(owner: &str, suffix: &str) -> String {
    if owner.len() + 1 + suffix.len() <= 253 {
        return format!("{owner}-{suffix}");
    }
    let hash = owner.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let head = owner.get(..230).unwrap_or(owner);
    format!("{head}x{hash:08x}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_has_fifty_places_named_after_the_owner() {
        assert_eq!(ring_name("node-a", 0), "node-a-0");
        assert_eq!(ring_name("node-a", 49), "node-a-49");
        assert_eq!(ring_name("node-a", 50), "node-a-0");
        assert_eq!(ring_name("node-a", 123), "node-a-23");
    }

    #[test]
    fn a_long_owner_name_still_makes_a_valid_name() {
        let owner = format!("{}.b", "a".repeat(250));
        let name = ring_name(&owner, 7);
        assert!(name.len() <= 253, "{}", name.len());
        assert!(name.ends_with("-7"));
        assert_ne!(name, ring_name(&format!("{}.c", "a".repeat(250)), 7));
        let ledger = ledger_name(&owner);
        assert!(ledger.len() <= 253, "{}", ledger.len());
        assert!(ledger.ends_with("-procedures"));
    }

    #[test]
    fn the_ledger_is_named_apart_from_every_ring_place() {
        assert_eq!(ledger_name("node-a"), "node-a-procedures");
        assert!((0..RING_SIZE).all(|n| ring_name("node-a", n) != ledger_name("node-a")));
    }
}
