//! The Helm chart `charts/rota` as the helm that `testenv/build` builds renders it: the
//! rendered text, its objects, or the message with which bad values fail `helm template`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::Value;

use crate::testenv::{SKIP_ENV, tool};

/// The chart's directory in this repository.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/rota")
}

/// Whether a test of the chart skips: helm comes from `testenv/build` like the control plane,
/// so it skips along with it (`ROTA_E2E_SKIP=1`).
pub fn skipped() -> bool {
    std::env::var(SKIP_ENV).is_ok_and(|v| v == "1")
}

/// `helm template <release>` of the chart with each of `sets` as `--set-json`, and with
/// `--show-only` of `only` when given; the raw output, whatever the status.
fn template(release: &str, sets: &[&str], only: Option<&str>) -> Result<Output> {
    let mut helm = Command::new(tool("helm")?);
    helm.arg("template").arg(release).arg(dir());
    if let Some(only) = only {
        helm.arg("--show-only").arg(only);
    }
    for set in sets {
        helm.arg("--set-json").arg(set);
    }
    helm.stdin(Stdio::null())
        .output()
        .context("running helm template")
}

/// The text that `helm template <release>` renders with each of `sets` as `--set-json`, and
/// with `--show-only` of `only` when given; an error with helm's message when it fails.
pub fn rendered(release: &str, sets: &[&str], only: Option<&str>) -> Result<String> {
    let out = template(release, sets, only)?;
    ensure!(
        out.status.success(),
        "helm template {sets:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// Every object that `helm template rota` renders with `sets` as `--set-json` arguments.
pub fn objects(sets: &[&str]) -> Result<Vec<Value>> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(&rendered("rota", sets, None)?)
        .context("parsing helm template's output")?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// Checks that each `(set, expected)` of `cases`, as a `--set-json` argument, fails
/// `helm template` with `expected` in its message.
pub fn ensure_rejected(cases: &[(&str, &str)]) -> Result<()> {
    for (set, expected) in cases {
        let out = template("rota", &[set], None)?;
        if out.status.success() {
            bail!("helm template accepted {set}");
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            stderr.contains(expected),
            "helm template with {set}: expected {expected:?} in: {stderr}"
        );
    }
    Ok(())
}
