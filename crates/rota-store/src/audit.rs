//! The operators' audit trail: who ran which operator command, on what, when and why. Each
//! store keeps these audit records beside the history, written once and never changed, and
//! `rota history` shows them among the history's entries.

use std::fmt;
use std::str::FromStr;

use rota_core::{NodeName, Process};
use serde::{Deserialize, Serialize};

use crate::model::Millis;

/// The operator command an audit record is of. Named apart from the node actions (cordon,
/// drain, reboot) so that "action" keeps one meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperatorCommand {
    /// `rota unlock`: a node's slot given back and its window canceled.
    Unlock,
    /// `rota retry`: a failed node's work tried again.
    Retry,
    /// `rota request`: work asked of a node.
    Request,
    /// `rota cancel`: a pending request withdrawn.
    Cancel,
    /// `rota pause`: the fleet paused.
    Pause,
    /// `rota resume`: the fleet resumed.
    Resume,
    /// `rota mop submit`: a procedure submitted.
    Submit,
}

impl OperatorCommand {
    pub const ALL: [OperatorCommand; 7] = [
        OperatorCommand::Unlock,
        OperatorCommand::Retry,
        OperatorCommand::Request,
        OperatorCommand::Cancel,
        OperatorCommand::Pause,
        OperatorCommand::Resume,
        OperatorCommand::Submit,
    ];

    /// The lowercase name used in storage and output.
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorCommand::Unlock => "unlock",
            OperatorCommand::Retry => "retry",
            OperatorCommand::Request => "request",
            OperatorCommand::Cancel => "cancel",
            OperatorCommand::Pause => "pause",
            OperatorCommand::Resume => "resume",
            OperatorCommand::Submit => "submit",
        }
    }
}

impl fmt::Display for OperatorCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A command name that is none of [`OperatorCommand::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown operator command {0:?}: expected one of unlock, retry, request, cancel, pause, resume, submit"
)]
pub struct UnknownCommand(pub String);

impl FromStr for OperatorCommand {
    type Err = UnknownCommand;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OperatorCommand::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCommand(s.to_owned()))
    }
}

/// An audit record to write: the store adds its time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditRecord {
    pub command: OperatorCommand,
    /// The node the command was run on; `None` for the fleet (pause, resume, a procedure's
    /// submission).
    pub node: Option<NodeName>,
    /// The process the command was about, where there is one (a request, a cancel, a submitted
    /// procedure).
    pub process: Option<Process>,
    /// Who: the API user in Kubernetes, `user@host` on the SQL stores.
    pub by: String,
    /// Why, as the operator gave it.
    pub reason: Option<String>,
}

/// An operator command, as the audit trail recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    pub at: Millis,
    pub command: OperatorCommand,
    pub node: Option<NodeName>,
    pub process: Option<Process>,
    pub by: String,
    pub reason: Option<String>,
}
