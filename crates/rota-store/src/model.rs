use rota_core::{GroupRules, HistoryEvent, NodeName, NodeState, ProcedureSpec, Process, Rollout};
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

/// A span of time as [`Millis`].
pub fn millis_of(duration: std::time::Duration) -> Millis {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The instant at which the clock reads `at` (now, if it is past), to sleep until.
pub fn instant_at(at: Millis) -> tokio::time::Instant {
    let wait = u64::try_from(at.saturating_sub(now_millis())).unwrap_or(0);
    tokio::time::Instant::now() + std::time::Duration::from_millis(wait)
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
    /// What last held the node back in this step, if anything did: a blocker or the pause
    /// while queued, the pods a drain waits for (the node's `blocked` reason, kept).
    pub note: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    pub node: Option<NodeName>,
    pub process: Option<Process>,
    pub event: Option<HistoryEvent>,
    pub since: Option<Millis>,
    pub until: Option<Millis>,
}

/// The part of the past [`Store::read_history`](crate::Store::read_history) reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Entries,
    Steps,
    Audit,
    Requests,
}

/// The past a store read: each part empty but the one asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub entries: Vec<HistoryEntry>,
    pub steps: Vec<StepRecord>,
    pub audit: Vec<crate::AuditRecord>,
    pub requests: Vec<RequestRecord>,
}

/// Every node's record and every slot's holder, read at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fleet {
    /// By node name.
    pub nodes: Vec<NodeOverview>,
    /// By slot.
    pub slots: Vec<SlotHolder>,
    /// What holds every node's turn back, if the store knows of it (on Kubernetes: no
    /// scheduler runs).
    pub notice: Option<String>,
}

/// The fleet's settings, which operators change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The number of slots, if it was ever set.
    pub concurrency: Option<u32>,
    pub pause: Option<Pause>,
    /// When the fleet was last resumed (the start of the current rollout), if ever.
    pub resumed_at: Option<Millis>,
    /// How the rollout widens, and its failure budget.
    pub rollout: Rollout,
    /// The slot groups' limits, and whether they go in turn.
    pub groups: GroupRules,
}

impl Settings {
    /// The number of slots: the concurrency set, or the default one.
    pub fn slots(&self) -> u32 {
        self.concurrency
            .unwrap_or(rota_core::schedule::DEFAULT_CONCURRENCY)
    }
}

/// One change of the fleet's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setting {
    Concurrency(u32),
    /// Pauses the fleet, since the store's now; a second pause replaces the reason.
    Pause {
        reason: String,
    },
    /// Lifts the pause, if any, and starts a new rollout.
    Resume,
    /// The rollout's batches and failure budget.
    Rollout(Rollout),
    /// The slot groups' rules.
    Groups(GroupRules),
}

impl Setting {
    /// How far the change moves `Store::changes`: more slots, or a pause lifted, may let every
    /// waiter go on.
    pub(crate) fn wakes(&self) -> u64 {
        match self {
            // A rollout's new batches may widen it.
            Setting::Concurrency(_)
            | Setting::Resume
            | Setting::Rollout(_)
            | Setting::Groups(_) => crate::WAKE_ALL,
            Setting::Pause { .. } => 0,
        }
    }
}

/// Who writes a node's record.
#[derive(Clone, Copy, Debug)]
pub enum Writer<'a> {
    /// The node's agent, fenced by its session.
    Agent(&'a Session),
    /// The node's agent right before anything disruptive: the write and the fence's proof (see
    /// [`Store::fence`](crate::Store::fence)), extending the session by the duration.
    Fenced(&'a Session, std::time::Duration),
    /// An operator, without a session; the node must be known.
    Operator(&'a NodeName),
}

impl<'a> Writer<'a> {
    pub fn node(&self) -> &'a NodeName {
        match self {
            Writer::Agent(session) | Writer::Fenced(session, _) => &session.node,
            Writer::Operator(node) => node,
        }
    }

    pub fn session(&self) -> Option<&'a Session> {
        match self {
            Writer::Agent(session) | Writer::Fenced(session, _) => Some(session),
            Writer::Operator(_) => None,
        }
    }
}

/// What a write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The node's row after the write.
    pub record: NodeRecord,
    /// The request the write was about, after it: the one it added or the one that stands for
    /// its process (a request added), the one it completed. `None` for the other writes.
    pub request: Option<RequestRecord>,
    /// Whether the write changed anything (a repeated block reason, a cancel with nothing
    /// pending, or a request already open change nothing).
    pub changed: bool,
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
    /// [`Store::changes`](crate::Store::changes) must happen before the node can be
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

    /// A pause as [`Pause::encode`] stored it.
    pub fn decode(value: &str) -> serde_json::Result<Pause> {
        serde_json::from_str(value)
    }
}

/// The stored rollout (`rota_meta.rollout`, `rota-config.data.rollout`); none is the default.
pub fn rollout_setting(value: Option<&str>) -> crate::Result<Rollout> {
    Ok(decode_setting("rollout", value, str::parse::<Rollout>)?.unwrap_or_default())
}

/// The stored slot groups' rules (`rota_meta.groups`, `rota-config.data.groups`); none is the
/// default: no group limit.
pub fn groups_setting(value: Option<&str>) -> crate::Result<GroupRules> {
    Ok(decode_setting("groups", value, str::parse::<GroupRules>)?.unwrap_or_default())
}

/// Reads one value of the store's key-value settings with `read` (a pause is JSON, the time
/// of the last resume decimal milliseconds); a missing or empty value means none.
pub fn decode_setting<T, E: std::fmt::Display>(
    column: &'static str,
    value: Option<&str>,
    read: impl FnOnce(&str) -> Result<T, E>,
) -> crate::Result<Option<T>> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    read(value).map(Some).map_err(|e| crate::Error::Corrupt {
        column,
        value: value.to_string(),
        reason: e.to_string(),
    })
}
