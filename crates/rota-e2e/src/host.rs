//! One simulated host on this machine, without Kubernetes, for the tests that run the agent on
//! a real SQLite store: in-process (`crates/rota-agent/tests/`) and as a `rota agent` process
//! (`crates/rota/tests/`). Each harness wraps a [`HostDir`] with its own way of running agents
//! and logging their node actions, and waits on the node's record with [`wait_for`] and
//! [`wait_until`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rota_core::{HistoryEvent, NodeName, Process};
use rota_store::{HistoryFilter, NodeRecord, Session, SqliteStore, Store, StoreExt};

/// How long a wait on the agent may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn touch(path: &Path) {
    std::fs::write(path, b"").expect("touch");
}

/// A host's temporary directory: its root (with `/run` and `/var/run`) under `root/`, its boot
/// id in `boot_id` (`boot-1` to begin with) and, unless it shares another host's, the SQLite
/// store in `rota.db`.
pub struct HostDir {
    pub dir: tempfile::TempDir,
    pub node: NodeName,
    /// The SQLite store its agents use: its own, or a fleet's shared with other hosts.
    pub db: PathBuf,
}

impl HostDir {
    /// The directory of host `node`, whose store is `db` or else its own.
    pub fn new(node: &str, db: Option<PathBuf>) -> HostDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["root/run", "root/var/run"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        let db = db.unwrap_or_else(|| dir.path().join("rota.db"));
        let host = HostDir {
            dir,
            node: NodeName::new(node).expect("name"),
            db,
        };
        host.set_boot_id("boot-1");
        host
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn root(&self, relative: &str) -> PathBuf {
        self.path("root").join(relative)
    }

    pub fn set_boot_id(&self, id: &str) {
        std::fs::write(self.path("boot_id"), format!("{id}\n")).expect("boot id");
    }

    /// What a reboot does to the host: a new boot id and an empty `/run`.
    pub fn reboot_host(&self, boot_id: &str) {
        self.set_boot_id(boot_id);
        let _ = std::fs::remove_file(self.root("run/reboot-needed"));
    }
}

/// Waits until the node's record, as `record` reads it, satisfies `ok`; fails the test after
/// [`PATIENCE`] with the record and the host's node actions (`log`).
pub async fn wait_for(
    what: &str,
    ok: impl Fn(&NodeRecord) -> bool,
    record: impl AsyncFn() -> Option<NodeRecord>,
    log: impl Fn() -> Vec<String>,
) -> NodeRecord {
    poll(
        async || record().await.filter(|r| ok(r)),
        async || {
            format!(
                "node never became {what}: {:?}, actions {:?}",
                record().await,
                log()
            )
        },
    )
    .await
}

/// Waits until `ok`; fails the test after [`PATIENCE`] with the node's record and the host's
/// node actions, as [`wait_for`] does.
pub async fn wait_until(
    what: &str,
    ok: impl Fn() -> bool,
    record: impl AsyncFn() -> Option<NodeRecord>,
    log: impl Fn() -> Vec<String>,
) {
    poll(
        async || ok().then_some(()),
        async || {
            format!(
                "{what} never happened: {:?}, actions {:?}",
                record().await,
                log()
            )
        },
    )
    .await
}

/// Checks every 50 ms until `check` yields a value; after [`PATIENCE`], fails the test with
/// what `failure` says.
async fn poll<T>(check: impl AsyncFn() -> Option<T>, failure: impl AsyncFn() -> String) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < PATIENCE, "{}", failure().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The store's whole history, as what happened to which process.
pub async fn history(store: &SqliteStore) -> Vec<(Process, HistoryEvent)> {
    store
        .history(&HistoryFilter::default())
        .await
        .expect("history")
        .into_iter()
        .map(|e| (e.process, e.event))
        .collect()
}

/// Makes `node` hold the store's only slot through a session of its own: it requests a reboot
/// (from `source`), queues and is granted the slot, as an agent would.
pub async fn take_the_only_slot(store: &SqliteStore, node: &NodeName, source: &str) -> Session {
    store.set_concurrency(1).await.expect("concurrency");
    let session = store
        .open_session(node, Duration::from_secs(600))
        .await
        .expect("session");
    store
        .add_request(&session, &Process::Reboot, source)
        .await
        .expect("request");
    crate::turn::queue(store, &session).await;
    let granted = store.try_acquire_slot(&session).await.expect("acquire");
    assert!(granted.slot().is_some(), "{node} holds the slot");
    session
}
