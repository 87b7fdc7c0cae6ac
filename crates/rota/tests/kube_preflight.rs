//! The real `rota` binary against the real control plane of `testenv/`, in an installation
//! that lacks something: the agent (and an operator's command) stops at once with one error
//! line that names what is missing and how to add it, and exits non-zero. A missing CRD is
//! tested in rota-store-kube (`tests/preflight.rs`): the shared cluster's CRDs stay installed.
//! An agent without its RBAC permissions names every one it lacks.

use std::path::Path;
use std::process::Output;

use anyhow::{Context as _, Result, ensure};
use kube::Api;
use kube::config::Kubeconfig;
use rota_e2e::control_plane::{Component, OwnControlPlane};
use rota_e2e::testenv::wait_for;
use rota_kube_api::RotaNode;
use rota_store::StoreExt;
use rota_store_kube::{KubeStore, KubeStoreConfig};

mod kube_common;

use kube_common::{PATIENCE, ROTA, env, unschedulable};

/// Runs `rota` with `args` until it stops.
async fn rota(args: &[&str]) -> Result<Output> {
    let run = tokio::process::Command::new(ROTA)
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(PATIENCE, run)
        .await
        .context("rota did not stop")?
        .context("running rota")
}

/// The one line `rota` failed with; fails unless it failed, with exactly one error line.
fn error_line(out: &Output) -> Result<String> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "rota succeeded: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    ensure!(errors.len() == 1, "not one error line: {stderr}");
    Ok(errors[0].to_owned())
}

/// `rota agent --store kube --node-actions kube` for `node`, with `extra` arguments.
async fn agent(kubeconfig: &Path, host_root: &Path, node: &str, extra: &[&str]) -> Result<Output> {
    let (kubeconfig, host_root) = (path(kubeconfig)?, path(host_root)?);
    let mut args = vec![
        "agent",
        "--store",
        "kube",
        "--node-actions",
        "kube",
        "--kubeconfig",
        kubeconfig,
        "--host-root",
        host_root,
        "--node",
        node,
        "--start-jitter",
        "0s",
    ];
    args.extend_from_slice(extra);
    rota(&args).await
}

fn path(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

#[tokio::test]
async fn an_agent_whose_namespace_does_not_exist_stops_with_one_line_saying_how_to_create_it()
-> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-preflight-ns").await?;
    rota_e2e::fleet::install_crd(scope.client()).await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let absent = format!("{}-absent", scope.id());
    let dir = tempfile::tempdir()?;
    let out = agent(
        env.kubeconfig(),
        dir.path(),
        &node,
        &["--namespace", &absent],
    )
    .await?;
    let line = error_line(&out)?;
    for expected in [
        format!("the namespace {absent} does not exist"),
        format!("`kubectl create namespace {absent}`"),
    ] {
        ensure!(line.contains(&expected), "no {expected:?} in: {line}");
    }
    // It stopped before it did anything: no RotaNode of its own.
    let written = Api::<RotaNode>::all(scope.client()).get_opt(&node).await?;
    ensure!(written.is_none(), "the agent wrote its RotaNode");

    // An operator's command on the same installation says the same.
    let out = rota(&[
        "status",
        "--store",
        "kube",
        "--kubeconfig",
        path(env.kubeconfig())?,
        "--namespace",
        &absent,
    ])
    .await?;
    let line = error_line(&out)?;
    ensure!(
        line.contains(&format!("`kubectl create namespace {absent}`")),
        "{line}"
    );
    scope.cleanup().await
}

/// A token the API server does not accept (401): the agent says so before it asks about its
/// permissions, whose reviews would only be refused the same way.
#[tokio::test]
async fn an_agent_whose_token_is_refused_stops_with_one_line_saying_so() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-preflight-401").await?;
    // It stops before it looks at its Node.
    let node = scope.node_name("n");
    let dir = tempfile::tempdir()?;
    let mut kubeconfig = Kubeconfig::read_from(env.kubeconfig())?;
    for user in &mut kubeconfig.auth_infos {
        user.auth_info = Some(serde_json::from_value(
            serde_json::json!({ "token": "not-a-token-the-api-server-issued" }),
        )?);
    }
    let refused = dir.path().join("kubeconfig");
    std::fs::write(&refused, serde_json::to_string(&kubeconfig)?)?;
    let out = agent(
        &refused,
        dir.path(),
        &node,
        &["--namespace", scope.namespace()],
    )
    .await?;
    let line = error_line(&out)?;
    for expected in ["401 Unauthorized", "ServiceAccount", "kubeconfig"] {
        ensure!(line.contains(expected), "no {expected:?} in: {line}");
    }
    ensure!(!line.contains("selfsubjectaccessreviews"), "{line}");
    scope.cleanup().await
}

