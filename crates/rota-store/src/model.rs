use rota_core::{HistoryEvent, NodeName, NodeState, ProcedureSpec, Process};
// The core's record, its writes, time unit and window change are the stores' too: a store
// reads the record, lets the core decide a write, and persists the answer.
pub use rota_core::{
    BackoffRecord, Blocked, Millis, NodeFields, NodeOverview, NodeRecord, Outcome, RequestRecord,
    RequestState, Transition, WindowChange,
};
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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    pub node: Option<NodeName>,
    pub process: Option<Process>,
    pub event: Option<HistoryEvent>,
    pub since: Option<Millis>,
    pub until: Option<Millis>,
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
