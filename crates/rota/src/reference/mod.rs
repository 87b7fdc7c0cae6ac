//! The generated references, chapters of the book that cannot drift from what they describe:
//! the command line from the clap types (`cli`, also the man pages) and the chart's values from
//! its schema and `values.yaml` (`chart_values`). Each test fails while a committed file
//! differs from what it generates; with `ROTA_UPDATE_REFERENCE=1` it writes the file instead.
//! Tests only: the release binary carries none of it.

mod chart_values;
mod cli;
mod markdown;

use std::path::{Path, PathBuf};

/// The command that regenerates every generated reference file, as the failures print it: the
/// tests of this module, by the name they share.
const REGENERATE: &str = "ROTA_UPDATE_REFERENCE=1 cargo nextest run -p rota --bin rota reference";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether this run writes the generated files rather than compares them.
fn updating() -> bool {
    std::env::var_os("ROTA_UPDATE_REFERENCE").is_some()
}

/// Compares a generated file with the committed one, or writes it with `ROTA_UPDATE_REFERENCE`.
/// Returns the stale file's path, if it is.
fn check_or_write(path: &Path, generated: &[u8]) -> Option<String> {
    if updating() {
        std::fs::create_dir_all(path.parent().expect("a file in a directory")).expect("mkdir");
        std::fs::write(path, generated).expect("write the reference");
        return None;
    }
    match std::fs::read(path) {
        Ok(committed) if committed == generated => None,
        _ => Some(path.display().to_string()),
    }
}

/// Fails with the stale files and the command that regenerates them, unless there are none.
fn assert_current(what: &str, stale: &[String]) {
    assert!(
        stale.is_empty(),
        "{what} is stale ({}); regenerate it with: {REGENERATE}",
        stale.join(", ")
    );
}
