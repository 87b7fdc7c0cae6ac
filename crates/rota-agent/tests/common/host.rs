//! The in-process harness of the agent-loop tests: one host in a temporary directory (its root,
//! boot id and real SQLite store), `rota_agent::Agent` in the test's own runtime with node
//! actions that log each action, and waits on the store. A reboot is what it is to the
//! subprocess harness of `crates/rota`: the reboot action only logs; the test then stops the
//! agent, gives the host a new boot id and starts a new agent, a new incarnation on the same host.
#![allow(
    dead_code,
    reason = "each test binary uses its own part of the harness"
)]

use std::collections::VecDeque;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use rota_actions::{ActionError, NodeActions, RebootHandle};
use rota_agent::{Agent, AgentConfig};
use rota_core::{HistoryEvent, ProcedureSpec, Process};
use rota_e2e::host::{self, HostDir};
use rota_observer::AgentObserver;
use rota_store::{HistoryFilter, Millis, NodeRecord, SqliteStore, Store, StoreExt, now_millis};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Node actions that log each action they take (`drain`, `uncordon`, `reboot`, `health`), in
/// order. One host's agents share them, so the log spans incarnations as a host's log file
/// would.
#[derive(Default)]
pub struct LoggingActions {
    log: Mutex<Vec<String>>,
    /// The log with when each action was taken (store time), for tests that order actions.
    stamped: Mutex<Vec<(String, Millis)>>,
    /// When each health check was made (store time), for tests that order it against history.
    health_checks: Mutex<Vec<Millis>>,
    /// What every drain fails with, once set.
    drain_failure: Mutex<Option<String>>,
    /// How long each of the next drains takes, one entry a drain; the rest take no time.
    drain_holds: Mutex<VecDeque<Duration>>,
}

impl LoggingActions {
    fn note(&self, action: &str) {
        lock(&self.log).push(action.to_string());
        lock(&self.stamped).push((action.to_string(), now_millis()));
    }

    /// When each logged action was taken, in order.
    pub fn stamped(&self) -> Vec<(String, Millis)> {
        lock(&self.stamped).clone()
    }

    /// Every drain from now on logs itself and then fails with `cause`.
    pub fn fail_drains(&self, cause: &str) {
        *lock(&self.drain_failure) = Some(cause.to_string());
    }

    /// The next drain logs itself and then takes `hold` before it succeeds.
    pub fn hold_next_drain(&self, hold: Duration) {
        lock(&self.drain_holds).push_back(hold);
    }

    pub fn health_checks(&self) -> Vec<Millis> {
        lock(&self.health_checks).clone()
    }
}

#[async_trait]
impl NodeActions for LoggingActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        Ok(false)
    }

    async fn cordon(&self) -> Result<(), ActionError> {
        self.note("cordon");
        Ok(())
    }

    async fn drain(&self) -> Result<(), ActionError> {
        self.note("drain");
        let hold = lock(&self.drain_holds).pop_front();
        if let Some(hold) = hold {
            tokio::time::sleep(hold).await;
        }
        let failure = lock(&self.drain_failure).clone();
        match failure {
            Some(detail) => Err(ActionError {
                action: "drain",
                detail,
            }),
            None => Ok(()),
        }
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        self.note("uncordon");
        Ok(())
    }

    /// Started and done at once, as a reboot command that returns before the machine goes
    /// down: only a new boot id, which the test gives, says the node rebooted.
    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        self.note("reboot");
        let (done, handle) = tokio::sync::oneshot::channel();
        let _ = done.send(Ok(()));
        Ok(handle)
    }

    async fn health(&self) -> Result<(), ActionError> {
        self.note("health");
        lock(&self.health_checks).push(now_millis());
        Ok(())
    }
}

/// A simulated host (its directory, node name and store: a [`HostDir`]) whose agents run in
/// the test's runtime.
pub struct Host {
    host: HostDir,
    pub actions: Arc<LoggingActions>,
    /// The test's own handle on the store, as an operator's process would have.
    store: SqliteStore,
}

impl Host {
    pub async fn new() -> Host {
        Host::named("node-a", None).await
    }

