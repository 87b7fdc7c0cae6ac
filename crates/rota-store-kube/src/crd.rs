//! The `RotaNode` custom resource: one cluster-scoped object per node, named after it, whose
//! status holds everything the store knows about the node (docs/design.md §7).

use std::borrow::Cow;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::CustomResourceExt;
use rota_core::{HistoryEvent, NodeState, Process};
use rota_store::Millis;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// How many history entries a RotaNode ever holds (the oldest go first): a backstop, since
/// each window's entries move to the node's `RotaWindow`s as it ends (see `history_ring`).
pub const HISTORY_LIMIT: usize = 50;
/// How many closed (done or canceled) requests each RotaNode keeps beside its open ones: the
/// newest, whose id the next request's follows (a closed procedure request moves to
/// `procedureRequests`).
pub const CLOSED_REQUEST_LIMIT: usize = 2;

/// The node a RotaNode describes. The object's name is the node's name (with the store's
/// name prefix, empty in production); the spec repeats the bare name so that nothing has to
/// parse it back out of the object name.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "rota.dev",
    version = "v1alpha1",
    kind = "RotaNode",
    plural = "rotanodes",
    shortname = "rn",
    status = "RotaNodeStatus",
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Slot","type":"integer","jsonPath":".status.slot"}"#,
    printcolumn = r#"{"name":"Process","type":"string","jsonPath":".status.process"}"#,
    printcolumn = r#"{"name":"Since","type":"date","jsonPath":".status.since"}"#,
    printcolumn = r#"{"name":"Last Result","type":"string","jsonPath":".status.lastResult"}"#,
    printcolumn = r#"{"name":"Blocked","type":"string","jsonPath":".status.blocked.reason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RotaNodeSpec {
    /// The Kubernetes node (or host) name.
    #[schemars(length(min = 1, max = 253))]
    pub node: String,
}

/// Everything the store knows about one node.
// It reads through the `Deserialize` impl below, which names the field that does not read:
// `remote = "Self"` keeps serde's derived code as inherent functions for it to call.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct RotaNodeStatus {
    #[schemars(schema_with = "node_state_schema")]
    pub state: NodeState,
    pub since: Timestamp,
    /// The process the node is busy with (outside `idle` and `queued`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_process_schema")]
    pub process: Option<Process>,
    /// The slot the node held at its last write: a mirror of the slot Leases for `kubectl get`;
    /// the Leases are the truth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionStatus>,
    #[serde(default)]
    pub pre_cordoned: bool,
    #[serde(default)]
    pub cordoned_by_rota: bool,
    /// The boot id before the reboot rota asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_started_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_deadline: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reboot_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<String>,
    /// Why the node's agent holds back (a blocker, the fleet's pause), while it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<BlockedStatus>,
    /// This node's part of every history and request id (see `ids`); unique per installation.
    #[serde(default)]
    #[schemars(range(max = 16383))]
    pub tag: u32,
    /// The open requests, and the most recent closed ones.
    #[serde(default)]
    pub requests: Vec<RequestStatus>,
    /// Backoff per process, after failures; a success clears it.
    #[serde(default)]
    pub backoff: Vec<BackoffStatus>,
    /// The history entries not yet moved to the node's `RotaWindow`s, oldest first: those of
    /// the window under way (see `history_ring`).
    #[serde(default)]
    pub history: Vec<HistoryStatus>,
    /// How many chunks of history went to the node's `RotaWindow`s, and the last entry's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_ring: Option<HistoryRingStatus>,
    /// Closed procedure requests that no longer fit in `requests`: a procedure runs at most
    /// once per node, ever, so its request is remembered for as long as the node's RotaNode
    /// lives. Past a few, they move to the node's procedure ledger (see `procedure_ledger`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub procedure_requests: Vec<ArchivedRequest>,
    /// How many times closed procedure requests moved to the node's procedure ledger, the
    /// RotaWindow `<rotanode>-procedures`: a reader looking for a procedure's request that is
    /// not here reads a ledger of at least this many moves (none while 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub procedure_ledger: u64,
    /// The states the node entered since its history last moved to a RotaWindow, and when
    /// (at most [`STEP_LIMIT`]): they move with the history's chunk (see `history_ring`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepStatus>,
    /// The version of this status's schema its writer knew ([`SCHEMA`]): the answer to a
    /// write that lacks it was cut down by an older CRD, which drops every field it does not
    /// know (see `store::cas`).
    #[serde(default)]
    pub schema: u32,
}

/// The schema of the status this rota writes. Raised with every field whose loss would lose
/// more than a record (`procedureLedger`: which procedures a node ran).
pub const SCHEMA: u32 = 1;

/// Steps a RotaNode keeps between two moves of its history: a window takes about 6; more
/// only when the node queues and leaves the queue again and again without a window.
pub const STEP_LIMIT: usize = 16;

/// One step of the node's lifecycle: the state it entered, and when.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    #[schemars(schema_with = "node_state_schema")]
    pub state: NodeState,
    pub at: Timestamp,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where the node's history ring stands. A `RotaWindow` whose `sequence` is below `written`
/// holds entries this RotaNode gave up; one at `written` or above is a write that has not
/// (or never) come through, and readers leave it out.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRingStatus {
    /// Chunks written: the next one goes to ring place `written % 50`.
    pub written: u64,
    /// The id of the newest entry moved, which the next entry's id follows.
    pub last_id: i64,
}

