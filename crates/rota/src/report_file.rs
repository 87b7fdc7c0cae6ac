//! A file that a command writes a report into (`rota history --svg FILE`, `--html FILE`),
//! checked before any work is done and replaced whole at the end.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use tempfile::NamedTempFile;

/// A report's destination, known to be writable: a temporary file beside it holds the report
/// until [`ReportFile::write`] puts it in place in one rename, so that a reader never sees
/// half a file and a failed command leaves an older report as it was.
pub struct ReportFile {
    flag: &'static str,
    path: PathBuf,
    temp: NamedTempFile,
}

/// The files `--svg` and `--html` name, checked before the store is opened, so that a typo
/// in a path costs no query.
pub fn pair(
    svg: Option<&Path>,
    html: Option<&Path>,
) -> Result<(Option<ReportFile>, Option<ReportFile>)> {
    if let (Some(svg), Some(html)) = (svg, html)
        && svg == html
    {
        bail!(
            "--svg and --html both name {}: expected two different files",
            svg.display()
        );
    }
    let svg = svg
        .map(|path| ReportFile::prepare("--svg", path))
        .transpose()?;
    let html = html
        .map(|path| ReportFile::prepare("--html", path))
        .transpose()?;
    Ok((svg, html))
}

impl ReportFile {
    /// Checks that `path`, given with `flag`, can be written: not a directory, in a directory
    /// that exists and takes new files, and, if it exists, writable itself.
    pub fn prepare(flag: &'static str, path: &Path) -> Result<ReportFile> {
        let shown = path.display();
        if path.is_dir() {
            bail!("{flag} {shown}: is a directory; expected the path of a file to write");
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            bail!(
                "{flag} {shown}: the directory {} does not exist; expected the path of a file in an existing directory",
                dir.display()
            );
        }
        if path.exists() {
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("{flag} {shown}: cannot write to the file"))?;
        }
        let temp = tempfile::Builder::new()
            .prefix(".rota-")
            .tempfile_in(dir)
            .with_context(|| {
                format!("{flag} {shown}: cannot create a file in {}", dir.display())
            })?;
        Ok(ReportFile {
            flag,
            path: path.to_owned(),
            temp,
        })
    }

    /// Writes `contents` and puts the file in place.
    pub fn write(mut self, contents: &str) -> Result<()> {
        let (flag, shown) = (self.flag, self.path.display().to_string());
        self.temp
            .write_all(contents.as_bytes())
            .and_then(|()| self.temp.flush())
            .with_context(|| format!("{flag} {shown}: writing the report"))?;
        // NamedTempFile makes its file readable by its owner only; a report is for sharing.
        set_readable(self.temp.path());
        self.temp
            .persist(&self.path)
            .with_context(|| format!("{flag} {shown}: putting the report in place"))?;
        Ok(())
    }
}

/// Read and write for its owner, read for everyone, like a file the shell creates; a report
/// stays private where it was, so this is best effort.
fn set_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(flag: &'static str, path: &Path) -> String {
        match ReportFile::prepare(flag, path) {
            Ok(_) => panic!("{} was accepted", path.display()),
            Err(err) => format!("{err:#}"),
        }
    }

    #[test]
    fn unwritable_paths_are_refused_naming_the_flag_and_the_path() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let missing = dir.path().join("no/such/t.svg");
        let err = error("--svg", &missing);
        assert!(
            err.starts_with(&format!("--svg {}: the directory", missing.display())),
            "{err}"
        );
        let err = error("--html", dir.path());
        assert!(
            err.contains("--html") && err.contains("is a directory"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn the_report_replaces_the_file_whole() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t.svg");
        std::fs::write(&path, "an older, longer report")?;
        let file = ReportFile::prepare("--svg", &path)?;
        assert_eq!(std::fs::read_to_string(&path)?, "an older, longer report");
        file.write("<svg/>")?;
        assert_eq!(std::fs::read_to_string(&path)?, "<svg/>");
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path())?.count(), 1);
        Ok(())
    }
}
