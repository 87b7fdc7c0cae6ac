//! rota's state: the [`Store`] trait, the embedded SQLite store, the PostgreSQL store for
//! bare-metal fleets, and the conformance suite that every store must pass (design.md §7).

mod error;
mod model;
mod postgres;
mod retry_pauses;
mod rows;
mod sqlite;
mod store;
mod url;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use error::{Error, Result};
pub use model::{
    Acquire, BackoffRecord, Blocked, HistoryEntry, HistoryFilter, Millis, NodeFields, NodeRecord,
    Outcome, Pause, ProcedureRecord, RequestRecord, RequestState, Session, SlotHolder, Transition,
    WindowChange, decode_resumed_at, now_millis,
};
pub use postgres::PostgresStore;
pub use retry_pauses::{FIRST_RETRY_PAUSE, LONGEST_RETRY_PAUSE, RetryPauses};
pub use sqlite::SqliteStore;
pub use store::{Store, WAKE_ALL};
pub use url::StoreUrl;
