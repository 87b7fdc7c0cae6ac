//! The pure core of rota: no I/O, no async, no clock reads (time is passed in as values).
//!
//! The vocabulary and rules come from the project's design guide (`docs/design.md`):
//! - [`priority`]: two-digit procedure priorities, lower is more important (§2, §5);
//! - [`names`]: node names, processes (`reboot`, `maintenance`, `mop/<name>`, `fleetlock`) and history
//!   events (§2);
//! - [`ordering`]: the per-node procedure priority rule (§5, invariant 5 of §4);
//! - [`procedure`]: maintenance procedures, their node selectors and checksum pins (§5);
//! - [`backoff`]: BMDB's exponential backoff formula (§6);
//! - [`labels`]: Kubernetes' rules for label keys and values;
//! - [`lifecycle`]: the node lifecycle state machine (§3);
//! - [`decision`]: what the core decides one lifecycle event makes happen besides the state:
//!   the window change, the uncordon, and whether it wakes waiting nodes (§3, §4);
//! - [`record`]: a node's record, and what every write does to it: requests, backoff,
//!   history, the slot given back (§3, §6);
//! - [`schedule`](mod@schedule): who takes a slot next, the queue's one rule (§3, §4);
//! - [`rollout`]: a rollout's batches, which widen as nodes finish healthy, and its failure
//!   budget (§3);
//! - [`groups`]: the slot groups' rules, one setting of the fleet;
//! - [`grants`]: what a Kubernetes scheduler does on its read of the fleet: the grants of
//!   `schedule`, and the Leases it takes back;
//! - [`plan`]: a forecast of the turns to come, the queue played forward by `schedule`;
//! - [`fleetlock`]: what a FleetLock client's `pre-reboot` and `steady-state` do to its node;
//! - [`hours`]: maintenance hours, the days and times of day in which disruptive work may
//!   start (§2).

pub mod backoff;
pub mod decision;
pub mod fleetlock;
pub mod grants;
pub mod groups;
pub mod hours;
pub mod labels;
pub mod lifecycle;
pub mod names;
pub mod ordering;
pub mod plan;
pub mod priority;
pub mod procedure;
pub mod record;
pub mod rollout;
pub mod schedule;

pub use backoff::BackoffPolicy;
pub use decision::{Decision, Millis, WindowChange, wakes};
pub use groups::{GroupLimitAboveConcurrency, GroupRules, GroupRulesError};
pub use hours::{Hours, HoursError, HoursProblem, MaintenanceHours};
pub use labels::{check_label_key, check_label_value};
pub use lifecycle::{
    Event, Failure, GRANT_UNUSED, Lifecycle, NodeState, NodeStateError, TransitionError,
};
pub use names::{HistoryEvent, NameError, NodeName, Process};
pub use ordering::{ProcedureEntry, may_start, startable};
pub use priority::{Priority, PriorityError};
pub use procedure::{BackoffSpec, ConfigMapKey, ProcedureError, ProcedureSpec, sha256_hex};
pub use record::{
    Applied, BackoffRecord, Blocked, Entry, NewRequest, NodeFields, NodeOverview, NodeRecord,
    Outcome, RecordError, RequestRecord, RequestState, Transition, Write, eligible_at,
    window_result,
};
pub use rollout::{
    Batches, BatchesError, FailureBudget, FailureBudgetError, Rollout, RolloutError,
};
pub use schedule::{Grant, Held, Limits, Schedule, Turn, Waiter, schedule};
