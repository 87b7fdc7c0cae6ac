//! The API server overloaded on purpose for `overload.rs`: a priority level that rejects the
//! agents' service account with 429 while a test's own requests hold its one seat, the API
//! server's count of what it rejected, and `rota agent` processes with a chart pod's token.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use rota_e2e::testenv::{Scope, TestEnv, wait_for};
use rota_e2e::tokens::pod_token;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::common::Agent;
use crate::kube_common::chart::Chart;
use crate::kube_common::{PATIENCE, ROTA};

/// The label of the ConfigMaps whose creation holds the overloaded priority level's one seat.
const HOLD_LABEL: &str = "rota.dev/test-hold-seat";

/// An API server priority level that serves one request at a time and rejects, with 429,
/// every other one (`nominalConcurrencyShares: 0` gives it no seat of its own, nothing to
/// borrow and no queue; the API server still lets one request in while none runs), with two
/// flow schemas: the agents' service account, and the test's `holder`, whose ConfigMap
/// creations each hold that one seat for up to 30 s while a validating webhook that never
/// answers times out. Holding it is what overloads the level: the agents find it busy.
pub(crate) struct Overload {
    admin: Client,
    name: String,
    holders: Vec<JoinHandle<()>>,
    granted: String,
}

impl Overload {
    pub(crate) async fn start(env: &TestEnv, scope: &Scope) -> Result<Overload> {
        let admin = scope.client();
        let name = format!("{}-overload", scope.id());
        // A webhook that never answers: a listener that accepts and says nothing.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = silent.local_addr()?.port();
        let silence = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = silent.accept().await {
                held.push(connection);
            }
        });
        let post = PostParams::default();
        let webhook: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": { "name": name },
            "webhooks": [{
                "name": "hold.rota.dev",
                "clientConfig": { "url": format!("https://127.0.0.1:{port}/") },
                "rules": [{
                    "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["configmaps"],
                }],
                "objectSelector": { "matchLabels": { HOLD_LABEL: scope.id() } },
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": 30,
                "admissionReviewVersions": ["v1"],
            }],
        }))?;
        Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .create(&post, &webhook)
            .await
            .context("creating the silent webhook")?;
        let level: PriorityLevelConfiguration = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "type": "Limited", "limited": {
                "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": { "type": "Reject" },
            }},
        }))?;
        Api::<PriorityLevelConfiguration>::all(admin.clone())
            .create(&post, &level)
            .await
            .context("creating the priority level")?;
        let holder = scope.service_account_client(env, "holder").await?;
        let granted = scope
            .grant("hold", "holder", "configmaps", &["create"])
            .await?;
        let holder_schema = flow_schema(
            &format!("{name}-holder"),
            "holder",
            scope.namespace(),
            &name,
        )?;
        Api::<FlowSchema>::all(admin.clone())
            .create(&post, &holder_schema)
            .await
            .context("creating the holder's flow schema")?;
        // Two holders: while one's creation holds the seat, the other's are refused, and it
        // takes the seat within a tenth of a second once the first lets it go.
        let holders = (0..2)
            .map(|_| {
                let api: Api<ConfigMap> = Api::namespaced(holder.clone(), scope.namespace());
                let labels = [(HOLD_LABEL.to_owned(), scope.id().to_owned())].into();
                tokio::spawn(async move {
                    let held = ConfigMap {
                        metadata: ObjectMeta {
                            generate_name: Some("hold-".into()),
                            labels: Some(labels),
                            ..Default::default()
                        },
                        ..Default::default()
                    };
                    loop {
                        if api.create(&PostParams::default(), &held).await.is_err() {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                })
            })
            .chain([silence])
            .collect();
        Ok(Overload {
            admin,
            name,
            holders,
            granted,
        })
    }

    /// The name of the agents' flow schema, as the API server's metrics label it.
    pub(crate) fn agents_schema(&self) -> String {
        format!("{}-agents", self.name)
    }

    /// The requests of the agents' service account the API server rejected, by its metrics.
    pub(crate) async fn rejected(&self) -> Result<u64> {
        flow_count(
            &self.admin,
            "apiserver_flowcontrol_rejected_requests_total",
            &self.agents_schema(),
        )
        .await
    }

    /// Puts the requests of the agents' service account (`rota-agent` in `namespace`) in the
    /// overloaded level, and waits until `probe`, a list with their credentials, is rejected.
    pub(crate) async fn impose(&self, namespace: &str, probe: &Api<ConfigMap>) -> Result<()> {
        let schema = flow_schema(&self.agents_schema(), "rota-agent", namespace, &self.name)?;
        Api::<FlowSchema>::all(self.admin.clone())
            .create(&PostParams::default(), &schema)
            .await
            .context("creating the agents' flow schema")?;
        wait_for("the agents' level to reject", PATIENCE, || async {
            Ok(match probe.list(&Default::default()).await {
                Err(kube::Error::Api(status)) if status.code == 429 => Some(()),
                _ => None,
            })
        })
        .await
    }

    /// Lets the agents' requests in again: their schema goes, and the API server's own
    /// schemas serve them.
    pub(crate) async fn lift(&self) -> Result<()> {
        Api::<FlowSchema>::all(self.admin.clone())
            .delete(&self.agents_schema(), &Default::default())
            .await?;
        Ok(())
    }

    /// Stops the holders and removes what [`Overload::start`] made.
    pub(crate) async fn end(self, scope: &Scope) -> Result<()> {
        for holder in &self.holders {
            holder.abort();
        }
        let gone = Default::default();
        Api::<FlowSchema>::all(self.admin.clone())
            .delete(&format!("{}-holder", self.name), &gone)
            .await?;
        Api::<PriorityLevelConfiguration>::all(self.admin.clone())
            .delete(&self.name, &gone)
            .await?;
        Api::<ValidatingWebhookConfiguration>::all(self.admin.clone())
            .delete(&self.name, &gone)
            .await?;
        scope.revoke(&self.granted).await
    }
}

