//! Access to the real Kubernetes control plane of `testenv/`.
//!
//! [`TestEnv::get`] attaches to the environment named by `ROTA_TESTENV_KUBECONFIG` (what the
//! top-level test script does after `testenv/up`), or else runs `testenv/up` itself, once per
//! test process. An environment the helper started itself is stopped by a small watchdog
//! process that runs `testenv/down` as soon as the test process exits, however it exits; an
//! attached environment is left to whoever started it.
//!
//! Only `ROTA_E2E_SKIP=1` makes [`TestEnv::get`] return `None`, so that a test can skip; in every
//! other case a control plane that cannot be had is an error, and the test fails.
//!
//! Each test works in a [`Scope`]: its own namespace, and kwok nodes labelled with the scope id
//! so that tests sharing one control plane never schedule onto each other's nodes.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, Namespace, Node, NodeSpec, NodeStatus, Pod, PodSpec, PodTemplateSpec,
    ServiceAccount, Toleration, Volume,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Env var naming the kubeconfig of a running environment to attach to.
pub const KUBECONFIG_ENV: &str = "ROTA_TESTENV_KUBECONFIG";
/// Env var that, set to `1`, makes tests needing the control plane skip instead of running.
pub const SKIP_ENV: &str = "ROTA_E2E_SKIP";
/// Annotation that makes kwok manage a node (`testenv/up` starts kwok with this selector).
pub const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");
/// Label put on every node and pod that a [`Scope`] creates, with the scope id as value.
pub const SCOPE_LABEL: &str = "rota-e2e/scope";
/// Image of the pods that the helper creates; kwok never pulls it.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// A running control plane: where its kubeconfig is, and whether this process started it.
#[derive(Debug)]
pub struct TestEnv {
    kubeconfig: PathBuf,
    started_here: bool,
}

static SHARED: OnceLock<std::result::Result<TestEnv, String>> = OnceLock::new();

