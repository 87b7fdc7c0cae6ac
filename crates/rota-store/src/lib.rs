//! rota's state: the [`Store`] trait, the embedded SQLite store, the PostgreSQL store for
//! bare-metal fleets, and the conformance suite that every store must pass (docs/design.md §7).
//!
//! - `store`: the [`Store`] trait, what a store must do, and [`StoreExt`], what every caller
//!   derives from it.
//! - `audit`: the operators' audit trail ([`AuditRecord`]).
//! - `model`: the records a store reads and writes, and the changes an agent asks for.
//! - `error`: the store's [`Error`], fencing and conflicts among them.
//! - `url`: [`StoreUrl`], which names a store and opens it.
//! - `sqlite`: [`SqliteStore`], one file shared by every agent on a host.
//! - `postgres`: [`PostgresStore`], one database shared by every host's agent.
//! - `rows`: how the rows of both SQL stores map to the model.
//! - `sql`: the statements both SQL stores make alike: reads, writes, sessions, settings;
//!   `queue`, a node's look at the queue; `history`, reads of the past.
//! - `retry_pauses`: [`RetryPauses`], the waits before asking an unavailable store again.
//! - `conformance`: the suite every store must pass, behind the feature `conformance`.

mod audit;
mod budget;
mod error;
pub mod forecast;
mod history;
mod model;
mod postgres;
mod queue;
mod retry_pauses;
mod rows;
mod sql;
mod sqlite;
mod store;
mod url;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use audit::{AuditRecord, NewAuditRecord, OperatorCommand, UnknownCommand};
pub use budget::BudgetCheck;
pub use error::{Error, Result};
pub use model::{
    Acquire, BackoffRecord, Blocked, Fleet, History, HistoryEntry, HistoryFilter, Millis,
    NodeFields, NodeOverview, NodeRecord, Outcome, Part, Pause, ProcedureRecord, RequestRecord,
    RequestState, Session, Setting, Settings, SlotHolder, StepRecord, Transition, WindowChange,
    Writer, Written, decode_setting, groups_setting, instant_at, millis_of, now_millis,
    rollout_setting,
};
pub use postgres::PostgresStore;
pub use retry_pauses::{FIRST_RETRY_PAUSE, LONGEST_RETRY_PAUSE, RetryPauses, retry_pauses};
pub use sqlite::SqliteStore;
pub use store::{Store, StoreExt, WAKE_ALL};
pub use url::StoreUrl;
