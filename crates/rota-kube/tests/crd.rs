//! Keeps `charts/rota/crds/rotanodes.yaml` the CRD generated from the Rust type. After
//! changing the type, regenerate it with `ROTA_UPDATE_CRDS=1 cargo test -p rota-kube --test crd`.

use std::path::Path;

use rota_kube::rota_node_crd;

const HEADER: &str = "# Generated from crates/rota-kube/src/crd.rs; do not edit.\n\
# Regenerate: ROTA_UPDATE_CRDS=1 cargo test -p rota-kube --test crd\n";

fn generated() -> String {
    let yaml = serde_saphyr::to_string(&rota_node_crd()).expect("the CRD renders as YAML");
    format!("{HEADER}{yaml}")
}

#[test]
fn the_committed_crd_is_generated_from_the_type() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/rota/crds/rotanodes.yaml");
    let expected = generated();
    if std::env::var("ROTA_UPDATE_CRDS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &expected).expect("write the CRD");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{} is stale: regenerate it with ROTA_UPDATE_CRDS=1 cargo test -p rota-kube --test crd",
        path.display()
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
        ["State", "Slot", "Process", "Since", "Last Result"]
    );
}

#[test]
fn the_state_is_an_enum_of_the_lifecycle_states() {
    let yaml = generated();
    assert!(
        yaml.contains("- idle") && yaml.contains("- rebooting") && yaml.contains("- failed"),
        "{yaml}"
    );
}
