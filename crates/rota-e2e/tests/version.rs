//! The control plane is the real Kubernetes release pinned in testenv/go.mod, and reports it.

use anyhow::{Context as _, Result, ensure};
use rota_e2e::testenv::{TestEnv, testenv_dir};

#[tokio::test]
async fn apiserver_reports_the_pinned_release() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let go_mod = std::fs::read_to_string(testenv_dir().join("go.mod"))?;
    let pinned = go_mod
        .lines()
        .map(str::split_whitespace)
        .find_map(|mut words| match (words.next(), words.next()) {
            (Some("k8s.io/kubernetes"), Some(v)) if v.starts_with('v') => Some(v.to_string()),
            _ => None,
        })
        .context("no k8s.io/kubernetes version in testenv/go.mod")?;

    let info = env.client().await?.apiserver_version().await?;
    ensure!(
        info.git_version == pinned,
        "/version says {} but testenv/go.mod pins {pinned}",
        info.git_version
    );
    ensure!(
        pinned.starts_with(&format!("v{}.{}.", info.major, info.minor)),
        "/version major/minor {}.{} do not match {pinned}",
        info.major,
        info.minor
    );
    Ok(())
}