/// The sum of the API server's counter `metric` over the flow schema `schema`, from its
/// `/metrics`.
pub(crate) async fn flow_count(admin: &Client, metric: &str, schema: &str) -> Result<u64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let metrics = admin.request_text(request).await?;
    let prefix = format!("{metric}{{");
    let schema = format!("flow_schema=\"{schema}\"");
    let mut count = 0.0;
    for line in metrics.lines() {
        if line.starts_with(&prefix) && line.contains(&schema) {
            let value = line.rsplit(' ').next().unwrap_or_default();
            count += value.parse::<f64>()?;
        }
    }
    Ok(count as u64)
}

/// A flow schema `name` for the service account `namespace/account`, served by the priority
/// level `level`.
pub(crate) fn flow_schema(
    name: &str,
    account: &str,
    namespace: &str,
    level: &str,
) -> Result<FlowSchema> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "matchingPrecedence": 100,
            "priorityLevelConfiguration": { "name": level },
            "distinguisherMethod": { "type": "ByUser" },
            "rules": [{
                "subjects": [{ "kind": "ServiceAccount",
                    "serviceAccount": { "name": account, "namespace": namespace } }],
                "resourceRules": [{ "verbs": ["*"], "apiGroups": ["*"],
                    "resources": ["*"], "clusterScope": true, "namespaces": ["*"] }],
                "nonResourceRules": [{ "verbs": ["*"], "nonResourceURLs": ["*"] }],
            }],
        },
    }))?)
}

/// A kubeconfig with the token of the chart's agent pod on `node`, as the kubelet mounts it.
pub(crate) async fn agent_kubeconfig(
    env: &TestEnv,
    chart: &Chart,
    node: &str,
) -> Result<tempfile::NamedTempFile> {
    let admin = env.client().await?;
    let pod = chart.agent_pod_on(&admin, node).await?;
    let token = pod_token(&admin, &pod).await?;
    let kubeconfig = tempfile::NamedTempFile::new()?;
    env.write_kubeconfig_with_token(&token, kubeconfig.path())?;
    Ok(kubeconfig)
}

/// A client with the credentials of `kubeconfig`, built as the agent builds its own: without
/// kube's retries, so that a 429 comes back as one.
pub(crate) async fn agent_client(env: &TestEnv, kubeconfig: &Path) -> Result<Client> {
    let mut config = env.config().await?;
    config.auth_info = kube::config::Kubeconfig::read_from(kubeconfig)?
        .auth_infos
        .into_iter()
        .find_map(|named| named.auth_info)
        .context("the agent's credentials")?;
    Ok(rota_kube_client::client(config)?)
}

/// A `rota agent` process in Kubernetes mode, with its pod's token, a host of files and its
/// JSON log.
pub(crate) struct KubeAgent {
    pub(crate) node: String,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) agent: Agent,
    pub(crate) started: Instant,
}

impl KubeAgent {
    /// Starts the agent of `node` with `kubeconfig` and `--start-jitter=<jitter>`.
    pub(crate) fn start(
        node: &str,
        kubeconfig: &Path,
        namespace: &str,
        jitter: &str,
    ) -> Result<KubeAgent> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("root/run"))?;
        std::fs::write(dir.path().join("boot_id"), "boot-1\n")?;
        let log = std::fs::File::create(dir.path().join("agent.log"))?;
        let child = Command::new(ROTA)
            .args([
                "agent",
                "--store=kube",
                "--node-actions=kube",
                "--reboot-command=true",
            ])
            .arg(format!("--start-jitter={jitter}"))
            .arg("--procedure-poll=5s")
            .arg("--log-format=json")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--namespace={namespace}"))
            .arg(format!("--node={node}"))
            .arg(format!("--host-root={}", dir.path().join("root").display()))
            .arg(format!(
                "--boot-id-file={}",
                dir.path().join("boot_id").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok(KubeAgent {
            node: node.to_owned(),
            dir,
            agent: Agent { child },
            started: Instant::now(),
        })
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.path().join("agent.log")
    }
}
