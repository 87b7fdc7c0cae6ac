//! Validated names from the vocabulary of docs/design.md §2: nodes, processes and history events.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A name that failed validation; the message names the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not a valid node name.
    #[error(
        "invalid node name {value:?}: expected 1..253 characters of A-Z a-z 0-9 . _ -, starting and ending with a letter or digit"
    )]
    Node {
        /// The rejected value.
        value: String,
    },
    /// Not a valid process.
    #[error(
        "invalid process {value:?}: expected reboot, maintenance or mop/<name>, where <name> is 1..63 characters of a-z 0-9 -, starting and ending with a letter or digit"
    )]
    Process {
        /// The rejected value.
        value: String,
    },
    /// Not a valid history event.
    #[error(
        "invalid history event {value:?}: expected started, finished, failed, canceled, released or postponed"
    )]
    HistoryEvent {
        /// The rejected value.
        value: String,
    },
}

/// The name of a node, as Kubernetes names it (or its hostname outside Kubernetes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeName(String);

impl NodeName {
    /// The longest allowed name (a DNS subdomain).
    pub const MAX_LEN: usize = 253;

    /// Validates a node name: 1..=253 characters of `[A-Za-z0-9._-]`, starting and ending with
    /// a letter or digit.
    pub fn new(name: impl Into<String>) -> Result<NodeName, NameError> {
        let name = name.into();
        let bytes = name.as_bytes();
        let valid = match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                bytes.len() <= Self::MAX_LEN
                    && first.is_ascii_alphanumeric()
                    && last.is_ascii_alphanumeric()
                    && bytes
                        .iter()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            }
            _ => false,
        };
        if valid {
            Ok(NodeName(name))
        } else {
            Err(NameError::Node { value: name })
        }
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for NodeName {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeName::new(s)
    }
}

impl TryFrom<String> for NodeName {
    type Error = NameError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        NodeName::new(value)
    }
}

impl From<NodeName> for String {
    fn from(name: NodeName) -> String {
        name.0
    }
}

impl AsRef<str> for NodeName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The kind of work (docs/design.md §2); each process has its own backoff policy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Process {
    /// A reboot, requested by a sentinel file, a procedure or an operator.
    Reboot,
    /// The kustodian file protocol (`/var/maintenance-required`).
    Maintenance,
    /// A named maintenance procedure; the name is a DNS-1123 label.
    Mop(String),
    /// A reboot a FleetLock client (Fedora CoreOS's Zincati) asked `rota fleetlock` for: the
    /// host reboots itself once its lock is granted.
    FleetLock,
}

/// Whether `name` is a DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn is_dns1123_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let lower_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= 63
                && lower_alnum(first)
                && lower_alnum(last)
                && bytes.iter().all(|b| lower_alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

impl Process {
    /// A procedure process, validating that `name` is a DNS-1123 label.
    pub fn mop(name: impl Into<String>) -> Result<Process, NameError> {
        let name = name.into();
        if is_dns1123_label(&name) {
            Ok(Process::Mop(name))
        } else {
            Err(NameError::Process {
                value: format!("mop/{name}"),
            })
        }
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Reboot => f.write_str("reboot"),
            Process::Maintenance => f.write_str("maintenance"),
            Process::Mop(name) => write!(f, "mop/{name}"),
            Process::FleetLock => f.write_str("fleetlock"),
        }
    }
}

impl FromStr for Process {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "reboot" => Ok(Process::Reboot),
            "maintenance" => Ok(Process::Maintenance),
            "fleetlock" => Ok(Process::FleetLock),
            _ => match s.strip_prefix("mop/") {
                Some(name) if is_dns1123_label(name) => Ok(Process::Mop(name.to_owned())),
                _ => Err(NameError::Process {
                    value: s.to_owned(),
                }),
            },
        }
    }
}

impl TryFrom<String> for Process {
    type Error = NameError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<Process> for String {
    fn from(process: Process) -> String {
        process.to_string()
    }
}

/// One entry kind of the append-only history (docs/design.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryEvent {
    /// Work began.
    Started,
    /// Work ended successfully.
    Finished,
    /// Work failed (the store keeps the cause beside it).
    Failed,
    /// Work was abandoned: the request was withdrawn or an operator unlocked the node.
    Canceled,
    /// A window closed successfully with none of its requests left open (each procedure
    /// already has its own `finished`): the slot went back.
    Released,
    /// The maintenance hours ended before the node could drain, run its next procedure or
    /// reboot: the request waits for the hours to start again (the cause says why), the slot went back, nothing failed.
    Postponed,
}

