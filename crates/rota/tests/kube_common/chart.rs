//! The chart `charts/rota` installed as `helm template … | kubectl apply -f -` installs it, with
//! the helm and kubectl of `testenv/build`, for the tests of what it grants: the node-scoped
//! policy and the roles for people.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use rota_e2e::testenv::{Scope, TestEnv, run, tool, wait_for};
use serde_json::{Value, json};

use super::PATIENCE;

/// One installation of the chart: release `<scope id>`, so that its cluster-scoped objects
/// (the ClusterRoles, the policy) are its own, in namespace `<scope id>-sys`, with its agents'
/// DaemonSet and its scheduler's Deployment kept to the scope's nodes (kwok runs their pods;
/// nothing runs in them).
pub struct Chart {
    /// Holds the rendered manifest and the values.
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    release: String,
    namespace: String,
}

impl Chart {
    /// Renders the chart with `values` over the test's own and applies it, with the CRDs
    /// (`helm template` renders those only with `--include-crds`).
    pub async fn install(env: &TestEnv, scope: &Scope, values: Value) -> Result<Chart> {
        rota_e2e::fleet::install_crd(scope.client()).await?;
        let release = scope.id().to_owned();
        let namespace = format!("{release}-sys");
        let dir = tempfile::tempdir()?;
        let own = json!({ "namespace": { "name": namespace }, "nodeSelector": scope.labels() });
        let mut helm = Command::new(tool("helm")?);
        helm.arg("template")
            .arg(&release)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/rota"));
        for (name, values) in [("own.json", own), ("values.json", values)] {
            let path = dir.path().join(name);
            std::fs::write(&path, values.to_string())?;
            helm.arg("--values").arg(path);
        }
        std::fs::write(dir.path().join("manifest.yaml"), run(&mut helm)?)?;
        let chart = Chart {
            dir,
            kubeconfig: env.kubeconfig().to_owned(),
            release,
            namespace,
        };
        chart.kubectl(&["apply"])?;
        Ok(chart)
    }

    /// `kubectl <args> -f <the manifest>` as the admin.
    fn kubectl(&self, args: &[&str]) -> Result<String> {
        run(Command::new(tool("kubectl")?)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .arg("-f")
            .arg(self.dir.path().join("manifest.yaml")))
    }

    /// The namespace of the slot Leases, `rota-config` and the agents' ServiceAccount.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The name of the ValidatingAdmissionPolicy that scopes each agent to its node (and of
    /// its binding).
    pub fn policy(&self) -> String {
        format!("{}-agent-node-scoped", self.release)
    }

    /// The name of the ValidatingAdmissionPolicy that keeps the operators' audit trail honest.
    pub fn audit_policy(&self) -> String {
        format!("{}-audit-trail", self.release)
    }

    /// The ServiceAccount of rota's scheduler (`rota scheduler`), in [`Chart::namespace`].
    pub fn scheduler_account(&self) -> String {
        format!("{}-scheduler", self.release)
    }

    /// The ServiceAccount of rota's FleetLock server (`rota fleetlock`), in
    /// [`Chart::namespace`], with `fleetlock.enabled`.
    pub fn fleetlock_account(&self) -> String {
        format!("{}-fleetlock", self.release)
    }

    /// The ValidatingAdmissionPolicy that holds the FleetLock server to its hosts (and its
    /// binding).
    pub fn fleetlock_policy(&self) -> String {
        format!("{}-fleetlock-scoped", self.release)
    }

    /// The agents' DaemonSet pod on `node`, once the Kubernetes scheduler has bound it there:
    /// of this release's pods, an agent's (component `agent`), not one of the replicas of
    /// rota's scheduler (component `scheduler`), which land on the same nodes.
    pub async fn agent_pod_on(&self, admin: &Client, node: &str) -> Result<Pod> {
        let pods: Api<Pod> = Api::namespaced(admin.clone(), &self.namespace);
        let selector = format!(
            "app.kubernetes.io/instance={},app.kubernetes.io/component=agent",
            self.release
        );
        wait_for(&format!("the agent's pod on {node}"), PATIENCE, || async {
            let list = pods.list(&ListParams::default().labels(&selector)).await?;
            Ok(list
                .items
                .into_iter()
                .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)))
        })
        .await
    }

    /// Deletes what the chart made, without waiting for it to go.
    pub fn uninstall(self) -> Result<()> {
        self.kubectl(&["delete", "--wait=false", "--ignore-not-found"])
            .map(drop)
    }
}
