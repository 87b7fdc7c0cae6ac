use std::collections::HashMap;
use std::time::Duration;

use rota_core::{
    BackoffPolicy, HistoryEvent, Lifecycle, NodeName, NodeState, ProcedureSpec, Process, Step,
};
// The core's time unit and window change are the stores' too: their writes carry them.
pub use rota_core::{Millis, WindowChange};
use serde::{Deserialize, Serialize};

/// The current wall-clock time as [`Millis`].
pub fn now_millis() -> Millis {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// A live agent incarnation. Writes through a superseded or expired session are refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Session {
    pub id: i64,
    pub node: NodeName,
}

/// What the store knows about one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeRecord {
    pub node: NodeName,
    pub state: NodeState,
    pub since: Millis,
    pub process: Option<Process>,
    pub slot: Option<u32>,
    pub pre_cordoned: bool,
    pub cordoned_by_rota: bool,
    pub boot_id: Option<String>,
    pub reboot_started_at: Option<Millis>,
    pub reboot_deadline: Option<Millis>,
    pub last_reboot_at: Option<Millis>,
    pub queued_at: Option<Millis>,
    pub last_result: Option<String>,
    /// Why the node's agent holds back (a blocker, the fleet's pause), while it does.
    pub blocked: Option<Blocked>,
}

/// Why a node's agent waits instead of taking a slot or rebooting, and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Blocked {
    pub reason: String,
    pub since: Millis,
}

impl NodeRecord {
    /// A node in `state` since `since`, with nothing else recorded: no process, slot, cordon,
    /// boot, queue place, result or block.
    pub fn new(node: NodeName, state: NodeState, since: Millis) -> NodeRecord {
        NodeRecord {
            node,
            state,
            since,
            process: None,
            slot: None,
            pre_cordoned: false,
            cordoned_by_rota: false,
            boot_id: None,
            reboot_started_at: None,
            reboot_deadline: None,
            last_reboot_at: None,
            queued_at: None,
            last_result: None,
            blocked: None,
        }
    }

    pub fn lifecycle(&self) -> Lifecycle {
        Lifecycle {
            state: self.state,
            pre_cordoned: self.pre_cordoned,
            cordoned_by_rota: self.cordoned_by_rota,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestState {
    /// Waiting for the node's next maintenance window.
    Pending,
    /// Being served by the node's open window.
    Active,
    Done,
    Canceled,
}

impl RequestState {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestState::Pending => "pending",
            RequestState::Active => "active",
            RequestState::Done => "done",
            RequestState::Canceled => "canceled",
        }
    }
}

/// A reason for maintenance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestRecord {
    pub id: i64,
    pub node: NodeName,
    pub process: Process,
    /// Where the request came from: a sentinel path, `operator`, a procedure.
    pub source: String,
    pub created_at: Millis,
    pub state: RequestState,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryEntry {
    pub id: i64,
    pub node: NodeName,
    pub process: Process,
    pub event: HistoryEvent,
    pub at: Millis,
    pub cause: Option<String>,
    /// The slot the node held at this event.
    pub slot: Option<u32>,
    /// Whether this event gave the slot back.
    pub released: bool,
}

/// One step of a node's lifecycle: the state it entered, and when. The stores record one at
/// every change of a node's state, in the write that changes it; together with the history
/// entries they tell where each window's time went (`rota history --steps`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepRecord {
    pub node: NodeName,
    pub state: NodeState,
    pub at: Millis,
}

/// A node with its open requests (oldest first) and its backoffs (by process): one row of
/// `rota status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeOverview {
    pub record: NodeRecord,
    pub open_requests: Vec<RequestRecord>,
    pub backoffs: Vec<BackoffRecord>,
}

