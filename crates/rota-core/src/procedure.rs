//! Maintenance procedures (MOPs, docs/design.md §2 and §5): what a procedure is, which nodes it
//! applies to, and whether a script is the one its author pinned.
//!
//! The serialized form (camelCase JSON) is the one stored by the SQL stores and the `spec` of
//! the Kubernetes `Procedure` resource, so every store reads back what any other wrote.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};

use crate::backoff::BackoffPolicy;
use crate::names::{NodeName, Process};
use crate::priority::Priority;

/// A procedure that is not valid; the message names the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid procedure {name:?}: {field} {problem}")]
pub struct ProcedureError {
    pub name: String,
    pub field: &'static str,
    pub problem: String,
}

/// Where a procedure's script comes from, in Kubernetes: one key of a ConfigMap in the rota
/// namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapKey {
    pub name: String,
    pub key: String,
}

/// The backoff after a failed run, as written by people: `{initial: "1m", maximum: "1h",
/// exponent: 2}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackoffSpec {
    #[serde(with = "human_duration")]
    pub initial: Duration,
    #[serde(with = "human_duration")]
    pub maximum: Duration,
    pub exponent: f64,
}

impl Default for BackoffSpec {
    fn default() -> Self {
        BackoffSpec::from(BackoffPolicy::DEFAULT)
    }
}

impl From<BackoffPolicy> for BackoffSpec {
    fn from(policy: BackoffPolicy) -> Self {
        BackoffSpec {
            initial: policy.initial,
            maximum: policy.maximum,
            exponent: policy.exponent,
        }
    }
}

impl From<&BackoffSpec> for BackoffPolicy {
    fn from(spec: &BackoffSpec) -> Self {
        BackoffPolicy {
            initial: spec.initial,
            maximum: spec.maximum,
            exponent: spec.exponent,
        }
    }
}

/// The default time a script may run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// A maintenance procedure: a script, its priority, the nodes it applies to, and what the node
/// needs around it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcedureSpec {
    /// A DNS-1123 label; the procedure's process is `mop/<name>`.
    pub name: String,
    #[serde(default)]
    pub priority: Priority,
    /// The script itself (run with `sh -s`)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// ...or, in Kubernetes, where to find it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_config_map: Option<ConfigMapKey>,
    /// The sha256 of the script, lowercase hex: a script with another checksum is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Node labels that must all match (in Kubernetes, the Node's labels).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Node names the procedure is limited to; empty means every node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeName>,
    /// Drain the node before the script runs.
    #[serde(default = "yes")]
    pub drain: bool,
    /// Reboot the node once after the window's procedures.
    #[serde(default)]
    pub reboot: bool,
    #[serde(default = "default_timeout", with = "human_duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub backoff: BackoffSpec,
    /// Never run beside another script on the node.
    #[serde(default)]
    pub exclusive: bool,
    /// May run again after an attempt that an agent restart interrupted.
    #[serde(default)]
    pub retry: bool,
}

fn yes() -> bool {
    true
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

impl ProcedureSpec {
    /// A procedure with the defaults of docs/design.md: priority 99, drain, no reboot.
    pub fn new(name: impl Into<String>, script: impl Into<String>) -> ProcedureSpec {
        ProcedureSpec {
            name: name.into(),
            priority: Priority::DEFAULT,
            script: Some(script.into()),
            script_config_map: None,
            sha256: None,
            node_selector: BTreeMap::new(),
            nodes: Vec::new(),
            drain: true,
            reboot: false,
            timeout: DEFAULT_TIMEOUT,
            backoff: BackoffSpec::default(),
            exclusive: false,
            retry: false,
        }
    }

    fn error(&self, field: &'static str, problem: impl Into<String>) -> ProcedureError {
        ProcedureError {
            name: self.name.clone(),
            field,
            problem: problem.into(),
        }
    }

    /// Reads a procedure from `stored` (its JSON, or any serde form), naming the field a refusal
    /// is about (`backoff.initial: invalid duration "soon"…`), which serde's own message does
    /// not: a hand-edited or newer procedure then says what to fix.
    pub fn read<'de, D: Deserializer<'de>>(stored: D) -> Result<ProcedureSpec, String> {
        serde_path_to_error::deserialize(stored).map_err(|e| match e.path().to_string() {
            path if path == "." => e.inner().to_string(),
            path => format!("{path}: {}", e.inner()),
        })
    }

    /// Checks what serde cannot: the name, exactly one script source, the pin's form, the
    /// timeout.
    pub fn validate(&self) -> Result<(), ProcedureError> {
        Process::mop(&self.name).map_err(|_| {
            self.error(
                "name",
                "must be a DNS-1123 label: lowercase letters, digits and '-', starting and \
                 ending with a letter or digit, at most 63 characters",
            )
        })?;
        match (&self.script, &self.script_config_map) {
            (Some(_), Some(_)) => {
                return Err(self.error(
                    "script",
                    "and scriptConfigMap are both set; give exactly one of them",
                ));
            }
            (None, None) => {
                return Err(self.error("script", "is missing; give script or scriptConfigMap"));
            }
            _ => {}
        }
        if let Some(pin) = &self.sha256
            && !(pin.len() == 64
                && pin
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        {
            return Err(self.error(
                "sha256",
                format!("{pin:?} is not a sha256: expected 64 lowercase hex digits"),
            ));
        }
        if self.timeout.is_zero() {
            return Err(self.error("timeout", "must be longer than 0s"));
        }
        Ok(())
    }

    /// The procedure's process, `mop/<name>`.
    pub fn process(&self) -> Result<Process, ProcedureError> {
        Process::mop(&self.name).map_err(|_| self.error("name", "is not a DNS-1123 label"))
    }

    /// Whether the procedure applies to `node`, whose labels are `labels`.
    pub fn matches(&self, node: &NodeName, labels: &BTreeMap<String, String>) -> bool {
        (self.nodes.is_empty() || self.nodes.contains(node))
            && self
                .node_selector
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value))
    }

    /// Whether the node must be drained for this procedure: a reboot always needs one.
    pub fn needs_drain(&self) -> bool {
        self.drain || self.reboot
    }

    /// Checks `script` against the pin, if any; the error says both checksums.
    pub fn check_pin(&self, script: &str) -> Result<(), ProcedureError> {
        let Some(pin) = &self.sha256 else {
            return Ok(());
        };
        let actual = sha256_hex(script);
        if &actual == pin {
            Ok(())
        } else {
            Err(self.error(
                "sha256",
                format!(
                    "is pinned to {pin} but the script's sha256 is {actual}; refusing to run it"
                ),
            ))
        }
    }
}

