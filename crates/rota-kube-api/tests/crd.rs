//! Keeps `charts/rota/crds/*.yaml` the CRDs generated from the Rust types. After changing a
//! type, regenerate them with `ROTA_UPDATE_CRDS=1 cargo test -p rota-kube-api --test crd`.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use rota_kube_api::{procedure_crd, rota_audit_record_crd, rota_node_crd, rota_window_crd};

const HEADER: &str = "# Generated from crates/rota-kube-api/src/{source}; do not edit.\n\
# Regenerate: ROTA_UPDATE_CRDS=1 cargo test -p rota-kube-api --test crd\n";

fn generated(crd: &CustomResourceDefinition, source: &str) -> String {
    let yaml = serde_saphyr::to_string(crd).expect("the CRD renders as YAML");
    format!("{}{yaml}", HEADER.replace("{source}", source))
}

fn check(file: &str, expected: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/rota/crds")
        .join(file);
    if std::env::var("ROTA_UPDATE_CRDS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, expected).expect("write the CRD");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{} is stale: regenerate it with ROTA_UPDATE_CRDS=1 cargo test -p rota-kube-api --test crd",
        path.display()
    );
}

#[test]
fn the_committed_crds_are_generated_from_the_types() {
    check("rotanodes.yaml", &generated(&rota_node_crd(), "crd.rs"));
    check(
        "rotawindows.yaml",
        &generated(&rota_window_crd(), "window.rs"),
    );
    check(
        "procedures.yaml",
        &generated(&procedure_crd(), "procedure.rs"),
    );
    check(
        "rotaauditrecords.yaml",
        &generated(&rota_audit_record_crd(), "audit_record.rs"),
    );
}

#[test]
fn the_crd_is_cluster_scoped_without_status_subresource_and_has_printer_columns() {
    let crd = rota_node_crd();
    assert_eq!(crd.spec.scope, "Cluster");
    let version = &crd.spec.versions[0];
    assert!(version.subresources.is_none());
    let columns: Vec<_> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "State",
            "Grant",
            "Process",
            "Since",
            "Last Result",
            "Blocked"
        ]
    );
}

#[test]
fn the_state_is_an_enum_of_the_lifecycle_states() {
    let yaml = generated(&rota_node_crd(), "crd.rs");
    assert!(
        yaml.contains("- idle") && yaml.contains("- rebooting") && yaml.contains("- failed"),
        "{yaml}"
    );
}