impl TestEnv {
    /// The environment for this test process: attached via `ROTA_TESTENV_KUBECONFIG`, or started
    /// with `testenv/up` on first use. `Ok(None)` only when `ROTA_E2E_SKIP=1`.
    ///
    /// This blocks while `testenv/up` runs (seconds when the binaries are built, many minutes
    /// on a cold Go build cache).
    pub fn get() -> Result<Option<&'static TestEnv>> {
        if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
            eprintln!("rota-e2e: {SKIP_ENV}=1, skipping a test that needs the control plane");
            return Ok(None);
        }
        match SHARED.get_or_init(|| Self::attach_or_start().map_err(|e| format!("{e:#}"))) {
            Ok(env) => Ok(Some(env)),
            Err(e) => Err(anyhow!("no Kubernetes test environment: {e}")),
        }
    }

    fn attach_or_start() -> Result<TestEnv> {
        if let Some(path) = std::env::var_os(KUBECONFIG_ENV).filter(|p| !p.is_empty()) {
            let kubeconfig = PathBuf::from(path);
            if !kubeconfig.is_file() {
                bail!(
                    "{KUBECONFIG_ENV}={} does not exist (is the environment up?)",
                    kubeconfig.display()
                );
            }
            return Ok(TestEnv {
                kubeconfig,
                started_here: false,
            });
        }
        eprintln!("rota-e2e: {KUBECONFIG_ENV} is not set");
        Self::start()
    }

    /// Starts a control plane with `testenv/up`, and the watchdog that stops it when this
    /// process exits.
    pub(crate) fn start() -> Result<TestEnv> {
        let up = testenv_dir().join("up");
        eprintln!("rota-e2e: starting a control plane with {}", up.display());
        let out = Command::new(&up)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", up.display()))?;
        if !out.status.success() {
            bail!("{} failed with {}", up.display(), out.status);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let kubeconfig = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| PathBuf::from(l.trim()))
            .with_context(|| format!("{} printed no kubeconfig path", up.display()))?;
        let run_dir = kubeconfig
            .parent()
            .context("kubeconfig path has no parent directory")?;
        spawn_reaper(run_dir)?;
        Ok(TestEnv {
            kubeconfig,
            started_here: true,
        })
    }

    /// Path of the admin kubeconfig (user in `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Whether this process started the environment (and will stop it when it exits).
    pub fn started_here(&self) -> bool {
        self.started_here
    }

    /// A new admin client. Make one per test: a client belongs to the Tokio runtime it was
    /// made on, and every `#[tokio::test]` has its own.
    ///
    /// kube's default retry of 429/503/504 is turned off, so a test sees exactly what the API
    /// server answered: with it on, an eviction refused by a PodDisruptionBudget (429) is retried
    /// with backoff for minutes instead of failing.
    pub async fn client(&self) -> Result<Client> {
        Client::try_from(self.config().await?).context("building the Kubernetes client")
    }

    /// The admin [`kube::Config`], with kube's default retry off (see [`TestEnv::client`]).
    pub async fn config(&self) -> Result<Config> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("loading the test kubeconfig")?;
        config.default_retry = false;
        Ok(config)
    }

    /// A fresh namespace and node label for one test; see [`Scope`].
    pub async fn scope(&self, name: &str) -> Result<Scope> {
        Scope::new(self.client().await?, name).await
    }

    /// A client acting as the existing service account `namespace/name`, with a token for an
    /// hour that `admin` asks for (kube's retry off, as for [`TestEnv::client`]).
    pub async fn client_as(&self, admin: &Client, namespace: &str, name: &str) -> Result<Client> {
        self.client_with_token(&token_for(admin, namespace, name).await?)
            .await
    }

    /// A client that presents `token` (kube's retry off, as for [`TestEnv::client`]).
    pub async fn client_with_token(&self, token: &str) -> Result<Client> {
        let mut config = self.config().await?;
        config.auth_info = serde_json::from_value(serde_json::json!({ "token": token }))?;
        Client::try_from(config).context("building the Kubernetes client")
    }

    /// Writes to `path` a kubeconfig for this control plane that acts as the existing service
    /// account `namespace/name` (a token for an hour that `admin` asks for), for a process.
    pub async fn write_kubeconfig_as(
        &self,
        admin: &Client,
        namespace: &str,
        name: &str,
        path: &Path,
    ) -> Result<()> {
        let token = token_for(admin, namespace, name).await?;
        self.write_kubeconfig_with_token(&token, path)
    }

    /// Writes to `path` a kubeconfig for this control plane that presents `token`.
    pub fn write_kubeconfig_with_token(&self, token: &str, path: &Path) -> Result<()> {
        let mut kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        for user in &mut kubeconfig.auth_infos {
            user.auth_info = Some(serde_json::from_value(
                serde_json::json!({ "token": token }),
            )?);
        }
        let text = serde_json::to_string(&kubeconfig).context("writing a kubeconfig")?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// A token for an hour for the service account `namespace/name`.
async fn token_for(admin: &Client, namespace: &str, name: &str) -> Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = serde_json::from_value(serde_json::json!({
        "spec": { "expirationSeconds": 3600 }
    }))?;
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("a token for the service account {namespace}/{name}"))?
        .status
        .and_then(|s| s.token)
        .context("a token request without a token")
}

/// Directory holding `up`, `down` and `build`: `ROTA_TESTENV_DIR`, or `testenv/` of this
/// repository.
pub fn testenv_dir() -> PathBuf {
    std::env::var_os("ROTA_TESTENV_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testenv"))
}

/// The path of a binary that `testenv/build` built (`helm`, `kubectl`).
pub fn tool(name: &str) -> Result<PathBuf> {
    let build = testenv_dir().join("build");
    let paths = run(Command::new(&build).arg("--paths"))?;
    paths
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")).map(PathBuf::from))
        .with_context(|| format!("{} --paths does not list {name}", build.display()))
}

