//! The `Procedure` custom resource (docs/design.md §7): one cluster-scoped object per
//! maintenance procedure, named after it. Its spec is `rota_core::ProcedureSpec`'s JSON without
//! `name` (the object's name is the procedure's name), so the Kubernetes store and the SQL
//! stores read and write one form; its status counts the nodes by where the procedure stands on
//! them.
//!
//! The spec's schema is written here by hand rather than derived, because the API server must
//! refuse what `ProcedureSpec` would refuse, with messages as clear as rota's own: a priority
//! outside 00..99 names the value and the range (a CEL rule with a message expression), exactly
//! one of `script` and `scriptConfigMap` is set, the name is a DNS-1123 label, and the spec never
//! changes after creation. A test keeps the schema's fields equal to `ProcedureSpec`'s.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, ValidationRule,
};
use kube::CustomResource;
use kube::CustomResourceExt;
use rota_core::{Priority, ProcedureSpec};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::crd::Timestamp;

/// The spec of a `Procedure`: `ProcedureSpec`'s fields except `name`, kept as the JSON the API
/// server holds (its defaults filled in) and parsed with [`ProcedureBody::to_spec`].
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "rota.dev",
    version = "v1alpha1",
    kind = "Procedure",
    plural = "procedures",
    shortname = "mop",
    status = "ProcedureStatus",
    printcolumn = r#"{"name":"Priority","type":"string","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Drain","type":"boolean","jsonPath":".spec.drain"}"#,
    printcolumn = r#"{"name":"Reboot","type":"boolean","jsonPath":".spec.reboot"}"#,
    printcolumn = r#"{"name":"Matching","type":"integer","jsonPath":".status.matching"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.pending"}"#,
    printcolumn = r#"{"name":"Running","type":"integer","jsonPath":".status.running"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"integer","jsonPath":".status.succeeded"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.failed"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ProcedureBody {
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// A spec that does not parse as a procedure; says which object and why.
#[derive(Debug, thiserror::Error)]
#[error("procedure {name}: {reason}")]
pub struct BodyError {
    pub name: String,
    pub reason: String,
}

impl ProcedureBody {
    /// The body of `spec`: its JSON without the name.
    pub fn of(spec: &ProcedureSpec) -> ProcedureBody {
        let mut fields = match serde_json::to_value(spec) {
            Ok(Value::Object(fields)) => fields,
            // A struct of plain fields always serialises to an object.
            _ => Map::new(),
        };
        fields.remove("name");
        ProcedureBody { fields }
    }

    /// The procedure named `name` with this body.
    pub fn to_spec(&self, name: &str) -> Result<ProcedureSpec, BodyError> {
        let mut fields = self.fields.clone();
        fields.insert("name".into(), Value::String(name.into()));
        ProcedureSpec::read(Value::Object(fields)).map_err(|reason| BodyError {
            name: name.into(),
            reason,
        })
    }
}

/// Where the procedure stands on one node.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NodeProcedureState {
    /// Requested; waits for the node's maintenance window.
    Pending,
    /// Its node's window is open and it has not ended yet.
    Running,
    Succeeded,
    /// Its last attempt failed: the node keeps its slot until an operator retries or unlocks.
    Failed,
    /// An operator's unlock canceled it; it does not run again on that node.
    Canceled,
}

/// One node's entry in a procedure's status.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeProcedureStatus {
    pub state: NodeProcedureState,
    /// When the state was recorded.
    pub since: Timestamp,
    /// The failure's cause, while failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The node's RotaNode `resourceVersion` this entry was read from: an entry from an older
    /// version never replaces one from a newer (a deposed scheduler's late write loses).
    pub observed_version: u64,
}

/// A condition of a procedure, in the usual Kubernetes form.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProcedureCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: Timestamp,
}

/// How far the procedure got on each node, written by the leading scheduler alone (see
/// `procedure_status` in rota-scheduler) from the RotaNodes.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProcedureStatus {
    /// How many Nodes the selector and node list match, when last counted.
    #[serde(default)]
    pub matching: u32,
    #[serde(default)]
    pub pending: u32,
    #[serde(default)]
    pub running: u32,
    #[serde(default)]
    pub succeeded: u32,
    #[serde(default)]
    pub failed: u32,
    #[serde(default)]
    pub canceled: u32,
    /// Per node (by node name): where the procedure stands there.
    #[serde(default)]
    pub nodes: BTreeMap<String, NodeProcedureStatus>,
    /// `Complete`: every matching node has run the procedure successfully.
    #[serde(default)]
    pub conditions: Vec<ProcedureCondition>,
}

