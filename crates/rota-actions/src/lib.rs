//! What an agent does to its node (docs/design.md §9): the [`NodeActions`] trait the agent acts
//! through, the command-line actions of a standalone host, running a command, the reboot. The
//! agent decides *when*; this crate, and the platforms' own node actions (`rota-kube-actions`,
//! the simulator's stand-ins), decide *how*.
//!
//! - `actions`: [`NodeActions`], how the agent acts on its node, [`RebootHandle`], and
//!   [`CommandActions`], shell commands for a standalone host;
//! - `commands`: [`run_command`] and [`spawn_reboot`], how a node action runs a shell command
//!   (for [`CommandActions`] and a cluster's node actions alike);
//! - `reboot`: [`Reboot`], how the reboot starts: a command, or systemd's reboot signal
//!   ([`SYSTEMD_REBOOT_SIGNAL`]);
//! - `error`: [`ActionError`], the crate's error type: a node action that did not succeed.

mod actions;
mod commands;
mod error;
mod reboot;

pub use actions::{CommandActions, NodeActions, RebootHandle};
pub use commands::{run_command, spawn_reboot};
pub use error::ActionError;
pub use reboot::{Reboot, SYSTEMD_REBOOT_SIGNAL};
