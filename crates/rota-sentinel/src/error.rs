use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while watching sentinels. Each variant names the path at fault
/// and what was being done with it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("sentinel path {path} is not absolute")]
    RelativePath { path: PathBuf },
    #[error("sentinel path {path} is not a file path (it has no file name or contains `..`)")]
    NotAFilePath { path: PathBuf },
    #[error("{path} exists but is not a directory, so sentinel {sentinel} can never be created")]
    NotADirectory { sentinel: PathBuf, path: PathBuf },
    #[error("cannot inspect {path} (on the way to sentinel {sentinel}): {source}")]
    Inspect {
        sentinel: PathBuf,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot watch directory {path} (for sentinel {sentinel}) with inotify: {source}")]
    Watch {
        sentinel: PathBuf,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot watch directory {path} (for sentinel {sentinel}): the inotify watch limit is reached; raise fs.inotify.max_user_watches"
    )]
    WatchLimit { sentinel: PathBuf, path: PathBuf },
    #[error(
        "cannot create the process-wide inotify instance (limit: fs.inotify.max_user_instances): {source}"
    )]
    Init {
        #[source]
        source: io::Error,
    },
    #[error("the safety re-check interval must be greater than zero")]
    ZeroRecheckInterval,
    #[error("SentinelWatcher::spawn must be called from within a tokio runtime")]
    NoRuntime,
    #[error("reading inotify events failed: {reason}")]
    EventReader { reason: String },
    #[error("the sentinel watch task panicked or was aborted: {source}")]
    Task {
        #[source]
        source: tokio::task::JoinError,
    },
}