/// The message of the priority rule: names the value and the range, as rota's own parser does.
const PRIORITY_MESSAGE: &str = "'invalid priority ' + (type(self) == string ? '\"' + self + '\"' : string(self)) + ': expected 00..99 (two digits, or an integer 0..99; lower is more important)'";
/// A DNS-1123 label, as `rota_core::Process::mop` requires of the name.
const LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
const DURATION_PATTERN: &str = "^ *([0-9]+ *[a-zµ]+ *)+$";
/// A node name, as `rota_core::NodeName` accepts it.
const NODE_PATTERN: &str = "^[A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?$";

/// Every spelling of a priority `Priority::from_str` accepts: "0".."9" and "00".."99".
fn priority_strings() -> Vec<String> {
    (0..=9)
        .map(|v| v.to_string())
        .chain((0..=Priority::MAX_VALUE).map(|v| format!("{v:02}")))
        .collect()
}

/// The rule for `spec.priority`, an int-or-string. It compares against the list of allowed
/// strings instead of a regular expression so that its cost does not grow with the length of
/// a (bad) value.
fn priority_rule() -> String {
    let allowed = priority_strings()
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "type(self) == int ? (self >= 0 && self <= {}) : (type(self) == string && self in [{allowed}])",
        Priority::MAX_VALUE
    )
}

fn duration_schema(description: &str, default: Option<&str>) -> Value {
    let mut schema = serde_json::json!({
        "type": "string",
        "pattern": DURATION_PATTERN,
        "description": description,
    });
    if let Some(default) = default {
        schema["default"] = Value::String(default.into());
    }
    schema
}

impl JsonSchema for ProcedureBody {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ProcedureBody".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "description": "A maintenance procedure (MOP): a script with a priority, the nodes it applies to, and whether a node needs a drain and a reboot around it. Immutable: submit a change under a new name.",
            "properties": {
                "priority": {
                    "x-kubernetes-int-or-string": true,
                    "default": "99",
                    "description": "00..99 (two digits, or an integer 0..99): the lower the value, the more important the procedure. Default 99.",
                    "x-kubernetes-validations": [{
                        "rule": priority_rule(),
                        "messageExpression": PRIORITY_MESSAGE,
                        "reason": "FieldValueInvalid",
                    }],
                },
                "script": {
                    "type": "string",
                    "description": "The script itself, run on the host with `sh -s`.",
                },
                "scriptConfigMap": {
                    "type": "object",
                    "description": "Where the script is instead: one key of a ConfigMap in rota's namespace.",
                    "required": ["name", "key"],
                    "properties": {
                        "name": { "type": "string", "minLength": 1 },
                        "key": { "type": "string", "minLength": 1 },
                    },
                },
                "sha256": {
                    "type": "string",
                    "pattern": "^[0-9a-f]{64}$",
                    "description": "The script's sha256 (64 lowercase hex digits): a node refuses to run a script with another checksum.",
                },
                "nodeSelector": {
                    "type": "object",
                    "additionalProperties": { "type": "string" },
                    "description": "Node labels that must all match.",
                },
                "nodes": {
                    "type": "array",
                    "items": { "type": "string", "maxLength": 253, "pattern": NODE_PATTERN },
                    "description": "Node names the procedure is limited to; empty means every node.",
                },
                "drain": {
                    "type": "boolean",
                    "default": true,
                    "description": "Drain the node before the script runs (default true).",
                },
                "reboot": {
                    "type": "boolean",
                    "default": false,
                    "description": "Reboot the node once after its window's procedures.",
                },
                "timeout": duration_schema("How long the script may run, e.g. 30m or 1h (default 1h).", Some("1h")),
                "backoff": {
                    "type": "object",
                    "description": "The backoff after a failed run: first `initial`, then min(maximum, previous × exponent).",
                    "required": ["initial", "maximum", "exponent"],
                    "properties": {
                        "initial": duration_schema("e.g. 1m", None),
                        "maximum": duration_schema("e.g. 1h", None),
                        "exponent": { "type": "number" },
                    },
                },
                "exclusive": {
                    "type": "boolean",
                    "description": "Never run beside another script on the node.",
                },
                "retry": {
                    "type": "boolean",
                    "description": "May run again after an attempt that an agent restart interrupted.",
                },
            },
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.script) != has(self.scriptConfigMap)",
                    "message": "give exactly one of script and scriptConfigMap",
                },
                {
                    "rule": "self == oldSelf",
                    "message": "a procedure is immutable: submit the change under a new name",
                },
            ],
        })
    }
}