impl NodeOverview {
    /// Each of `nodes` with the open requests and backoffs that name it, in the order given.
    pub fn group(
        nodes: Vec<NodeRecord>,
        open_requests: Vec<RequestRecord>,
        backoffs: Vec<BackoffRecord>,
    ) -> Vec<NodeOverview> {
        let mut requests_of: HashMap<NodeName, Vec<RequestRecord>> = HashMap::new();
        for request in open_requests {
            requests_of
                .entry(request.node.clone())
                .or_default()
                .push(request);
        }
        let mut backoffs_of: HashMap<NodeName, Vec<BackoffRecord>> = HashMap::new();
        for backoff in backoffs {
            backoffs_of
                .entry(backoff.node.clone())
                .or_default()
                .push(backoff);
        }
        nodes
            .into_iter()
            .map(|record| {
                let mut open_requests = requests_of.remove(&record.node).unwrap_or_default();
                open_requests.sort_by_key(|r| r.id);
                let mut backoffs = backoffs_of.remove(&record.node).unwrap_or_default();
                backoffs.sort_by_key(|b| b.process.to_string());
                NodeOverview {
                    record,
                    open_requests,
                    backoffs,
                }
            })
            .collect()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    pub node: Option<NodeName>,
    pub process: Option<Process>,
    pub event: Option<HistoryEvent>,
    pub since: Option<Millis>,
    pub until: Option<Millis>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackoffRecord {
    pub node: NodeName,
    pub process: Process,
    pub until: Millis,
    #[serde(serialize_with = "as_seconds")]
    pub last_interval: Duration,
    pub cause: String,
}

fn as_seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

/// Node fields a transition may set; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFields {
    pub pre_cordoned: Option<bool>,
    pub cordoned_by_rota: Option<bool>,
    pub boot_id: Option<Option<String>>,
    pub reboot_started_at: Option<Option<Millis>>,
    pub reboot_deadline: Option<Option<Millis>>,
    pub last_reboot_at: Option<Millis>,
}

/// One step of the node lifecycle, written atomically, fenced by the writer's session, and
/// compare-and-swapped on the node's current state.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub from: NodeState,
    pub to: NodeState,
    /// The process the node is busy with after this step (kept only outside `idle`/`queued`).
    pub process: Option<Process>,
    pub window: WindowChange,
    pub fields: NodeFields,
    /// Requests (process, source) recorded in the same write, after the window change, as
    /// [`AgentStore::add_request`](crate::AgentStore::add_request) records them: an open
    /// request of the same process is kept. A refused transition records none.
    pub requests: Vec<(Process, String)>,
}

impl Transition {
    pub fn new(from: NodeState, to: NodeState) -> Transition {
        Transition {
            from,
            to,
            process: None,
            window: WindowChange::None,
            fields: NodeFields::default(),
            requests: Vec::new(),
        }
    }

    /// The write of a step the core decided: its states, its window change, and the cordon
    /// bookkeeping of the lifecycle it leads to.
    pub fn of(step: Step) -> Transition {
        Transition {
            from: step.from,
            to: step.next.state,
            process: None,
            window: step.window,
            fields: NodeFields {
                pre_cordoned: Some(step.next.pre_cordoned),
                cordoned_by_rota: Some(step.next.cordoned_by_rota),
                ..NodeFields::default()
            },
            requests: Vec::new(),
        }
    }

    /// Whether the write may let a waiting node go on: the core's rule, [`rota_core::wakes`].
    pub fn wakes(&self) -> bool {
        rota_core::wakes(self.from, self.to, &self.window)
    }

    /// Records a request for `process` from `source` with this transition.
    pub fn request(mut self, process: Process, source: impl Into<String>) -> Transition {
        self.requests.push((process, source.into()));
        self
    }

    pub fn process(mut self, process: Option<Process>) -> Transition {
        self.process = process;
        self
    }

    pub fn window(mut self, window: WindowChange) -> Transition {
        self.window = window;
        self
    }

    pub fn fields(mut self, fields: NodeFields) -> Transition {
        self.fields = fields;
        self
    }
}

