//! rota's image as `scripts/image` writes it (an OCI archive, path in `ROTA_TEST_IMAGE`, set by
//! scripts/test): its labels name the version and the source revision, it holds exactly the
//! files the chart needs, and its `rota` runs with nothing but the image's own files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail, ensure};
use rota_e2e::testenv::run;
use serde_json::Value;

const IMAGE_ENV: &str = "ROTA_TEST_IMAGE";

fn archive() -> Result<PathBuf> {
    let path = std::env::var_os(IMAGE_ENV).with_context(|| {
        format!("{IMAGE_ENV} is not set: build the image with scripts/image and set it to the archive it prints (scripts/test does)")
    })?;
    let path = PathBuf::from(path);
    ensure!(
        path.is_file(),
        "{IMAGE_ENV}={} does not exist",
        path.display()
    );
    Ok(path)
}

/// An unpacked OCI layout: its one image's config and the layer archives, lowest first.
struct Layout {
    dir: tempfile::TempDir,
    config: Value,
    layers: Vec<PathBuf>,
}

fn blob(dir: &Path, digest: &Value) -> Result<PathBuf> {
    let digest = digest.as_str().context("a descriptor without a digest")?;
    let (algorithm, hex) = digest
        .split_once(':')
        .with_context(|| format!("digest {digest} has no algorithm"))?;
    Ok(dir.join("blobs").join(algorithm).join(hex))
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))
}

fn unpack() -> Result<Layout> {
    let dir = tempfile::tempdir()?;
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive()?)
        .arg("-C")
        .arg(dir.path()))?;
    let index = read_json(&dir.path().join("index.json"))?;
    let manifests = index["manifests"]
        .as_array()
        .context("index.json has no manifests")?;
    ensure!(
        manifests.len() == 1,
        "the archive holds {} images, not one",
        manifests.len()
    );
    let manifest = read_json(&blob(dir.path(), &manifests[0]["digest"])?)?;
    let config = read_json(&blob(dir.path(), &manifest["config"]["digest"])?)?;
    let layers = manifest["layers"]
        .as_array()
        .context("the manifest has no layers")?
        .iter()
        .map(|l| blob(dir.path(), &l["digest"]))
        .collect::<Result<_>>()?;
    Ok(Layout {
        dir,
        config,
        layers,
    })
}

#[test]
fn the_image_is_labelled_with_the_version_and_the_source_revision() -> Result<()> {
    let layout = unpack()?;
    let labels = &layout.config["config"]["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "labels: {labels}"
    );
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .context("no org.opencontainers.image.revision label")?;
    let commit = revision.trim_end_matches("-dirty");
    ensure!(
        commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "the revision label {revision:?} is not a git commit"
    );
    assert_eq!(
        layout.config["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/rota"])
    );
    Ok(())
}

#[test]
fn the_image_holds_rota_sh_and_nsenter_and_nothing_else() -> Result<()> {
    let layout = unpack()?;
    let mut entries = BTreeSet::new();
    for layer in &layout.layers {
        for line in run(Command::new("tar").arg("-tf").arg(layer))?.lines() {
            let entry = line.trim_start_matches("./").trim_end_matches('/');
            if !entry.is_empty() {
                entries.insert(entry.to_string());
            }
        }
    }
    let expected: BTreeSet<String> = [
        "bin",
        "bin/busybox",
        "bin/sh",
        "usr",
        "usr/bin",
        "usr/bin/nsenter",
        "usr/bin/rota",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(entries, expected);
    Ok(())
}

/// The image's own files, in a root of their own: `rota --version` and the `sh` and `nsenter`
/// the chart runs work there, so the binary needs no library the image lacks.
#[test]
fn the_images_rota_runs_with_only_the_images_files() -> Result<()> {
    let layout = unpack()?;
    let root = layout.dir.path().join("rootfs");
    std::fs::create_dir(&root)?;
    for layer in &layout.layers {
        run(Command::new("tar")
            .arg("-xf")
            .arg(layer)
            .arg("-C")
            .arg(&root))?;
    }
    let version = run(Command::new("chroot")
        .arg(&root)
        .args(["/usr/bin/rota", "--version"]))?;
    assert_eq!(
        version.trim(),
        format!("rota {}", env!("CARGO_PKG_VERSION"))
    );
    let shell = run(Command::new("chroot").arg(&root).args([
        "/bin/sh",
        "-c",
        "nsenter --help 2>&1 | head -n 1; echo done",
    ]))?;
    if !shell.contains("BusyBox") || !shell.trim_end().ends_with("done") {
        bail!("sh and nsenter did not run in the image: {shell:?}");
    }
    Ok(())
}