impl HistoryEvent {
    /// Every history event, in lifecycle order.
    pub const ALL: [HistoryEvent; 6] = [
        HistoryEvent::Started,
        HistoryEvent::Finished,
        HistoryEvent::Failed,
        HistoryEvent::Canceled,
        HistoryEvent::Released,
        HistoryEvent::Postponed,
    ];

    /// The lowercase name used in storage and output.
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryEvent::Started => "started",
            HistoryEvent::Finished => "finished",
            HistoryEvent::Failed => "failed",
            HistoryEvent::Canceled => "canceled",
            HistoryEvent::Released => "released",
            HistoryEvent::Postponed => "postponed",
        }
    }
}

impl fmt::Display for HistoryEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HistoryEvent {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HistoryEvent::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| NameError::HistoryEvent {
                value: s.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn node_names() {
        for good in ["a", "node-1", "Node_1.example.com", "0", &"a".repeat(253)] {
            assert_eq!(
                NodeName::new(good).map(|n| n.to_string()),
                Ok(good.to_owned())
            );
        }
        for bad in [
            "",
            "-a",
            "a-",
            ".a",
            "a.",
            "a b",
            "a/b",
            "ä",
            &"a".repeat(254),
        ] {
            assert_eq!(
                NodeName::new(bad),
                Err(NameError::Node {
                    value: bad.to_owned()
                })
            );
        }
    }

    #[test]
    fn node_name_serde_validates() -> Result<(), serde_json::Error> {
        let name: NodeName = serde_json::from_str("\"worker-1\"")?;
        assert_eq!(name.as_str(), "worker-1");
        assert_eq!(serde_json::to_string(&name)?, "\"worker-1\"");
        let err = serde_json::from_str::<NodeName>("\"-bad\"").expect_err("invalid");
        assert!(
            err.to_string().contains("invalid node name \"-bad\""),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn processes() {
        for (input, process) in [
            ("reboot", Process::Reboot),
            ("maintenance", Process::Maintenance),
            (
                "mop/kernel-update",
                Process::Mop("kernel-update".to_owned()),
            ),
            ("mop/a", Process::Mop("a".to_owned())),
        ] {
            assert_eq!(input.parse::<Process>(), Ok(process.clone()));
            assert_eq!(process.to_string(), input);
        }
        let long = format!("mop/{}", "a".repeat(64));
        for bad in [
            "", "Reboot", "mop/", "mop", "mop/A", "mop/-a", "mop/a-", "mop/a_b", "mop/a/b", &long,
        ] {
            assert_eq!(
                bad.parse::<Process>(),
                Err(NameError::Process {
                    value: bad.to_owned()
                })
            );
        }
        assert_eq!(Process::mop("x-1"), Ok(Process::Mop("x-1".to_owned())));
        assert!(Process::mop("X").is_err());
    }

    #[test]
    fn process_serde() -> Result<(), serde_json::Error> {
        let p = Process::Mop("fw".to_owned());
        assert_eq!(serde_json::to_string(&p)?, "\"mop/fw\"");
        assert_eq!(serde_json::from_str::<Process>("\"mop/fw\"")?, p);
        assert!(serde_json::from_str::<Process>("\"mop/FW\"").is_err());
        Ok(())
    }

    #[test]
    fn history_events() -> Result<(), serde_json::Error> {
        for event in HistoryEvent::ALL {
            assert_eq!(event.to_string().parse::<HistoryEvent>(), Ok(event));
            assert_eq!(
                serde_json::to_string(&event)?,
                format!("\"{}\"", event.as_str())
            );
        }
        assert_eq!(HistoryEvent::Canceled.to_string(), "canceled");
        assert!("Started".parse::<HistoryEvent>().is_err());
        assert!("cancelled".parse::<HistoryEvent>().is_err());
        Ok(())
    }

    proptest! {
        #[test]
        fn valid_mop_names_round_trip(name in "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?") {
            let process = Process::Mop(name);
            prop_assert_eq!(process.to_string().parse::<Process>(), Ok(process));
        }

        #[test]
        fn node_name_parse_never_panics(s in "\\PC{0,8}") {
            if let Ok(name) = s.parse::<NodeName>() {
                prop_assert_eq!(name.as_str(), s.as_str());
            }
        }
    }
}
