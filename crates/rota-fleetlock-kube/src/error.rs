use thiserror::Error;

/// What keeps the FleetLock server from serving a cluster's hosts.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] rota_kube_api::ApiError),
    #[error(
        "the FleetLock server's service account lacks {count} RBAC permission(s) it needs: \
         {missing}; the chart (charts/rota, fleetlock.enabled=true) grants them all"
    )]
    Permissions { count: usize, missing: String },
    #[error("the watch of the Nodes labelled {selector} ended before it listed them")]
    WatchEnded { selector: &'static str },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
