//! The `RotaAuditRecord` custom resource: the operators' audit trail in Kubernetes. One object
//! per operator command, in rota's namespace, created once and never changed. Agents neither
//! watch nor read them, so the trail costs the fleet nothing; `rota history` lists them.
//!
//! Who ran the command is the API user the API server authenticated (a `SelfSubjectReview`),
//! and the chart's policy refuses an object whose `spec.by` is not its creator, so nobody
//! records a command in another's name.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::CustomResourceExt;
use rota_core::{NodeName, Process};
use rota_store::{AuditRecord, Error, NewAuditRecord, OperatorCommand, Result};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::crd::Timestamp;

/// One operator command, as the audit trail records it.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "rota.dev",
    version = "v1alpha1",
    kind = "RotaAuditRecord",
    plural = "rotaauditrecords",
    namespaced,
    printcolumn = r#"{"name":"At","type":"date","jsonPath":".spec.at"}"#,
    printcolumn = r#"{"name":"Command","type":"string","jsonPath":".spec.command"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Process","type":"string","jsonPath":".spec.process"}"#,
    printcolumn = r#"{"name":"By","type":"string","jsonPath":".spec.by"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".spec.reason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RotaAuditRecordSpec {
    pub at: Timestamp,
    #[schemars(schema_with = "command_schema")]
    pub command: String,
    /// The node the command was run on; absent for the fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// The API user who ran the command.
    #[schemars(length(min = 1))]
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn command_schema(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = OperatorCommand::ALL.iter().map(|c| c.as_str()).collect();
    json_schema!({ "type": "string", "enum": names })
}

/// The CustomResourceDefinition as installed.
pub fn rota_audit_record_crd() -> CustomResourceDefinition {
    RotaAuditRecord::crd()
}

/// The object that records `new` at `at`: named by the API server (`<command>-<random>`).
pub fn object(new: &NewAuditRecord, at: rota_store::Millis) -> RotaAuditRecord {
    let mut object = RotaAuditRecord::new(
        "",
        RotaAuditRecordSpec {
            at: Timestamp(at),
            command: new.command.as_str().to_owned(),
            node: new.node.as_ref().map(ToString::to_string),
            process: new.process.as_ref().map(ToString::to_string),
            by: new.by.clone(),
            reason: new.reason.clone(),
        },
    );
    object.metadata.name = None;
    object.metadata.generate_name = Some(format!("{}-", new.command));
    object
}

/// The record an object holds; a field edited into nonsense is an error naming the object and
/// the field.
pub fn record(object: &RotaAuditRecord) -> Result<AuditRecord> {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let corrupt = |field: &str, value: &str, reason: String| Error::Corrupt {
        column: "rotaauditrecords.rota.dev",
        value: value.to_owned(),
        reason: format!("RotaAuditRecord {name}: {field}: {reason}"),
    };
    let spec = &object.spec;
    let command: OperatorCommand =
        spec.command
            .parse()
            .map_err(|e: rota_store::UnknownCommand| {
                corrupt("spec.command", &spec.command, e.to_string())
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
    Ok(AuditRecord {
        at: spec.at.0,
        command,
        node,
        process,
        by: spec.by.clone(),
        reason: spec.reason.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_record() -> NewAuditRecord {
        NewAuditRecord {
            command: OperatorCommand::Unlock,
            node: Some("node-3".parse().expect("a node name")),
            process: None,
            by: "alice".into(),
            reason: Some("replaced the disk".into()),
        }
    }

    #[test]
    fn a_record_reads_back_from_its_object() {
        let object = object(&new_record(), 1_714_557_600_000);
        assert_eq!(object.metadata.generate_name.as_deref(), Some("unlock-"));
        let read = record(&object).expect("reads");
        let new = new_record();
        let written = AuditRecord {
            at: 1_714_557_600_000,
            command: new.command,
            node: new.node,
            process: new.process,
            by: new.by,
            reason: new.reason,
        };
        assert_eq!(read, written);
    }

    #[test]
    fn an_object_edited_into_nonsense_is_refused_naming_its_field() {
        let mut object = object(&new_record(), 0);
        object.metadata.name = Some("unlock-x1".into());
        object.spec.process = Some("dance".into());
        let message = record(&object).expect_err("a bad process").to_string();
        assert!(
            message.contains("RotaAuditRecord unlock-x1: spec.process")
                && message.contains("dance"),
            "{message}"
        );
        object.spec.process = None;
        object.spec.command = "reboot".into();
        let message = record(&object).expect_err("a bad command").to_string();
        assert!(
            message.contains("spec.command") && message.contains("\"reboot\""),
            "{message}"
        );
    }
}