/// The lowercase hex sha256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// Durations as people write them ("90s", "30m", "1h 30m").
mod human_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*duration).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            de::Error::custom(format!(
                "invalid duration {text:?}: {e} (expected e.g. 90s, 30m or 1h)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeName {
        NodeName::new(name).expect("node name")
    }

    #[test]
    fn defaults_follow_the_design() {
        let spec: ProcedureSpec =
            serde_json::from_str(r#"{"name":"kernel","script":"true"}"#).expect("parse");
        assert_eq!(spec, ProcedureSpec::new("kernel", "true"));
        assert_eq!(spec.priority, Priority::DEFAULT);
        assert!(spec.drain && !spec.reboot && !spec.exclusive && !spec.retry);
        spec.validate().expect("valid");
    }

    #[test]
    fn round_trips_through_json() {
        let mut spec = ProcedureSpec::new("firmware", "echo hi");
        spec.priority = Priority::new(5).expect("priority");
        spec.timeout = Duration::from_secs(90);
        spec.nodes = vec![node("n1")];
        spec.node_selector.insert("zone".into(), "a".into());
        spec.sha256 = Some(sha256_hex("echo hi"));
        let json = serde_json::to_string(&spec).expect("serialize");
        assert!(json.contains(r#""timeout":"1m 30s""#), "{json}");
        assert!(json.contains(r#""priority":"05""#), "{json}");
        let back: ProcedureSpec = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, spec);
    }

    #[test]
    fn bad_priorities_name_the_value_and_the_range() {
        for bad in [r#""100""#, r#""ab""#, r#""-1""#, "100", "-1"] {
            let json = format!(r#"{{"name":"x","script":"true","priority":{bad}}}"#);
            let err = serde_json::from_str::<ProcedureSpec>(&json)
                .expect_err(bad)
                .to_string();
            assert!(err.contains("expected 00..99"), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_fields_and_bad_durations_are_refused() {
        let err = serde_json::from_str::<ProcedureSpec>(r#"{"name":"x","script":"","drian":true}"#)
            .expect_err("typo");
        assert!(err.to_string().contains("drian"), "{err}");
        let err =
            serde_json::from_str::<ProcedureSpec>(r#"{"name":"x","script":"","timeout":"soon"}"#)
                .expect_err("duration");
        assert!(
            err.to_string().contains(r#"invalid duration "soon""#),
            "{err}"
        );
    }

    #[test]
    fn validation_names_the_field() {
        let mut spec = ProcedureSpec::new("Bad_Name", "true");
        let err = spec.validate().expect_err("name").to_string();
        assert!(err.contains("name must be a DNS-1123 label"), "{err}");
        spec.name = "ok".into();
        spec.script_config_map = Some(ConfigMapKey {
            name: "cm".into(),
            key: "run.sh".into(),
        });
        assert!(spec.validate().expect_err("both").field == "script");
        spec.script = None;
        spec.validate().expect("config map only");
        spec.script_config_map = None;
        assert!(spec.validate().expect_err("none").field == "script");
        spec.script = Some("true".into());
        spec.sha256 = Some("ABC".into());
        let err = spec.validate().expect_err("pin").to_string();
        assert!(err.contains("\"ABC\" is not a sha256"), "{err}");
        spec.sha256 = None;
        spec.timeout = Duration::ZERO;
        assert_eq!(spec.validate().expect_err("timeout").field, "timeout");
    }

    #[test]
    fn selector_needs_every_label_and_a_listed_name() {
        let mut spec = ProcedureSpec::new("p", "true");
        let mut labels = BTreeMap::new();
        assert!(spec.matches(&node("a"), &labels));
        spec.node_selector.insert("pool".into(), "gpu".into());
        assert!(!spec.matches(&node("a"), &labels));
        labels.insert("pool".into(), "gpu".into());
        assert!(spec.matches(&node("a"), &labels));
        spec.nodes = vec![node("b")];
        assert!(!spec.matches(&node("a"), &labels));
        assert!(spec.matches(&node("b"), &labels));
    }

    #[test]
    fn the_pin_refuses_another_script() {
        let mut spec = ProcedureSpec::new("p", "echo one");
        spec.sha256 = Some(sha256_hex("echo one"));
        spec.check_pin("echo one").expect("same script");
        let err = spec.check_pin("echo two").expect_err("changed").to_string();
        assert!(err.contains("refusing to run it"), "{err}");
        assert!(err.contains(&sha256_hex("echo two")), "{err}");
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_reboot_needs_a_drain() {
        let mut spec = ProcedureSpec::new("p", "true");
        spec.drain = false;
        assert!(!spec.needs_drain());
        spec.reboot = true;
        assert!(spec.needs_drain());
    }
}