    /// Another host of `fleet`'s store, for tests with several nodes.
    pub async fn sharing(node: &str, fleet: &Host) -> Host {
        Host::named(node, Some(fleet.db.clone())).await
    }

    async fn named(node: &str, db: Option<PathBuf>) -> Host {
        let host = HostDir::new(node, db);
        let store = SqliteStore::open(&host.db).await.expect("open store");
        Host {
            host,
            actions: Arc::new(LoggingActions::default()),
            store,
        }
    }

    pub fn log(&self) -> Vec<String> {
        lock(&self.actions.log).clone()
    }

    pub fn count(&self, action: &str) -> usize {
        self.log().iter().filter(|l| *l == action).count()
    }

    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// The agent's configuration on this host: the host's root and boot id, one slot, and a
    /// health check every 100 ms.
    pub fn config(&self) -> AgentConfig {
        let mut config = AgentConfig::new(self.node.clone());
        config.host_root = self.path("root");
        config.boot_id_file = self.path("boot_id");
        config.concurrency = Some(1);
        config.health_interval = Duration::from_millis(100);
        config
    }

    pub async fn agent(&self) -> RunningAgent {
        self.agent_with(|_| {}).await
    }

    /// Starts an agent with this host's configuration as `configure` changes it. Each agent
    /// opens the store anew, as an agent process would.
    pub async fn agent_with(&self, configure: impl FnOnce(&mut AgentConfig)) -> RunningAgent {
        self.agent_observed(configure, None).await
    }

    /// [`Host::agent_with`], telling `observer` too what the agent does.
    pub async fn agent_observed(
        &self,
        configure: impl FnOnce(&mut AgentConfig),
        observer: Option<Arc<dyn AgentObserver>>,
    ) -> RunningAgent {
        let mut config = self.config();
        configure(&mut config);
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(&self.db).await.expect("open store"));
        let cancel = CancellationToken::new();
        let mut agent = Agent::new(config, store, self.actions.clone(), cancel.clone());
        if let Some(observer) = observer {
            agent = agent.observe(observer);
        }
        RunningAgent {
            cancel,
            task: Some(tokio::spawn(agent.run())),
        }
    }

    pub async fn record(&self) -> Option<NodeRecord> {
        self.store.node(&self.node).await.expect("read node")
    }

    /// Waits until the node's record satisfies `ok`.
    pub async fn wait_for(&self, what: &str, ok: impl Fn(&NodeRecord) -> bool) -> NodeRecord {
        host::wait_for(what, ok, async || self.record().await, || self.log()).await
    }

    pub async fn wait_until(&self, what: &str, ok: impl Fn() -> bool) {
        host::wait_until(what, ok, async || self.record().await, || self.log()).await
    }

    pub async fn history(&self) -> Vec<(Process, HistoryEvent)> {
        host::history(&self.store).await
    }

    /// This node's history entries of `event`.
    pub async fn entries(&self, event: HistoryEvent) -> Vec<rota_store::HistoryEntry> {
        self.store
            .history(&HistoryFilter {
                node: Some(self.node.clone()),
                event: Some(event),
                ..HistoryFilter::default()
            })
            .await
            .expect("history")
    }

    /// Submits `spec` as an operator's `rota mop submit` does: checked first, then stored.
    pub async fn submit(&self, spec: &ProcedureSpec) {
        spec.validate().expect("a valid procedure");
        if let Some(script) = &spec.script {
            spec.check_pin(script)
                .expect("a script that matches its pin");
        }
        self.store
            .submit_procedure(spec)
            .await
            .expect("the procedure is stored");
    }
}

impl Deref for Host {
    type Target = HostDir;

    fn deref(&self) -> &HostDir {
        &self.host
    }
}

/// An agent running in the test's runtime; dropping it shuts it down.
pub struct RunningAgent {
    cancel: CancellationToken,
    task: Option<JoinHandle<rota_agent::Result<()>>>,
}

impl RunningAgent {
    /// Shuts the agent down and waits for it: how its run ended.
    pub async fn stop(mut self) -> rota_agent::Result<()> {
        self.cancel.cancel();
        self.task
            .take()
            .expect("a running agent has its task")
            .await
            .expect("the agent did not panic")
    }
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
