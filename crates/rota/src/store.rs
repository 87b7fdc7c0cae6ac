//! Where the fleet's state lives (`--store`), and opening it: the SQL stores through
//! `rota_store::StoreUrl`, the Kubernetes store through a client built from `--kubeconfig`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use backon::Retryable as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rota_store::{Store, StoreUrl};
use rota_store_kube::{KubeError, KubeStore, KubeStoreConfig};
use tracing::warn;

use crate::cli::StoreArgs;

/// `--store`: `kube`, or a SQL store's URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// In the cluster: slot Leases and RotaNode resources.
    Kube,
    Url(StoreUrl),
}

impl FromStr for StoreLocation {
    type Err = String;

    fn from_str(value: &str) -> Result<StoreLocation, String> {
        if value == "kube" {
            return Ok(StoreLocation::Kube);
        }
        value
            .parse()
            .map(StoreLocation::Url)
            .map_err(|e: rota_store::Error| format!("{e}, or kube (in a cluster)"))
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Kube => f.write_str("kube"),
            StoreLocation::Url(url) => url.fmt(f),
        }
    }
}

/// The process's one client for the cluster, built the first time something needs it: the
/// store, the drain, the blockers and the start-up checks share its connections. Built lazily,
/// so that flags are checked (and refused) before the kubeconfig is even read.
pub struct Cluster {
    kubeconfig: Option<PathBuf>,
    client: tokio::sync::OnceCell<kube::Client>,
}

impl Cluster {
    pub fn new(kubeconfig: Option<PathBuf>) -> Cluster {
        Cluster {
            kubeconfig,
            client: tokio::sync::OnceCell::new(),
        }
    }

    pub async fn client(&self) -> Result<kube::Client> {
        self.client
            .get_or_try_init(|| client(self.kubeconfig.as_ref()))
            .await
            .cloned()
    }
}

/// A client for the cluster: `--kubeconfig` if given, else `KUBECONFIG`, `~/.kube/config` or
/// the pod's service account. kube's own retries are off: the drain must see a budget's 429.
pub async fn client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None => match kube::Config::infer().await {
            Ok(config) => config,
            Err(_) if in_pod_without_token() => bail!(
                "this pod has no service account token ({SERVICE_ACCOUNT_TOKEN} does not exist) \
                 and no kubeconfig: run it with a ServiceAccount whose token is mounted (not \
                 automountServiceAccountToken: false), as the chart's DaemonSet does"
            ),
            Err(e) => Err(e)
                .context("finding the cluster (in-cluster config, KUBECONFIG or ~/.kube/config)")?,
        },
    };
    rota_kube_client::client(config).context("creating the Kubernetes client")
}

/// Where Kubernetes mounts a pod's service account token.
const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// In a pod (Kubernetes sets `KUBERNETES_SERVICE_HOST` in every container) that was given no
/// kubeconfig and no service account token: kube's own error names every place it looked,
/// not which one should have been there.
fn in_pod_without_token() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && std::env::var_os("KUBECONFIG").is_none()
        && !std::env::var_os("HOME")
            .is_some_and(|home| Path::new(&home).join(".kube/config").exists())
        && !Path::new(SERVICE_ACCOUNT_TOKEN).exists()
}

/// Opens the store. `create` is false for operator commands, which never create a new, empty
/// SQLite database: a wrong path would otherwise show an empty fleet instead of an error.
pub async fn open(args: &StoreArgs, create: bool) -> Result<Arc<dyn Store>> {
    open_in(args, create, &Cluster::new(args.kubeconfig.clone()), false).await
}

/// The agent's store, created if it is a new SQLite file. While the store is unavailable (the
/// API server or the database restarting, refusing connections, overloaded) it waits and tries
/// again with the pauses of every later call, saying so in the log: an agent that exited would
/// only be restarted by its supervisor, later, with nothing gained.
pub async fn open_for_agent(args: &StoreArgs, cluster: &Cluster) -> Result<Arc<dyn Store>> {
    (|| open_in(args, true, cluster, true))
        .retry(rota_store::retry_pauses())
        .when(unavailable)
        .notify(|e, pause| {
            warn!(error = format!("{e:#}"), pause = ?pause, "the store is unavailable; opening it again");
        })
        .await
}

/// Whether `e` is a store's or the API server's unavailability, under any context.
fn unavailable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<KubeError>()
            .is_some_and(KubeError::is_unavailable)
            || cause
                .downcast_ref::<rota_store::Error>()
                .is_some_and(rota_store::Error::is_unavailable)
    })
}

/// The store of an operator command that changes something, and who runs it as the audit
/// trail records them: the API user in Kubernetes (as the API server authenticates the
/// credentials), `user@host` on the SQL stores. Both are learnt before anything changes: an
/// operator who cannot be named changes nothing.
pub async fn open_operator(args: &StoreArgs) -> Result<(Arc<dyn Store>, String)> {
    let who = "learning who runs this command, for the audit trail";
    match &args.store {
        StoreLocation::Kube => {
            let cluster = Cluster::new(args.kubeconfig.clone());
            let store = open_kube(args, &cluster, false).await?;
            let actor = store.actor().await.context(who)?;
            Ok((Arc::new(store), actor))
        }
        StoreLocation::Url(_) => Ok((open(args, false).await?, os_actor())),
    }
}

/// Who runs this process, as the SQL stores record an operator: the OS user and the host.
pub fn os_actor() -> String {
    let user = whoami::fallible::username().unwrap_or_else(|_| "unknown-user".to_owned());
    let host = whoami::fallible::hostname().unwrap_or_else(|_| "unknown-host".to_owned());
    format!("{user}@{host}")
}

/// [`open`], with the Kubernetes store on `cluster`'s client; `checked`: the caller has just
/// made the store's check of the cluster (see `KubeStore::open`).
pub async fn open_in(
    args: &StoreArgs,
    create: bool,
    cluster: &Cluster,
    checked: bool,
) -> Result<Arc<dyn Store>> {
    match &args.store {
        StoreLocation::Kube => Ok(Arc::new(open_kube(args, cluster, checked).await?)),
        StoreLocation::Url(StoreUrl::Sqlite(path)) if !create && !path.exists() => bail!(
            "store {} does not exist: give the fleet's store with --store or ROTA_STORE",
            args.store
        ),
        StoreLocation::Url(url) => url
            .open()
            .await
            .with_context(|| format!("opening the store {url}")),
    }
}

/// The Kubernetes store in `args.namespace`, on `cluster`'s client (see [`open_in`]).
async fn open_kube(args: &StoreArgs, cluster: &Cluster, checked: bool) -> Result<KubeStore> {
    let client = cluster.client().await?;
    let config = KubeStoreConfig {
        namespace: args.namespace.clone(),
        kept_windows: usize::from(args.kept_windows),
        ..KubeStoreConfig::default()
    };
    if checked {
        return Ok(KubeStore::open(client, config));
    }
    KubeStore::connect(client, config)
        .await
        .context("opening the Kubernetes store")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_os_actor_names_a_user_and_a_host() {
        let actor = super::os_actor();
        let (user, host) = actor.split_once('@').expect("user@host");
        assert!(!user.is_empty() && !host.is_empty(), "{actor}");
    }
}
