//! The harness of the `rota agent` tests: one host in a temporary directory (its root, boot
//! id and SQLite store), the agent as a real process with shell commands that log each node
//! action, and waits on the store.
// Each test file uses its own part of the harness.
#![allow(dead_code)]

use std::fmt::Debug;
use std::net::SocketAddr;
use std::ops::Deref;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rota_core::{HistoryEvent, Process};
use rota_e2e::host::{self, HostDir, PATIENCE};
use rota_store::{NodeRecord, SqliteStore, StoreExt};

pub const ROTA: &str = env!("CARGO_BIN_EXE_rota");

/// A simulated host (its directory, node name and store: a [`HostDir`]) whose agent is a
/// `rota agent` process.
pub struct Host {
    host: HostDir,
}

impl Host {
    pub fn new() -> Host {
        Host::named("node-a", None)
    }

    /// Another host of `fleet`'s store, for tests with several nodes.
    pub fn sharing(node: &str, fleet: &Host) -> Host {
        Host::named(node, Some(fleet.db.clone()))
    }

    fn named(node: &str, db: Option<PathBuf>) -> Host {
        Host {
            host: HostDir::new(node, db),
        }
    }

    pub fn store_url(&self) -> String {
        format!("sqlite://{}", self.db.display())
    }

    pub fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("actions.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub fn count(&self, action: &str) -> usize {
        self.log().iter().filter(|l| *l == action).count()
    }

    /// Starts `rota agent` with logging commands; `extra` replaces or adds flags.
    pub fn agent(&self, extra: &[&str]) -> Agent {
        self.agent_with_env(extra, &[])
    }

    /// [`Host::agent`] with `env` added to the agent's environment.
    pub fn agent_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Agent {
        let child = self
            .command(extra)
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rota agent");
        Agent { child }
    }

    /// [`Host::agent`] with its stderr appended to the host's file `log`, to be read while it
    /// runs.
    pub fn agent_logging_to(&self, log: &str, extra: &[&str]) -> Agent {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(log))
            .expect("open the agent's log");
        let child = self
            .command(extra)
            .stderr(file)
            .spawn()
            .expect("start rota agent");
        Agent { child }
    }

    /// `rota agent` with logging commands; `extra` replaces or adds flags.
    fn command(&self, extra: &[&str]) -> Command {
        let log = self.path("actions.log");
        let action = |name: &str| format!("echo {name} >> {}", log.display());
        let mut args: Vec<String> = vec![
            "agent".into(),
            "--node".into(),
            self.node.to_string(),
            "--host-root".into(),
            self.path("root").display().to_string(),
            "--boot-id-file".into(),
            self.path("boot_id").display().to_string(),
            "--health-interval".into(),
            "100ms".into(),
        ];
        let defaults = [
            ("--store", self.store_url()),
            ("--concurrency", "1".into()),
            ("--drain-command", action("drain")),
            ("--uncordon-command", action("uncordon")),
            ("--reboot-command", action("reboot")),
            ("--health-command", action("health")),
            // The tests' agents start at once on every store (PostgreSQL's default waits).
            ("--start-jitter", "0s".into()),
        ];
        for (flag, value) in defaults {
            if !extra.contains(&flag) {
                args.push(flag.into());
                args.push(value);
            }
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut command = Command::new(ROTA);
        command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        command
    }

    pub async fn store(&self) -> SqliteStore {
        SqliteStore::open(&self.db).await.expect("open store")
    }

    pub async fn record(&self) -> Option<NodeRecord> {
        self.store()
            .await
            .node(&self.node)
            .await
            .expect("read node")
    }

    /// Waits until the node's record satisfies `ok` (the agent is a separate process).
    pub async fn wait_for(&self, what: &str, ok: impl Fn(&NodeRecord) -> bool) -> NodeRecord {
        host::wait_for(what, ok, async || self.record().await, || self.log()).await
    }

    pub async fn wait_until(&self, what: &str, ok: impl Fn() -> bool) {
        host::wait_until(what, ok, async || self.record().await, || self.log()).await
    }

    pub async fn history(&self) -> Vec<(Process, HistoryEvent)> {
        host::history(&self.store().await).await
    }

    /// Runs `rota ARGS --store URL` on this host's store, as an operator would beside the agent.
    pub fn rota(&self, args: &[&str]) -> Output {
        Command::new(ROTA)
            .args(args)
            .args(["--store", &self.store_url()])
            .output()
            .expect("run rota")
    }

    /// [`Host::rota`], which must succeed: what it wrote to stdout.
    pub fn rota_ok(&self, args: &[&str]) -> String {
        let output = self.rota(args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Deref for Host {
    type Target = HostDir;

    fn deref(&self) -> &HostDir {
        &self.host
    }
}

/// `host:port` of a PostgreSQL URL (`scheme://[user@]host:port/…`).
pub fn server_of(url: &str) -> SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    host_port.parse().expect("the test server's address")
}

/// Asserts that `rota` refused `args`, as `output` says, with one line on stderr that
/// contains `named`.
pub fn assert_refused(output: &Output, args: &impl Debug, named: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{args:?} was accepted");
    assert!(stderr.contains(named), "{args:?}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
}

pub struct Agent {
    pub child: Child,
}

impl Agent {
    pub fn kill(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reap");
    }

    /// Waits for an agent that is to exit by itself: its status and stderr.
    pub fn output(mut self) -> std::process::Output {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(start.elapsed() < PATIENCE, "the agent did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = self.output_now().into_bytes();
        std::process::Output {
            status,
            stdout: Vec::new(),
            stderr,
        }
    }

    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        self.child.wait().expect("wait")
    }

    /// Sends the signal `name` (`TERM`, `STOP`, …) to the agent.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{name}");
    }

    /// What an agent that has exited wrote to stderr.
    pub fn output_now(&mut self) -> String {
        let mut stderr = Vec::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            std::io::Read::read_to_end(&mut pipe, &mut stderr).expect("read stderr");
        }
        String::from_utf8_lossy(&stderr).into_owned()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
