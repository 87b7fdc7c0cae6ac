//! rota's per-node agent (design.md §3): it watches the node's sentinels, queues requests,
//! waits for a slot, drains, runs the maintenance (kustodian's file protocol, a reboot),
//! verifies, and hands the slot on, persisting every step so that a restart continues it.

mod actions;
mod agent;
mod blockers;
mod config;
mod error;
mod observer;
mod procedures;
mod reboot_marker;
mod sentinel_command;

pub use actions::{CommandActions, NodeActions, RebootHandle};
pub use agent::{Agent, read_boot_id};
pub use blockers::{Block, BlockKind, Blocker};
pub use config::{
    AgentConfig, BLOCKER_INTERVAL, DEFAULT_BOOT_ID_FILE, DEFAULT_REBOOT_SENTINELS,
    DEFAULT_STATE_DIR, DRAIN_TIMEOUT, HEALTH_INTERVAL, MAINTENANCE_IN_PROGRESS,
    MAINTENANCE_REQUIRED, MARKER_DIR, PROCEDURE_POLL, REBOOT_TIMEOUT, RELEASE_DELAY,
    SAFETY_RECHECK, SENTINEL_COMMAND_INTERVAL, SESSION_TTL, STORE_POLL, VERIFY_TIMEOUT,
};
pub use error::{ActionError, Error, Result};
pub use observer::{AgentObserver, WorkOutcome};
pub use sentinel_command::SentinelCommand;
