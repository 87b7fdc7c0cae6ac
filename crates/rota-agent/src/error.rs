use std::path::PathBuf;

use rota_core::{NodeName, TransitionError};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the boot id from {path}: {source}")]
    BootId {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("boot id file {path} is empty")]
    EmptyBootId { path: PathBuf },
    #[error("watching sentinels: {0}")]
    Sentinel(#[from] rota_sentinel::Error),
    #[error("store: {0}")]
    Store(#[from] rota_store::Error),
    #[error("lifecycle: {0}")]
    Transition(#[from] TransitionError),
    #[error("{what} {path}: {source}")]
    HostFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "another agent took over node {node} (its session is no longer current); this one stops"
    )]
    Superseded { node: NodeName },
    #[error("--group-limit {0}")]
    GroupLimit(#[from] rota_core::GroupLimitAboveConcurrency),
    #[error("the sentinel watcher of node {node} stopped")]
    WatcherStopped { node: NodeName },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