/// A pod without a mounted service account token (`automountServiceAccountToken: false`) and
/// without a kubeconfig: the agent names the token, not every place kube looked for a
/// cluster. Needs no control plane: it stops before it sends a request.
#[tokio::test]
async fn an_agent_in_a_pod_without_a_service_account_token_says_so() -> Result<()> {
    const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
    if Path::new(TOKEN).exists() {
        eprintln!("this machine has {TOKEN}: it cannot play a pod without one");
        return Ok(());
    }
    let home = tempfile::tempdir()?;
    let run = tokio::process::Command::new(ROTA)
        .args([
            "agent",
            "--store",
            "kube",
            "--node-actions",
            "kube",
            "--node",
            "n",
        ])
        .arg("--host-root")
        .arg(home.path())
        .env_remove("KUBECONFIG")
        .env("HOME", home.path())
        // What Kubernetes sets in every container.
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", "443")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(PATIENCE, run).await??;
    let line = error_line(&out)?;
    for expected in [TOKEN, "automountServiceAccountToken"] {
        ensure!(line.contains(expected), "no {expected:?} in: {line}");
    }
    Ok(())
}

/// An agent whose service account may do nothing stops as it starts, with one error that names
/// every permission it lacks, and touches nothing: no RotaNode, no cordon.
#[tokio::test]
async fn an_agent_without_its_rbac_permissions_stops_at_once_and_names_them() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-agent-rbac").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    scope.service_account_client(env, "weak").await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    env.write_kubeconfig_as(&scope.client(), scope.namespace(), "weak", &kubeconfig)
        .await?;
    let out = agent(
        &kubeconfig,
        dir.path(),
        &node,
        &["--namespace", scope.namespace()],
    )
    .await?;
    error_line(&out)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "lacks",
        "`get`, `list`, `watch`, `patch` on `nodes`;",
        "`create` on `pods/eviction`;",
        "`get`, `list`, `watch`, `create`, `update` on `rotanodes.rota.dev`;",
        "`get`, `list`, `create`, `delete` on `rotawindows.rota.dev`;",
        &format!(
            "`get`, `update` on `leases.coordination.k8s.io` in namespace {};",
            scope.namespace()
        ),
    ] {
        ensure!(stderr.contains(expected), "no {expected:?} in: {stderr}");
    }
    // Events are a courtesy: named in a warning, not among what stops the agent.
    ensure!(
        stderr.contains("its Node gets no Events"),
        "no warning about the Events: {stderr}"
    );
    ensure!(
        !stderr.contains("permission(s) it needs: `create`, `patch` on `events"),
        "{stderr}"
    );
    let admin_store = KubeStore::connect(
        scope.client(),
        KubeStoreConfig {
            namespace: scope.namespace().into(),
            ..KubeStoreConfig::default()
        },
    )
    .await?;
    ensure!(
        admin_store.nodes().await?.is_empty(),
        "the agent wrote a RotaNode"
    );
    ensure!(!unschedulable(&scope, &node).await?, "the agent cordoned");
    scope.cleanup().await
}

