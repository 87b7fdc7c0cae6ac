//! A control plane of a test's own, whose processes the test may crash and restart.
//!
//! The shared environment of [`TestEnv::get`] serves many tests at once, so a test that kills
//! its API server or etcd would break the others: such a test starts its own with
//! [`OwnControlPlane::start`] (`testenv/up`), crashes and restarts a component with
//! [`OwnControlPlane::restart`] (`testenv/restart`: SIGKILL, then the same command line on the
//! same ports and data), and stops it when dropped (`testenv/down`). The watchdog that
//! [`TestEnv`] leaves for an environment it started stops it too if the test process is
//! killed before the drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

use crate::testenv::{SKIP_ENV, TestEnv, testenv_dir};

/// A process of the control plane that [`OwnControlPlane::restart`] can crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    Etcd,
    KubeApiserver,
}

impl Component {
    /// Its name in the run's `pids` file.
    pub fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::KubeApiserver => "kube-apiserver",
        }
    }
}

/// A control plane this test started, stopped when dropped.
pub struct OwnControlPlane {
    env: TestEnv,
    run_dir: PathBuf,
}

impl OwnControlPlane {
    /// Starts a control plane with `testenv/up` (which builds what is missing first).
    /// `Ok(None)` only when `ROTA_E2E_SKIP=1`, as for [`TestEnv::get`].
    pub fn start() -> Result<Option<OwnControlPlane>> {
        if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
            eprintln!("rota-e2e: {SKIP_ENV}=1, skipping a test that needs its own control plane");
            return Ok(None);
        }
        let env = TestEnv::start()?;
        let run_dir = env
            .kubeconfig()
            .parent()
            .context("the kubeconfig has no run directory")?
            .to_path_buf();
        Ok(Some(OwnControlPlane { env, run_dir }))
    }

    pub fn env(&self) -> &TestEnv {
        &self.env
    }

    /// The run directory (`pids`, `logs/`, ...).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// SIGKILLs `component` and starts it again as `testenv/up` did, waiting until it is
    /// healthy again; returns the new pid. Blocks for as long as that takes (seconds).
    pub fn restart(&self, component: Component) -> Result<u32> {
        let script = testenv_dir().join("restart");
        let out = Command::new(&script)
            .arg(&self.run_dir)
            .arg(component.name())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            let log = self.run_dir.join(format!("logs/{}.log", component.name()));
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            bail!(
                "{} {} failed with {}: {}\nlast lines of {}:\n{}",
                script.display(),
                component.name(),
                out.status,
                String::from_utf8_lossy(&out.stderr),
                log.display(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .trim()
            .parse()
            .with_context(|| format!("testenv/restart printed {stdout:?}, not a pid"))
    }

    /// The pid the run's `pids` file has for `component`.
    pub fn pid(&self, component: Component) -> Result<u32> {
        let path = self.run_dir.join("pids");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        text.lines()
            .find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some(component.name()))
                    .then(|| words.next())
                    .flatten()
            })
            .with_context(|| format!("{} is not in {}", component.name(), path.display()))?
            .parse()
            .with_context(|| format!("a pid of {} in {}", component.name(), path.display()))
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        let down = testenv_dir().join("down");
        let _ = Command::new(down)
            .arg(&self.run_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
    }
}