/// A closed procedure request as `procedureRequests` keeps it: its time is its id's (see
/// `ids`), and it was closed when it left `requests`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedRequest {
    pub id: i64,
    #[schemars(schema_with = "process_schema")]
    pub process: Process,
    pub source: String,
    pub state: RequestStateName,
}

/// A status edited by hand (`kubectl edit rotanode`) or written by a newer rota may hold what
/// this one cannot read; the error names the field (`status.history[3].event: unknown variant
/// `drained`…`), which serde's own names only by a column of the JSON. The API call's error
/// around it names the object.
impl<'de> Deserialize<'de> for RotaNodeStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut track = serde_path_to_error::Track::new();
        RotaNodeStatus::deserialize(serde_path_to_error::Deserializer::new(d, &mut track)).map_err(
            |e| match track.path().to_string() {
                path if path == "." => serde::de::Error::custom(format!("status: {e}")),
                path => serde::de::Error::custom(format!("status.{path}: {e}")),
            },
        )
    }
}

impl Serialize for RotaNodeStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RotaNodeStatus::serialize(self, s)
    }
}

impl Default for RotaNodeStatus {
    fn default() -> RotaNodeStatus {
        RotaNodeStatus {
            state: NodeState::Idle,
            since: Timestamp::default(),
            process: None,
            slot: None,
            session: None,
            pre_cordoned: false,
            cordoned_by_rota: false,
            boot_id: None,
            reboot_started_at: None,
            reboot_deadline: None,
            last_reboot_at: None,
            queued_at: None,
            last_result: None,
            blocked: None,
            tag: 0,
            requests: Vec::new(),
            backoff: Vec::new(),
            history: Vec::new(),
            history_ring: None,
            procedure_requests: Vec::new(),
            procedure_ledger: 0,
            steps: Vec::new(),
            schema: 0,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BlockedStatus {
    pub reason: String,
    pub since: Timestamp,
}

/// The node's current agent incarnation. Writes from any other are refused.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatus {
    pub id: i64,
    /// The session expires here unless renewed. While the node is idle, the agent renews it in
    /// memory only and writes the renewed deadline with its next write (see the crate docs).
    pub deadline: Timestamp,
    /// While the node waits far from the front of the queue: the deadline is a long one,
    /// renewed rarely, and the node counts as alive near the front only once it renews as
    /// usual again (see the crate docs, "Waiting").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sparse: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RequestStatus {
    pub id: i64,
    #[schemars(schema_with = "process_schema")]
    pub process: Process,
    pub source: String,
    pub created_at: Timestamp,
    pub state: RequestStateName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
}

impl RequestStatus {
    /// A request that no window has taken up yet.
    pub fn pending(id: i64, process: Process, source: &str, created_at: Timestamp) -> Self {
        RequestStatus {
            id,
            process,
            source: source.to_string(),
            created_at,
            state: RequestStateName::Pending,
            finished_at: None,
        }
    }
}

/// `rota_store::RequestState` in the resource (that type only serialises).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RequestStateName {
    Pending,
    Active,
    Done,
    Canceled,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackoffStatus {
    #[schemars(schema_with = "process_schema")]
    pub process: Process,
    pub until: Timestamp,
    pub last_interval_seconds: u64,
    pub cause: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryStatus {
    pub id: i64,
    #[schemars(schema_with = "process_schema")]
    pub process: Process,
    #[schemars(schema_with = "history_event_schema")]
    pub event: HistoryEvent,
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    #[serde(default)]
    pub released: bool,
}

/// A point in time, exact to the millisecond, stored as an RFC 3339 string so that `kubectl`
/// shows it (and the `Since` column ages it) like any Kubernetes timestamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub Millis);

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let nanos = i128::from(self.0) * 1_000_000;
        let at = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .map_err(serde::ser::Error::custom)?;
        let text = at
            .format(&time::format_description::well_known::Rfc3339)
            .map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let at = time::OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339)
            .map_err(|e| serde::de::Error::custom(format!("timestamp {text:?}: {e}")))?;
        let millis = at.unix_timestamp_nanos() / 1_000_000;
        i64::try_from(millis)
            .map(Timestamp)
            .map_err(|_| serde::de::Error::custom(format!("timestamp {text:?} out of range")))
    }
}

impl JsonSchema for Timestamp {
    fn schema_name() -> Cow<'static, str> {
        "Timestamp".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "format": "date-time" })
    }
}

fn node_state_schema(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = NodeState::ALL.iter().map(|s| s.as_str()).collect();
    json_schema!({ "type": "string", "enum": names })
}

fn history_event_schema(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = HistoryEvent::ALL.iter().map(|e| e.as_str()).collect();
    json_schema!({ "type": "string", "enum": names })
}

/// `reboot`, `maintenance` or `mop/<DNS-1123 label>`, as `rota_core::Process` parses them.
const PROCESS_PATTERN: &str = "^(reboot|maintenance|mop/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$";

fn process_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": PROCESS_PATTERN })
}

fn optional_process_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": PROCESS_PATTERN, "nullable": true })
}

/// The CustomResourceDefinition as installed: kube's derived one without the status
/// subresource, so that one compare-and-swap `replace` writes the status together with the
/// `rota.dev/state` label (a status subresource would take two writes, and the label could
/// disagree with the state in between).
pub fn rota_node_crd() -> CustomResourceDefinition {
    let mut crd = RotaNode::crd();
    for version in &mut crd.spec.versions {
        version.subresources = None;
    }
    crd
}
