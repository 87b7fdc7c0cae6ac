//! The chart `charts/rota` ships the Grafana dashboard as Grafana's dashboard sidecar loads
//! it: with `dashboards.enabled`, a ConfigMap holding `dashboards/rota.json` and the sidecar's
//! label; without it, none. Rendered by the real helm that `testenv/build` builds.

use anyhow::{Context as _, Result, ensure};
use rota_e2e::chart;
use serde_json::{Value, json};

/// The rendered objects that Grafana's sidecar would load: ConfigMaps labelled `key: value`.
fn sidecar_configmaps<'a>(objects: &'a [Value], key: &str, value: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| o["kind"] == "ConfigMap" && o["metadata"]["labels"][key] == value)
        .collect()
}

fn dashboard_file() -> Result<Value> {
    let path = chart::dir().join("dashboards/rota.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

#[test]
fn the_chart_ships_the_dashboard_configmap_only_when_enabled() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let default = chart::objects(&[])?;
    ensure!(
        default.iter().any(|o| o["kind"] == "DaemonSet"),
        "the default rendering has no DaemonSet: {default:?}"
    );
    let dashboards: Vec<&Value> = default
        .iter()
        .filter(|o| {
            o["metadata"]["labels"]["app.kubernetes.io/component"] == "dashboard"
                || o["metadata"]["labels"]["grafana_dashboard"].is_string()
        })
        .collect();
    ensure!(
        dashboards.is_empty(),
        "a dashboard without dashboards.enabled: {dashboards:?}"
    );

    let enabled = chart::objects(&["dashboards.enabled=true"])?;
    let found = sidecar_configmaps(&enabled, "grafana_dashboard", "1");
    let [configmap] = found.as_slice() else {
        anyhow::bail!("not one ConfigMap labelled grafana_dashboard: \"1\": {found:?}");
    };
    ensure!(
        configmap["metadata"]["namespace"] == "rota-system",
        "the dashboard goes to the chart's namespace by default: {configmap}"
    );
    let data = configmap["data"]["rota.json"]
        .as_str()
        .context("no rota.json in the ConfigMap's data")?;
    let shipped: Value = serde_json::from_str(data).context("the shipped rota.json")?;
    ensure!(
        shipped == dashboard_file()?,
        "the ConfigMap holds another dashboard than charts/rota/dashboards/rota.json"
    );
    Ok(())
}

#[test]
fn the_dashboards_label_namespace_and_annotations_are_configurable() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let annotations = json!({"grafana_folder": "Maintenance"});
    let objects = chart::objects(&[
        "dashboards.enabled=true",
        "dashboards.label=\"example.com/dashboard\"",
        "dashboards.labelValue=\"rota\"",
        "dashboards.namespace=\"monitoring\"",
        &format!("dashboards.annotations={annotations}"),
    ])?;
    ensure!(
        sidecar_configmaps(&objects, "grafana_dashboard", "1").is_empty(),
        "the default label with another one configured"
    );
    let found = sidecar_configmaps(&objects, "example.com/dashboard", "rota");
    let [configmap] = found.as_slice() else {
        anyhow::bail!("not one ConfigMap labelled example.com/dashboard: rota: {found:?}");
    };
    ensure!(
        configmap["metadata"]["namespace"] == "monitoring",
        "{configmap}"
    );
    ensure!(
        configmap["metadata"]["annotations"] == annotations,
        "{configmap}"
    );
    Ok(())
}

#[test]
fn bad_dashboards_values_fail_helm_template_with_a_clear_message() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let cases = [
        (
            "dashboards.enabled=\"yes\"",
            "at '/dashboards/enabled': got string, want boolean",
        ),
        (
            "dashboards.labelValue=1",
            "at '/dashboards/labelValue': got number, want string",
        ),
        ("dashboards.label=\"bad key\"", "at '/dashboards/label'"),
        (
            "dashboards.namespace=\"Monitoring\"",
            "at '/dashboards/namespace'",
        ),
        (
            "dashboards.folder=\"rota\"",
            "at '/dashboards': additional properties 'folder' not allowed",
        ),
    ];
    chart::ensure_rejected(&cases)
}
