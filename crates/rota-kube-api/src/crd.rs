//! The `RotaNode` custom resource: one cluster-scoped object per node, named after it. Its spec
//! holds the scheduler's grant, its status what the node's agent records (docs/design.md §7).

use std::borrow::Cow;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::CustomResourceExt;
use rota_core::{HistoryEvent, NodeState, Process};
use rota_store::{Millis, RequestState};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// The node a RotaNode describes, and its turn as the scheduler grants it. The object's name is
/// the node's name (with the store's name prefix, empty in production); the spec repeats the
/// bare name so that nothing has to parse it back out of the object name.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "rota.dev",
    version = "v1alpha1",
    kind = "RotaNode",
    plural = "rotanodes",
    shortname = "rn",
    status = "RotaNodeStatus",
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Grant","type":"integer","jsonPath":".spec.grant.slot"}"#,
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
    /// The slot the scheduler granted the node, whose Lease names it. Its agent takes it up
    /// (`status.slot`) and clears it when the window ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<GrantSpec>,
    /// The scheduler's last withdrawal of a Lease from this node. While it stands (until the
    /// node's agent next writes), the node counts as without a live agent and gets no grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<WithdrawnSpec>,
}

/// A slot granted.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GrantSpec {
    pub slot: u32,
    /// When the scheduler wrote it: a grant not taken up within the take-up time is withdrawn.
    pub at: Timestamp,
}

/// A Lease the scheduler took back from the node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawnSpec {
    pub slot: u32,
    pub at: Timestamp,
    /// `notTakenUp` (its agent did not take the grant up in time), `blocked` (the node became
    /// blocked before it did) or `unused` (the node was in no window of the Lease).
    pub reason: String,
}

/// Everything the node's agent records: the node's record, the history of the window under way,
/// and which of its windows ended (docs/design.md §7).
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
    /// The slot of the grant the agent took up: the node is in its window.
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
    /// The node's place in the queue while it asks for a turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<String>,
    /// When `lastResult` was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result_at: Option<Timestamp>,
    /// The slot group the node belongs to (the value of its Node's `--group-by` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Why the node's agent holds back (a blocker, the fleet's pause), while it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<BlockedStatus>,
    /// The open requests, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestStatus>,
    /// Backoff per process, after failures; a success clears it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backoff: Vec<BackoffStatus>,
    /// What happened since the node's last window ended, oldest first: the history entries,
    /// the states entered, and the requests closed. They move to a `RotaWindow` as the window
    /// ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<RequestStatus>,
    /// The procedures the node ran, or began to: each runs at most once per node, ever.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub procedures: Vec<RequestStatus>,
    /// The names of the node's `RotaWindow`s, oldest first: the ended windows it keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<String>,
    /// The id last given to one of the node's history entries or requests.
    #[serde(default)]
    pub last_id: i64,
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

/// One step of the node's lifecycle: the state it entered, and when; with what last held the
/// node back in it, if anything did.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    #[schemars(schema_with = "node_state_schema")]
    pub state: NodeState,
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
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
    /// The session expires here unless renewed. The agent writes it only while its node is in
    /// its window; otherwise it renews it in memory and writes it with its next write.
    pub deadline: Timestamp,
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
}

/// A request's state, open (`pending`, `active`) or closed (`done`, `canceled`).
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

/// `reboot`, `maintenance`, `fleetlock` or `mop/<DNS-1123 label>`, as `rota_core::Process` parses them.
const PROCESS_PATTERN: &str =
    "^(reboot|maintenance|fleetlock|mop/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$";

fn process_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": PROCESS_PATTERN })
}

fn optional_process_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": PROCESS_PATTERN, "nullable": true })
}

/// The CustomResourceDefinition as installed: kube's derived one without the status
/// subresource, so that one compare-and-swap `replace` of the agent writes its status and
/// clears the grant it ends (a status subresource would take two writes).
pub fn rota_node_crd() -> CustomResourceDefinition {
    let mut crd = RotaNode::crd();
    for version in &mut crd.spec.versions {
        version.subresources = None;
    }
    crd
}

impl From<RequestStateName> for RequestState {
    fn from(state: RequestStateName) -> RequestState {
        match state {
            RequestStateName::Pending => RequestState::Pending,
            RequestStateName::Active => RequestState::Active,
            RequestStateName::Done => RequestState::Done,
            RequestStateName::Canceled => RequestState::Canceled,
        }
    }
}

impl From<RequestState> for RequestStateName {
    fn from(state: RequestState) -> RequestStateName {
        match state {
            RequestState::Pending => RequestStateName::Pending,
            RequestState::Active => RequestStateName::Active,
            RequestState::Done => RequestStateName::Done,
            RequestState::Canceled => RequestStateName::Canceled,
        }
    }
}