/// The CustomResourceDefinition as installed: kube's derived one, with a rule on the object's
/// name (the procedure's process is `mop/<name>`, so the name must be a DNS-1123 label), and
/// without the `nullable` that kube's schema conversion puts on the int-or-string priority (a
/// null priority would be kept instead of defaulted, and no store could read it).
pub fn procedure_crd() -> CustomResourceDefinition {
    let mut crd = Procedure::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            add_name_rule(schema);
            if let Some(priority) = schema
                .properties
                .as_mut()
                .and_then(|p| p.get_mut("spec"))
                .and_then(|spec| spec.properties.as_mut())
                .and_then(|p| p.get_mut("priority"))
            {
                priority.nullable = None;
            }
        }
    }
    crd
}

fn add_name_rule(schema: &mut JSONSchemaProps) {
    schema
        .x_kubernetes_validations
        .get_or_insert_with(Vec::new)
        .push(ValidationRule {
            rule: format!(
                "size(self.metadata.name) <= 63 && self.metadata.name.matches('{LABEL_PATTERN}')"
            ),
            message_expression: Some(
                "'invalid procedure name \"' + self.metadata.name + '\": must be a DNS-1123 label (lowercase letters, digits and \\'-\\', at most 63 characters)'".into(),
            ),
            ..ValidationRule::default()
        });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rota_core::{ConfigMapKey, NodeName, sha256_hex};

    use super::*;

    fn full_spec() -> ProcedureSpec {
        let mut spec = ProcedureSpec::new("firmware", "echo hi");
        spec.priority = Priority::new(5).expect("priority");
        spec.sha256 = Some(sha256_hex("echo hi"));
        spec.node_selector.insert("pool".into(), "gpu".into());
        spec.nodes = vec![NodeName::new("n1").expect("node")];
        spec.reboot = true;
        spec.timeout = Duration::from_secs(90);
        spec.exclusive = true;
        spec.retry = true;
        spec
    }

    #[test]
    fn a_spec_survives_the_body_without_its_name() {
        let spec = full_spec();
        let body = ProcedureBody::of(&spec);
        assert!(!body.fields.contains_key("name"));
        assert_eq!(body.fields["priority"], "05");
        assert_eq!(body.to_spec("firmware").expect("parse"), spec);
        let err = ProcedureBody {
            fields: serde_json::from_str(r#"{"script":"x","priority":"100"}"#).expect("json"),
        }
        .to_spec("bad")
        .expect_err("refused");
        assert!(err.to_string().contains("expected 00..99"), "{err}");
    }

    /// A new field of `ProcedureSpec` must be added to the schema (else the API server drops
    /// it), and the schema must not promise a field that `ProcedureSpec` refuses.
    #[test]
    fn the_schema_has_exactly_the_fields_of_the_spec() {
        let mut spec = full_spec();
        spec.script_config_map = Some(ConfigMapKey {
            name: "cm".into(),
            key: "k".into(),
        });
        let mut fields: Vec<String> = ProcedureBody::of(&spec).fields.keys().cloned().collect();
        fields.sort();
        let schema = ProcedureBody::json_schema(&mut SchemaGenerator::default());
        let mut properties: Vec<String> = schema
            .get("properties")
            .and_then(Value::as_object)
            .expect("properties")
            .keys()
            .cloned()
            .collect();
        properties.sort();
        assert_eq!(properties, fields);
    }

    #[test]
    fn the_priority_rule_lists_every_accepted_spelling_and_nothing_else() {
        let allowed = priority_strings();
        assert_eq!(allowed.len(), 110);
        for s in &allowed {
            s.parse::<Priority>().expect(s);
        }
        for bad in ["100", "-1", "ab", "", "+1", " 1"] {
            assert!(!allowed.iter().any(|s| s == bad), "{bad}");
            assert!(bad.parse::<Priority>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_crd_checks_the_name_and_has_useful_columns() {
        let crd = procedure_crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
        let root = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema");
        let rules = root.x_kubernetes_validations.as_ref().expect("rules");
        assert!(rules[0].rule.contains("self.metadata.name"));
        let priority = &root.properties.as_ref().expect("properties")["spec"]
            .properties
            .as_ref()
            .expect("spec properties")["priority"];
        assert_eq!(priority.nullable, None, "a null priority is not a priority");
        assert_eq!(priority.x_kubernetes_int_or_string, Some(true));
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "Priority",
                "Drain",
                "Reboot",
                "Matching",
                "Pending",
                "Running",
                "Succeeded",
                "Failed",
                "Age"
            ]
        );
    }
}