/// One slot and its holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SlotHolder {
    pub slot: u32,
    pub node: NodeName,
    pub acquired_at: Millis,
}

/// The outcome of asking for a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The node holds this slot (just taken, or re-adopted).
    Granted(u32),
    /// Not yet. At least this many wake-ups of
    /// [`AgentStore::changes`](crate::AgentStore::changes) must happen before the node can be
    /// granted a slot, since each one (a release, a waiter leaving) moves a waiter at most one
    /// place forward. A waiter far back in the queue can sleep through the others' handoffs
    /// instead of re-checking at every one.
    Wait { changes: u64 },
}

impl Acquire {
    pub fn slot(self) -> Option<u32> {
        match self {
            Acquire::Granted(slot) => Some(slot),
            Acquire::Wait { .. } => None,
        }
    }
}

/// A procedure as the store holds it: the spec exactly as submitted (procedures are immutable).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcedureRecord {
    pub spec: ProcedureSpec,
    pub submitted_at: Millis,
    /// The text to run: the inline script, or the one read from its ConfigMap; `None` when
    /// the ConfigMap or its key is missing (the agent then refuses to run it and says why).
    pub script: Option<String>,
}

impl ProcedureRecord {
    /// The stored form of a spec (the SQL stores' `procedures.spec`): rota-core's JSON.
    pub fn stored_spec(spec: &ProcedureSpec) -> crate::Result<String> {
        serde_json::to_string(spec).map_err(|e| crate::Error::Corrupt {
            column: "procedures.spec",
            value: spec.name.clone(),
            reason: e.to_string(),
        })
    }

    /// A procedure read back from its stored spec; the script is the inline one. A spec that
    /// does not read (edited by hand, or written by a newer rota) is refused naming its field.
    pub fn from_stored(json: &str, submitted_at: Millis) -> crate::Result<ProcedureRecord> {
        let mut stored = serde_json::Deserializer::from_str(json);
        let spec = ProcedureSpec::read(&mut stored)
            .and_then(|spec| stored.end().map(|()| spec).map_err(|e| e.to_string()))
            .map_err(|reason| crate::Error::Corrupt {
                column: "procedures.spec",
                value: json.to_string(),
                reason,
            })?;
        Ok(ProcedureRecord {
            script: spec.script.clone(),
            spec,
            submitted_at,
        })
    }
}

/// How one active request of an open window ended (see
/// [`AgentStore::complete_request`](crate::AgentStore::complete_request)).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The request is done: `finished` in history with `detail` (a script's output tail), and
    /// its backoff is cleared. The window stays open.
    Succeeded { detail: Option<String> },
    /// The attempt failed: `failed` in history with the cause and a backoff by `policy`. The
    /// request stays active, so that a retry runs it again in the same window, and the node
    /// fails closed.
    Failed {
        cause: String,
        policy: BackoffPolicy,
    },
}

/// A fleet-wide pause: no node takes a slot (and none reboots) until an operator resumes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    pub reason: String,
    pub since: Millis,
}

impl Pause {
    /// The stored form of a pause (one value in the store's key-value settings).
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a stored pause; a missing or empty value means none.
    pub fn decode(column: &'static str, value: Option<&str>) -> crate::Result<Option<Pause>> {
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        serde_json::from_str(value)
            .map(Some)
            .map_err(|e| crate::Error::Corrupt {
                column,
                value: value.to_string(),
                reason: e.to_string(),
            })
    }
}

/// Reads the stored time of the last resume (decimal milliseconds, one value in the store's
/// key-value settings); a missing or empty value means the fleet was never resumed.
pub fn decode_resumed_at(
    column: &'static str,
    value: Option<&str>,
) -> crate::Result<Option<Millis>> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    value
        .parse()
        .map(Some)
        .map_err(|e: std::num::ParseIntError| crate::Error::Corrupt {
            column,
            value: value.to_string(),
            reason: e.to_string(),
        })
}
