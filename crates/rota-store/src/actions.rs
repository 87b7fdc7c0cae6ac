//! The operators' audit trail: who did which operator action, to what, when and why. Each
//! store keeps these records beside the history, written once and never changed, and
//! `rota history` shows them among the history's entries.

use std::fmt;
use std::str::FromStr;

use rota_core::{NodeName, Process};
use serde::{Deserialize, Serialize};

use crate::model::{HistoryFilter, Millis};

/// An operator's action, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
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

impl Action {
    pub const ALL: [Action; 7] = [
        Action::Unlock,
        Action::Retry,
        Action::Request,
        Action::Cancel,
        Action::Pause,
        Action::Resume,
        Action::Submit,
    ];

    /// The lowercase name used in storage and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Unlock => "unlock",
            Action::Retry => "retry",
            Action::Request => "request",
            Action::Cancel => "cancel",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Submit => "submit",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An action name that is none of [`Action::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown operator action {0:?}: expected one of unlock, retry, request, cancel, pause, resume, submit"
)]
pub struct UnknownAction(pub String);

impl FromStr for Action {
    type Err = UnknownAction;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownAction(s.to_owned()))
    }
}

/// An action to record: the store adds its time and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAction {
    pub action: Action,
    /// The node acted on; `None` for the fleet (pause, resume, a procedure's submission).
    pub node: Option<NodeName>,
    /// The process acted on, where there is one (a request, a cancel, a submitted procedure).
    pub process: Option<Process>,
    /// Who: the API user in Kubernetes, `user@host` on the SQL stores.
    pub by: String,
    /// Why, as the operator gave it.
    pub reason: Option<String>,
}

/// A recorded operator action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionRecord {
    pub at: Millis,
    pub action: Action,
    pub node: Option<NodeName>,
    pub process: Option<Process>,
    pub by: String,
    pub reason: Option<String>,
}

impl ActionRecord {
    pub fn new(at: Millis, action: &NewAction) -> ActionRecord {
        ActionRecord {
            at,
            action: action.action,
            node: action.node.clone(),
            process: action.process.clone(),
            by: action.by.clone(),
            reason: action.reason.clone(),
        }
    }

    /// Whether a history filter lets this record through: its node and process filters match
    /// only actions on that node or process, and an event filter (history events only) none.
    pub fn matches(&self, filter: &HistoryFilter) -> bool {
        filter.event.is_none()
            && filter
                .node
                .as_ref()
                .is_none_or(|n| self.node.as_ref() == Some(n))
            && filter
                .process
                .as_ref()
                .is_none_or(|p| self.process.as_ref() == Some(p))
            && filter.since.is_none_or(|since| self.at >= since)
            && filter.until.is_none_or(|until| self.at <= until)
    }
}

/// Who runs this process, as the SQL stores record an operator: the OS user and the host.
pub fn os_actor() -> String {
    let user = whoami::fallible::username().unwrap_or_else(|_| "unknown-user".to_owned());
    let host = whoami::fallible::hostname().unwrap_or_else(|_| "unknown-host".to_owned());
    format!("{user}@{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_read_back_and_nonsense_is_refused_by_name() {
        for action in Action::ALL {
            assert_eq!(action.as_str().parse::<Action>(), Ok(action));
        }
        let message = "reboot"
            .parse::<Action>()
            .expect_err("not an action")
            .to_string();
        assert!(
            message.contains("\"reboot\"") && message.contains("unlock, retry"),
            "{message}"
        );
    }

    #[test]
    fn the_os_actor_names_a_user_and_a_host() {
        let actor = os_actor();
        let (user, host) = actor.split_once('@').expect("user@host");
        assert!(!user.is_empty() && !host.is_empty(), "{actor}");
    }
}