/// An API server that has just started answers before its authorizer has read the cluster's
/// roles: for a moment every review says the agent may do nothing. An agent refused while the
/// API server reports itself not ready (here: its etcd is down) waits, as for an unavailable
/// one, and judges its permissions only once the server is ready. Its account here truly
/// lacks them, so it then stops and names them; before the fix it stopped at once (the soak's
/// agent that "exited by itself" after a restart of the API server).
#[tokio::test]
async fn an_agent_refused_by_an_api_server_that_is_not_ready_waits_until_it_is() -> Result<()> {
    let Some(plane) = OwnControlPlane::start()? else {
        return Ok(());
    };
    let env = plane.env();
    rota_e2e::fleet::install_crd(env.client().await?).await?;
    let scope = env.scope("kube-agent-not-ready").await?;
    scope.service_account_client(env, "weak").await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    env.write_kubeconfig_as(&scope.client(), scope.namespace(), "weak", &kubeconfig)
        .await?;

    let etcd = plane.pid(Component::Etcd)?;
    std::process::Command::new("kill")
        .args(["-KILL", &etcd.to_string()])
        .status()?;
    let admin = scope.client();
    wait_for(
        "the API server to report itself not ready",
        PATIENCE,
        || {
            let admin = admin.clone();
            async move {
                let readyz = http::Request::get("/readyz").body(Vec::new())?;
                Ok(admin.request_text(readyz).await.is_err().then_some(()))
            }
        },
    )
    .await?;

    let stderr_path = dir.path().join("agent.stderr");
    let mut agent = tokio::process::Command::new(ROTA)
        .args(["agent", "--store", "kube", "--node-actions", "kube"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--host-root")
        .arg(dir.path())
        .args(["--node", "not-ready-node", "--start-jitter", "0s"])
        .args(["--namespace", scope.namespace()])
        .stderr(std::fs::File::create(&stderr_path)?)
        .kill_on_drop(true)
        .spawn()?;
    let waited = wait_for("the agent to wait for the API server", PATIENCE, || {
        let stderr_path = stderr_path.clone();
        let exited = agent.try_wait();
        async move {
            let stderr = std::fs::read_to_string(&stderr_path)?;
            Ok((exited?.is_some() || stderr.contains("checking the cluster again")).then_some(()))
        }
    })
    .await;
    let exited = agent.try_wait()?;
    ensure!(
        waited.is_ok() && exited.is_none(),
        "the agent did not wait for the API server to be ready ({exited:?}): {}",
        std::fs::read_to_string(&stderr_path)?
    );

    plane.restart(Component::Etcd)?;
    let status = tokio::time::timeout(PATIENCE, agent.wait())
        .await
        .context("the agent did not stop once the API server was ready")??;
    let stderr = std::fs::read_to_string(&stderr_path)?;
    ensure!(!status.success(), "the agent succeeded: {stderr}");
    ensure!(
        stderr.contains("the agent's service account lacks")
            && stderr.contains("`create` on `pods/eviction`;"),
        "the agent did not name what it lacks: {stderr}"
    );
    scope.cleanup().await
}

/// A `--group-by` label that no Node carries (a typo, or a label of another cluster) would
/// put every node in no group, and the groups' limits would hold nobody: the agent stops at
/// start with one line naming the flag, the label and what is allowed. A label that another
/// Node carries is only warned about: a fleet may mix pools.
#[tokio::test]
async fn a_group_by_label_that_no_node_carries_stops_the_agent_naming_it() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-group-by").await?;
    rota_e2e::fleet::install_crd(scope.client()).await?;
    let mut nodes = scope.create_ready_nodes(2).await?;
    let (node, other) = (nodes.remove(0), nodes.remove(0));
    let dir = tempfile::tempdir()?;
    let absent = format!("{}.example/no-such-pool", scope.id());
    let out = agent(
        env.kubeconfig(),
        dir.path(),
        &node,
        &["--namespace", scope.namespace(), "--group-by", &absent],
    )
    .await?;
    let line = error_line(&out)?;
    for expected in [
        format!("--group-by {absent}: no Node carries the label {absent}"),
        "give a label the Nodes carry, such as topology.kubernetes.io/zone".to_owned(),
    ] {
        ensure!(line.contains(&expected), "no {expected:?} in: {line}");
    }
    let written = Api::<RotaNode>::all(scope.client()).get_opt(&node).await?;
    ensure!(written.is_none(), "the agent wrote its RotaNode");

    // Once another Node carries it, this one's agent starts, in no group.
    let pool = format!("{}.example/pool", scope.id());
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(scope.client());
    let label = serde_json::json!({"metadata": {"labels": {&pool: "gpu"}}});
    nodes
        .patch(
            &other,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await?;
    let dir = tempfile::tempdir()?;
    let (kubeconfig, root) = (path(env.kubeconfig())?, path(dir.path())?);
    let mut started = tokio::process::Command::new(ROTA)
        .args(["agent", "--store", "kube", "--node-actions", "kube"])
        .args([
            "--kubeconfig",
            kubeconfig,
            "--host-root",
            root,
            "--node",
            &node,
        ])
        .args(["--start-jitter", "0s", "--namespace", scope.namespace()])
        .args(["--group-by", &pool])
        .kill_on_drop(true)
        .spawn()?;
    wait_for("the agent's RotaNode", PATIENCE, || async {
        Ok(Api::<RotaNode>::all(scope.client())
            .get_opt(&node)
            .await?
            .map(|_| ()))
    })
    .await?;
    ensure!(
        started.try_wait()?.is_none(),
        "the agent stopped though another Node carries the label"
    );
    started.kill().await?;
    scope.cleanup().await
}
