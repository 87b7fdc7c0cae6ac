//! The control plane with one real kubelet node that scripts/test starts for the tests of rota
//! as users install it (`testenv/up`, then `testenv/node-up`; its kubeconfig in
//! `ROTA_TESTENV_REAL_NODE_KUBECONFIG`). It is a control plane of its own, so that the pods
//! and DaemonSets of the other tests never land on a node that really runs them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use kube::{Client, Config, config::KubeConfigOptions, config::Kubeconfig};

use crate::testenv::{Scope, run};

/// Env var with the kubeconfig of the control plane that has the real node.
pub const REAL_NODE_KUBECONFIG_ENV: &str = "ROTA_TESTENV_REAL_NODE_KUBECONFIG";

/// The real node and the control plane it belongs to, as `testenv/node-up` wrote them into the
/// run directory's `env` file.
pub struct RealNode {
    kubeconfig: PathBuf,
    env: BTreeMap<String, String>,
}

impl RealNode {
    /// The real node of `ROTA_TESTENV_REAL_NODE_KUBECONFIG`; an error says how to start one.
    pub fn get() -> Result<RealNode> {
        let kubeconfig = std::env::var_os(REAL_NODE_KUBECONFIG_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .with_context(|| {
                format!(
                    "{REAL_NODE_KUBECONFIG_ENV} is not set: start a control plane with a real node \
                     (kc=$(testenv/up | tail -n1) && testenv/node-up \"$kc\") and set it to $kc \
                     (scripts/test does)"
                )
            })?;
        let run = kubeconfig
            .parent()
            .context("the kubeconfig path has no directory")?;
        let text = std::fs::read_to_string(run.join("env"))
            .with_context(|| format!("reading {}/env", run.display()))?;
        let env: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ensure!(
            env.contains_key("ROTA_TESTENV_REAL_NODE"),
            "{} has no real node: run testenv/node-up {}",
            run.display(),
            kubeconfig.display()
        );
        Ok(RealNode { kubeconfig, env })
    }

    fn var(&self, name: &str) -> Result<&str> {
        self.env
            .get(name)
            .map(String::as_str)
            .with_context(|| format!("the run's env file has no {name}"))
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The node's name (this machine's hostname).
    pub fn name(&self) -> Result<&str> {
        self.var("ROTA_TESTENV_REAL_NODE")
    }

    /// The directory of the node's kubelet and containerd (tests keep their host paths here).
    pub fn dir(&self) -> Result<PathBuf> {
        self.var("ROTA_TESTENV_REAL_NODE_DIR").map(PathBuf::from)
    }

    /// The busybox image containerd has, for real workloads.
    pub fn busybox_image(&self) -> Result<&str> {
        self.var("ROTA_TESTENV_BUSYBOX_IMAGE")
    }

    pub async fn client(&self) -> Result<Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// A namespace of this control plane's own, with kwok nodes beside the real one.
    pub async fn scope(&self, name: &str) -> Result<Scope> {
        Scope::new(self.client().await?, name).await
    }

    /// `ctr` against the node's containerd, in the namespace the kubelet uses.
    pub fn ctr(&self, args: &[&str]) -> Result<String> {
        let sock = self.var("ROTA_TESTENV_CONTAINERD")?;
        run(Command::new("ctr")
            .args(["--address", sock, "-n", "k8s.io"])
            .args(args))
    }

    /// Imports an OCI archive (as `scripts/image` writes it) under `name`, the name a pod
    /// spec gives it (`rota:0.1.0` is `docker.io/library/rota:0.1.0` to containerd).
    pub fn import_image(&self, archive: &Path, name: &str) -> Result<()> {
        let archive = archive
            .to_str()
            .context("the archive's path is not UTF-8")?;
        self.ctr(&["images", "import", "--index-name", name, archive])?;
        ensure!(
            self.ctr(&["images", "ls", "-q"])?
                .lines()
                .any(|l| l == name),
            "containerd does not list {name} after importing {archive}"
        );
        Ok(())
    }

    /// The kubelet's pid: `nsenter -t <it>` enters this machine's namespaces (PID 1 here is the
    /// VM's init, whose namespaces cannot be opened).
    pub fn kubelet_pid(&self) -> Result<u32> {
        let pids = std::fs::read_to_string(self.dir()?.join("pids"))?;
        pids.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some("kubelet")).then(|| f.next()?.parse().ok())?
            })
            .context("the node's pids file lists no kubelet")
    }
}
