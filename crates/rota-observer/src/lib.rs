//! What an agent tells those who watch it (metrics, notifications) without knowing who
//! (docs/design.md §9): the agent, and whoever watches it, depend on this crate and not on each
//! other, so the agent stays free of HTTP and of any metrics or webhook library, and its
//! watchers free of the agent.
//!
//! - `observer`: [`AgentObserver`], the calls the agent makes as it works, with what they carry:
//!   [`StoreWrite`], a write the agent sends to its store, and [`WorkOutcome`], how one
//!   request's work ended.
//!
//! Nothing here fails, so the crate has no error type.

mod observer;

pub use observer::{AgentObserver, StoreWrite, WorkOutcome};
