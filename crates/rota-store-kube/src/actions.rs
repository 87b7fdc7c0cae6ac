//! The `RotaAction` custom resource: the operators' audit trail in Kubernetes. One object per
//! operator action, in rota's namespace, created once and never changed. Agents neither watch
//! nor read them, so the trail costs the fleet nothing; `rota history` lists them.
//!
//! Who acted is the API user the API server authenticated (a `SelfSubjectReview`), and the
//! chart's policy refuses an object whose `spec.by` is not its creator, so nobody records an
//! action in another's name.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::CustomResourceExt;
use rota_core::{NodeName, Process};
use rota_store::{Action, ActionRecord, Error, NewAction, Result};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::crd::Timestamp;

/// One operator action.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "rota.dev",
    version = "v1alpha1",
    kind = "RotaAction",
    plural = "rotaactions",
    namespaced,
    printcolumn = r#"{"name":"At","type":"date","jsonPath":".spec.at"}"#,
    printcolumn = r#"{"name":"Action","type":"string","jsonPath":".spec.action"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Process","type":"string","jsonPath":".spec.process"}"#,
    printcolumn = r#"{"name":"By","type":"string","jsonPath":".spec.by"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".spec.reason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RotaActionSpec {
    pub at: Timestamp,
    #[schemars(schema_with = "action_schema")]
    pub action: String,
    /// The node acted on; absent for the fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// The API user who acted.
    #[schemars(length(min = 1))]
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn action_schema(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
    json_schema!({ "type": "string", "enum": names })
}

/// The CustomResourceDefinition as installed.
pub fn rota_action_crd() -> CustomResourceDefinition {
    RotaAction::crd()
}

/// The object that records `action` at `at`: named by the API server (`<action>-<random>`).
pub(crate) fn object(action: &NewAction, at: rota_store::Millis) -> RotaAction {
    let mut object = RotaAction::new(
        "",
        RotaActionSpec {
            at: Timestamp(at),
            action: action.action.as_str().to_owned(),
            node: action.node.as_ref().map(ToString::to_string),
            process: action.process.as_ref().map(ToString::to_string),
            by: action.by.clone(),
            reason: action.reason.clone(),
        },
    );
    object.metadata.name = None;
    object.metadata.generate_name = Some(format!("{}-", action.action));
    object
}

/// The record an object holds; a field edited into nonsense is an error naming the object and
/// the field.
pub(crate) fn record(object: &RotaAction) -> Result<ActionRecord> {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let corrupt = |field: &str, value: &str, reason: String| Error::Corrupt {
        column: "rotaactions.rota.dev",
        value: value.to_owned(),
        reason: format!("RotaAction {name}: {field}: {reason}"),
    };
    let spec = &object.spec;
    let action: Action = spec
        .action
        .parse()
        .map_err(|e: rota_store::UnknownAction| {
            corrupt("spec.action", &spec.action, e.to_string())
        })?;
    let node = spec
        .node
        .as_deref()
        .map(|n| {
            n.parse::<NodeName>()
                .map_err(|e| corrupt("spec.node", n, e.to_string()))
        })
        .transpose()?;
    let process = spec
        .process
        .as_deref()
        .map(|p| {
            p.parse::<Process>()
                .map_err(|e| corrupt("spec.process", p, e.to_string()))
        })
        .transpose()?;
    Ok(ActionRecord {
        at: spec.at.0,
        action,
        node,
        process,
        by: spec.by.clone(),
        reason: spec.reason.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_action() -> NewAction {
        NewAction {
            action: Action::Unlock,
            node: Some("node-3".parse().expect("a node name")),
            process: None,
            by: "alice".into(),
            reason: Some("replaced the disk".into()),
        }
    }

    #[test]
    fn an_action_reads_back_from_its_object() {
        let object = object(&new_action(), 1_714_557_600_000);
        assert_eq!(object.metadata.generate_name.as_deref(), Some("unlock-"));
        let read = record(&object).expect("reads");
        assert_eq!(read, ActionRecord::new(1_714_557_600_000, &new_action()));
    }

    #[test]
    fn an_object_edited_into_nonsense_is_refused_naming_its_field() {
        let mut object = object(&new_action(), 0);
        object.metadata.name = Some("unlock-x1".into());
        object.spec.process = Some("dance".into());
        let message = record(&object).expect_err("a bad process").to_string();
        assert!(
            message.contains("RotaAction unlock-x1: spec.process") && message.contains("dance"),
            "{message}"
        );
        object.spec.process = None;
        object.spec.action = "reboot".into();
        let message = record(&object).expect_err("a bad action").to_string();
        assert!(message.contains("spec.action"), "{message}");
    }
}
