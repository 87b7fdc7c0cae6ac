//! rota's per-node agent (docs/design.md §3): it watches the node's sentinels, queues
//! requests, waits for a slot, drains, runs the maintenance (kustodian's file protocol, a
//! reboot), verifies, and hands the slot on, persisting every state it enters so that a restart
//! continues it. It acts on its node through `rota_actions::NodeActions` and tells whoever watches it
//! through `rota_observer::AgentObserver`.
//!
//! - `agent`: the loop. `agent/mod.rs` holds [`Agent`] and one incarnation's state;
//!   `agent/states/` has one handler module per lifecycle state; beside them the session, the wait, the one `commit`,
//!   request syncing, blockers, kustodian's protocol, procedures (`mops`), maintenance hours and
//!   the failure budget;
//! - `config`: [`AgentConfig`] and the defaults that the command line shows and uses;
//! - `crash_points`: where the tests' `ROTA_CRASH_AT` may abort the agent (feature `failpoints`);
//! - `procedures`: running procedure scripts so that a run outlives the agent that started it;
//! - `reboot_marker`: the host's record that this boot's reboot command ran;
//! - `sentinel_command`: kured's `--reboot-sentinel-command` as one more sentinel file;
//! - `window_marker`: the host's record that its node is in its window, which spares an agent
//!   coming back in it the start's jitter;
//! - `error`: the crate's error type.

mod agent;
mod config;
mod crash_points;
mod error;
mod procedures;
mod reboot_marker;
mod sentinel_command;
mod window_marker;

pub use agent::{Agent, read_boot_id};
pub use config::{
    AgentConfig, BLOCKER_INTERVAL, DEFAULT_BOOT_ID_FILE, DEFAULT_REBOOT_SENTINELS,
    DEFAULT_STATE_DIR, DRAIN_DELAY, DRAIN_TIMEOUT, HEALTH_INTERVAL, IDLE_SESSION_TTL,
    MAINTENANCE_IN_PROGRESS, MAINTENANCE_REQUIRED, MARKER_DIR, PROCEDURE_POLL, REBOOT_DELAY,
    REBOOT_TIMEOUT, RELEASE_DELAY, SAFETY_RECHECK, SENTINEL_COMMAND_INTERVAL, SESSION_TTL,
    START_JITTER, STORE_POLL, VERIFY_TIMEOUT,
};
pub use error::{Error, Result};
pub use sentinel_command::SentinelCommand;
pub use window_marker::WindowMarker;
