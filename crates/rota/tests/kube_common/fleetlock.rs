//! What the FleetLock tests on Kubernetes share: rota's processes run as the chart's
//! Deployments run them, outside a pod, each with a token of its own service account; and a
//! FleetLock client that sends exactly what Zincati sends, from a host's address.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result};
use kube::Client;
use rota_e2e::testenv::{TestEnv, wait_for};
use serde_json::{Value, json};

use super::{PATIENCE, ROTA};

/// A kubeconfig in `dir` that acts as the service account `namespace/account`.
pub async fn kubeconfig_as(
    env: &TestEnv,
    admin: &Client,
    namespace: &str,
    account: &str,
    dir: &Path,
) -> Result<PathBuf> {
    let path = dir.join(format!("{account}.kubeconfig"));
    env.write_kubeconfig_as(admin, namespace, account, &path)
        .await?;
    Ok(path)
}

/// A `rota` process, and its log.
pub struct RotaProcess {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RotaProcess {
    /// `rota <args> --kubeconfig=<kubeconfig>`.
    pub fn start(kubeconfig: &Path, args: &[String]) -> Result<RotaProcess> {
        let dir = tempfile::tempdir()?;
        let log = std::fs::File::create(dir.path().join("log"))?;
        let child = Command::new(ROTA)
            .args(args)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .env("RUST_LOG", "info,rota_fleetlock=debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting rota {args:?}"))?;
        Ok(RotaProcess {
            dir,
            child: Some(child),
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The address the FleetLock server listens on, once its log says it serves.
    pub async fn serving(&self) -> Result<SocketAddr> {
        wait_for("the FleetLock server to serve", PATIENCE, || async {
            let log = self.log();
            let listen = log
                .lines()
                .filter(|l| l.contains("serving FleetLock"))
                .find_map(|l| l.split_once("listen=").map(|(_, rest)| rest.trim()));
            Ok(listen.map(str::parse).transpose()?)
        })
        .await
        .with_context(|| format!("the server's log:\n{}", self.log()))
    }

    pub fn stop(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }
}

impl Drop for RotaProcess {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The server's answer: its status and, for a refusal, the error body's `kind` and `value`.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub kind: String,
    pub value: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.status == 200
    }

    pub fn success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A Fedora CoreOS host's Zincati: its requests carry the header `fleet-lock-protocol: true`,
/// no content type, and the pretty-printed JSON body of its client parameters, group
/// `default`; they leave from the host's address.
pub struct Zincati {
    http: reqwest::Client,
    base: String,
    id: String,
}

impl Zincati {
    pub fn new(server: SocketAddr, id: &str, from: IpAddr) -> Result<Zincati> {
        Ok(Zincati {
            http: reqwest::Client::builder().local_address(from).build()?,
            base: format!("http://{server}"),
            id: id.to_owned(),
        })
    }

    async fn ask(&self, endpoint: &str) -> Result<Answer> {
        let body = serde_json::to_string_pretty(&json!({
            "client_params": { "id": self.id, "group": "default" }
        }))?;
        let response = self
            .http
            .post(format!("{}/v1/{endpoint}", self.base))
            .header("fleet-lock-protocol", "true")
            .body(body)
            .send()
            .await
            .with_context(|| format!("POST /v1/{endpoint}"))?;
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let text = |key: &str| body[key].as_str().unwrap_or_default().to_owned();
        Ok(Answer {
            status,
            kind: text("kind"),
            value: text("value"),
        })
    }

    pub async fn pre_reboot(&self) -> Result<Answer> {
        self.ask("pre-reboot").await
    }

    pub async fn steady_state(&self) -> Result<Answer> {
        self.ask("steady-state").await
    }
}