/// Runs a command to its end; its stdout, or an error with its stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Starts a detached process that waits for this process to exit, then runs `testenv/down` on
/// the run directory. It outlives a panic, an abort or a SIGKILL of the test process.
fn spawn_reaper(run_dir: &Path) -> Result<()> {
    let down = testenv_dir().join("down");
    Command::new("setsid")
        .arg("bash")
        .arg("-c")
        .arg(r#"while kill -0 "$0" 2>/dev/null; do sleep 0.5; done; exec "$1" "$2""#)
        .arg(std::process::id().to_string())
        .arg(&down)
        .arg(run_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the testenv/down watchdog")?;
    Ok(())
}

/// One test's corner of the shared control plane: a namespace of its own, and the nodes it
/// creates, named `<scope id>-<name>` and labelled `rota-e2e/scope=<scope id>`.
pub struct Scope {
    client: Client,
    id: String,
}

impl Scope {
    pub(crate) async fn new(client: Client, name: &str) -> Result<Scope> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let slug: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(30)
            .collect();
        let id = format!(
            "{}-{:x}{:x}{:x}",
            slug.trim_matches('-'),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            nanos % 0x1000
        );
        let scope = Scope { client, id };
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(scope.id.clone()),
                labels: Some(scope.labels()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(scope.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {}", scope.id))?;
        // The ServiceAccount admission plugin refuses pods until the serviceaccount controller
        // has made the namespace's default account.
        let sas: Api<ServiceAccount> = Api::namespaced(scope.client.clone(), &scope.id);
        wait_for(
            "the default service account",
            Duration::from_secs(60),
            || async { Ok(sas.get_opt("default").await?.map(|_| ())) },
        )
        .await?;
        Ok(scope)
    }

    /// A client for this control plane (cheap to clone).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Lets this scope's service account `account` do `verbs` on the core group's `resource`
    /// everywhere, through a ClusterRole and a ClusterRoleBinding named `<scope id>-<name>`;
    /// returns that name for [`Scope::revoke`] (cluster-wide objects outlive the namespace).
    pub async fn grant(
        &self,
        name: &str,
        account: &str,
        resource: &str,
        verbs: &[&str],
    ) -> Result<String> {
        let name = format!("{}-{name}", self.id);
        let meta = ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        };
        Api::<ClusterRole>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &ClusterRole {
                    metadata: meta.clone(),
                    rules: Some(vec![PolicyRule {
                        api_groups: Some(vec![String::new()]),
                        resources: Some(vec![resource.into()]),
                        verbs: verbs.iter().map(|v| v.to_string()).collect(),
                        ..PolicyRule::default()
                    }]),
                    ..ClusterRole::default()
                },
            )
            .await
            .with_context(|| format!("creating the ClusterRole {name}"))?;
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &ClusterRoleBinding {
                    metadata: meta,
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "ClusterRole".into(),
                        name: name.clone(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: account.into(),
                        namespace: Some(self.id.clone()),
                        ..Subject::default()
                    }]),
                },
            )
            .await
            .with_context(|| format!("creating the ClusterRoleBinding {name}"))?;
        Ok(name)
    }

    /// Deletes what [`Scope::grant`] made.
    pub async fn revoke(&self, granted: &str) -> Result<()> {
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .delete(granted, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting the ClusterRoleBinding {granted}"))?;
        Api::<ClusterRole>::all(self.client.clone())
            .delete(granted, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting the ClusterRole {granted}"))?;
        Ok(())
    }

    /// A new service account `name` in this scope's namespace, without any permission, and a
    /// client acting as it.
    pub async fn service_account_client(&self, env: &TestEnv, name: &str) -> Result<Client> {
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        Api::<ServiceAccount>::namespaced(self.client.clone(), &self.id)
            .create(&PostParams::default(), &account)
            .await
            .with_context(|| format!("creating the service account {}/{name}", self.id))?;
        env.client_as(&self.client, &self.id, name).await
    }

    /// The namespace (equal to the scope id).
    pub fn namespace(&self) -> &str {
        &self.id
    }

    /// The scope id, unique per test.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `{ rota-e2e/scope: <id> }`: on every node and pod of this scope; use it as a
    /// `nodeSelector` to keep workloads on this scope's nodes.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(SCOPE_LABEL.to_string(), self.id.clone())])
    }

    /// Full node name for a short one.
    pub fn node_name(&self, short: &str) -> String {
        format!("{}-{short}", self.id)
    }

    /// Typed APIs for this scope's namespace and for nodes.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.id)
    }

    /// All nodes of the cluster (not only this scope's).
    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Any namespaced API in this scope's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.id)
    }

    /// Creates a kwok-managed node `<id>-<short>` with room for 110 pods, and returns its name.
    /// kwok marks it Ready shortly after; see [`Scope::wait_node_ready`].
    pub async fn create_node(&self, short: &str) -> Result<String> {
        self.create_node_with(short, |_| {}).await
    }

    /// [`Scope::create_node`], with the Node changed by `edit` before it is created: what its
    /// status reports from the start (kwok keeps the addresses and node info it finds there,
    /// where a later write may race with its own first one).
    pub async fn create_node_with(
        &self,
        short: &str,
        edit: impl FnOnce(&mut Node),
    ) -> Result<String> {
        let name = self.node_name(short);
        let mut labels = self.labels();
        labels.insert("kubernetes.io/hostname".into(), name.clone());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("kubernetes.io/arch".into(), "amd64".into());
        labels.insert("type".into(), "kwok".into());
        let resources = BTreeMap::from([
            ("cpu".to_string(), Quantity("32".into())),
            ("memory".to_string(), Quantity("256Gi".into())),
            ("pods".to_string(), Quantity("110".into())),
        ]);
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([(
                    KWOK_NODE_ANNOTATION.0.to_string(),
                    KWOK_NODE_ANNOTATION.1.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(resources.clone()),
                capacity: Some(resources),
                ..NodeStatus::default()
            }),
        };
        edit(&mut node);
        self.nodes()
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {name}"))?;
        Ok(name)
    }

    /// Creates `n` nodes named `<id>-node-0..n` and waits until all are Ready.
    pub async fn create_ready_nodes(&self, n: usize) -> Result<Vec<String>> {
        let mut names = Vec::with_capacity(n);
        for i in 0..n {
            names.push(self.create_node(&format!("node-{i}")).await?);
        }
        for name in &names {
            self.wait_node_ready(name, Duration::from_secs(60)).await?;
        }
        Ok(names)
    }

    /// Waits until the node's Ready condition is True and the node lifecycle controller has
    /// lifted the `node.kubernetes.io/not-ready` taint that every new node starts with, so that
    /// the scheduler can use it.
    pub async fn wait_node_ready(&self, name: &str, timeout: Duration) -> Result<Node> {
        let nodes = self.nodes();
        wait_for(
            &format!("node {name} Ready and untainted"),
            timeout,
            || async {
                let node = nodes.get(name).await?;
                let not_ready_taint = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.key == "node.kubernetes.io/not-ready"));
                Ok((node_is_ready(&node) && !not_ready_taint).then_some(node))
            },
        )
        .await
    }

    /// Marks a node unschedulable, as `kubectl cordon` does.
    pub async fn cordon(&self, node: &str) -> Result<()> {
        self.nodes()
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "spec": { "unschedulable": true } })),
            )
            .await
            .with_context(|| format!("cordoning node {node}"))?;
        Ok(())
    }

    /// Creates a pod bound to `node` (no scheduler involved), with this scope's label plus
    /// `labels`.
    pub async fn create_pod_on(
        &self,
        name: &str,
        node: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Pod> {
        let mut all = self.labels();
        all.extend(labels.clone());
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(all),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.to_string()),
                ..pod_spec()
            }),
            ..Pod::default()
        };
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name} on {node}"))
    }

    /// Waits until the pod is Running and Ready (kwok plays the kubelet).
    /// A Deployment `app` of `replicas` pause pods labelled `app=<app>` and kept on this
    /// scope's nodes by the scheduler.
    pub async fn create_deployment(
        &self,
        app: &str,
        replicas: i32,
        volumes: Option<Vec<Volume>>,
    ) -> Result<()> {
        self.create_deployment_on(app, replicas, volumes, BTreeMap::new())
            .await
    }

    /// [`Scope::create_deployment`] on the scope's nodes that also carry `node_labels`.
    pub async fn create_deployment_on(
        &self,
        app: &str,
        replicas: i32,
        volumes: Option<Vec<Volume>>,
        node_labels: BTreeMap<String, String>,
    ) -> Result<()> {
        let mut node_selector = self.labels();
        node_selector.extend(node_labels);
        let deployment = Deployment {
            metadata: ObjectMeta {
                name: Some(app.into()),
                ..ObjectMeta::default()
            },
            spec: DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some(app_labels(app)),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(app_labels(app)),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        node_selector: Some(node_selector),
                        volumes,
                        ..pod_spec()
                    }),
                },
                ..DeploymentSpec::default()
            },
            ..Deployment::default()
        };
        self.api::<Deployment>()
            .create(&PostParams::default(), &deployment)
            .await
            .with_context(|| format!("creating Deployment {app}"))?;
        Ok(())
    }

    pub async fn wait_pod_running(&self, name: &str, timeout: Duration) -> Result<Pod> {
        let pods = self.pods();
        wait_for(&format!("pod {name} Running"), timeout, || async {
            let pod = pods.get(name).await?;
            Ok(pod_is_running(&pod).then_some(pod))
        })
        .await
    }

    /// Waits until the disruption controller has seen the PodDisruptionBudget `name` as it is
    /// now (its generation) and reports `allowed` disruptions.
    pub async fn wait_pdb(
        &self,
        name: &str,
        allowed: i32,
        timeout: Duration,
    ) -> Result<PodDisruptionBudget> {
        let pdbs = self.api::<PodDisruptionBudget>();
        wait_for(
            &format!("PDB {name} to allow {allowed} disruption(s)"),
            timeout,
            || async {
                let pdb = pdbs.get(name).await?;
                let generation = pdb.metadata.generation;
                Ok(pdb
                    .status
                    .as_ref()
                    .is_some_and(|s| {
                        s.observed_generation == generation
                            && s.disruptions_allowed == Some(allowed)
                    })
                    .then_some(pdb))
            },
        )
        .await
    }

    /// Waits until the pod no longer exists.
    pub async fn wait_pod_gone(&self, name: &str, timeout: Duration) -> Result<()> {
        let pods = self.pods();
        wait_for(&format!("pod {name} gone"), timeout, || async {
            Ok(pods.get_opt(name).await?.is_none().then_some(()))
        })
        .await
    }

    /// Deletes this scope's namespace and nodes, without waiting for them to go. Tests call it
    /// at the end; a test that fails before leaves them for `testenv/down`.
    pub async fn cleanup(self) -> Result<()> {
        let nodes = self.nodes();
        let selector = format!("{SCOPE_LABEL}={}", self.id);
        for node in nodes.list(&ListParams::default().labels(&selector)).await? {
            if let Some(name) = node.metadata.name {
                nodes.delete(&name, &DeleteParams::default()).await?;
            }
        }
        Api::<Namespace>::all(self.client.clone())
            .delete(&self.id, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

/// A pod spec for a pause container that tolerates kwok's usual taint, to be completed with a
/// node name or a node selector. It keeps the default termination grace period, so a deleted or
/// evicted pod stays Terminating until kwok (playing the kubelet) finishes the deletion.
/// The labels `app=<app>` that the test workloads select on.
pub fn app_labels(app: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), app.to_string())])
}

pub fn pod_spec() -> PodSpec {
    PodSpec {
        containers: vec![Container {
            name: "pause".into(),
            image: Some(PAUSE_IMAGE.into()),
            ..Container::default()
        }],
        tolerations: Some(vec![Toleration {
            key: Some("kwok.x-k8s.io/node".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }]),
        automount_service_account_token: Some(false),
        ..PodSpec::default()
    }
}

/// Whether the node's Ready condition is True.
pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether the pod is Running, Ready and not being deleted.
pub fn pod_is_running(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    pod.metadata.deletion_timestamp.is_none()
        && status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .as_ref()
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Polls `check` every 200 ms until it yields `Some`, an error, or `timeout` passes.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check()
            .await
            .with_context(|| format!("waiting for {what}"))?
        {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The HTTP status of a Kubernetes API error, if `err` is one.
pub fn api_error_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}
