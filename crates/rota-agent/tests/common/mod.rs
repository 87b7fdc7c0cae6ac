//! What the agent's integration tests share.

pub mod host;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rota_agent::{ActionError, AgentConfig, NodeActions, RebootHandle};
use rota_core::{NodeName, ProcedureSpec, Process};
use rota_store::{
    Acquire, BackoffRecord, Blocked, HistoryEntry, HistoryFilter, Millis, NodeRecord, Outcome,
    Pause, ProcedureRecord, RequestRecord, Result, Session, SlotHolder, Store, Transition,
};
use tokio::sync::watch;

/// An agent's configuration for `node` on a host under `dir`: `dir/host` as the host root,
/// with a `/run` and the boot id `boot-1`.
#[allow(dead_code, reason = "not every test binary uses every helper")]
pub fn host_config(dir: &std::path::Path, node: &NodeName) -> AgentConfig {
    let root = dir.join("host");
    std::fs::create_dir_all(root.join("run")).expect("/run");
    std::fs::write(root.join("boot_id"), "boot-1\n").expect("a boot id");
    let mut config = AgentConfig::new(node.clone());
    config.boot_id_file = root.join("boot_id");
    config.host_root = root;
    config
}

/// Node actions for agents that never get as far as a reboot: they count the cordon reads.
#[allow(dead_code, reason = "not every test binary uses every helper")]
#[derive(Default)]
pub struct CountingActions {
    pub cordon_reads: AtomicUsize,
}

#[async_trait]
impl NodeActions for CountingActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        self.cordon_reads.fetch_add(1, Ordering::SeqCst);
        Ok(false)
    }

    async fn drain(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        Err(ActionError {
            action: "reboot",
            detail: "not in this test".into(),
        })
    }

    async fn health(&self) -> Result<(), ActionError> {
        Ok(())
    }
}

/// A store that records, in order, the writes an agent makes through it that prove or change
/// its node: `fence`, `transition <from>-><to>` and `fenced_transition <from>-><to>`; every
/// call goes on to the real store inside.
#[allow(dead_code, reason = "not every test binary uses every helper")]
pub struct RecordingStore {
    pub inner: Arc<dyn Store>,
    pub calls: Mutex<Vec<String>>,
}

#[allow(dead_code, reason = "not every test binary uses every helper")]
impl RecordingStore {
    pub fn new(inner: Arc<dyn Store>) -> RecordingStore {
        RecordingStore {
            inner,
            calls: Mutex::new(Vec::new()),
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record(&self, call: String) {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
    }
}

#[async_trait]
impl Store for RecordingStore {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        self.inner.open_session(node, ttl).await
    }
    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        self.inner.heartbeat(session, ttl).await
    }
    async fn close_session(&self, session: &Session) -> Result<()> {
        self.inner.close_session(session).await
    }
    async fn concurrency(&self) -> Result<Option<u32>> {
        self.inner.concurrency().await
    }
    async fn set_concurrency(&self, concurrency: u32) -> Result<()> {
        self.inner.set_concurrency(concurrency).await
    }
    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        self.inner.try_acquire_slot(session).await
    }
    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        self.record("fence".into());
        self.inner.fence(session, ttl).await
    }
    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        self.inner.slot_holders().await
    }
    async fn add_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        self.inner.add_request(session, process, source).await
    }
    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool> {
        self.inner.cancel_request(session, process).await
    }
    async fn open_requests(&self, node: &NodeName) -> Result<Vec<RequestRecord>> {
        self.inner.open_requests(node).await
    }
    async fn all_requests(&self) -> Result<Vec<RequestRecord>> {
        self.inner.all_requests().await
    }
    async fn complete_request(
        &self,
        session: &Session,
        process: &Process,
        outcome: &Outcome,
    ) -> Result<RequestRecord> {
        self.inner.complete_request(session, process, outcome).await
    }
    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        self.inner.submit_procedure(spec).await
    }
    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        self.inner.procedures().await
    }
    async fn transition(&self, session: &Session, transition: Transition) -> Result<NodeRecord> {
        self.record(format!("transition {}->{}", transition.from, transition.to));
        self.inner.transition(session, transition).await
    }
    async fn fenced_transition(
        &self,
        session: &Session,
        transition: Transition,
        ttl: Duration,
    ) -> Result<NodeRecord> {
        self.record(format!(
            "fenced_transition {}->{}",
            transition.from, transition.to
        ));
        self.inner.fenced_transition(session, transition, ttl).await
    }
    async fn set_blocked(&self, session: &Session, blocked: Option<&Blocked>) -> Result<bool> {
        self.inner.set_blocked(session, blocked).await
    }
    async fn node(&self, node: &NodeName) -> Result<Option<NodeRecord>> {
        self.inner.node(node).await
    }
    fn refresh(&self, node: &NodeName) {
        self.inner.refresh(node);
    }
    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        self.inner.nodes().await
    }
    async fn backoffs(&self, node: &NodeName) -> Result<Vec<BackoffRecord>> {
        self.inner.backoffs(node).await
    }
    async fn history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
        self.inner.history(filter).await
    }
    async fn unlock(&self, node: &NodeName, reason: &str) -> Result<NodeRecord> {
        self.inner.unlock(node, reason).await
    }
    async fn retry(&self, node: &NodeName) -> Result<NodeRecord> {
        self.inner.retry(node).await
    }
    async fn request(
        &self,
        node: &NodeName,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        self.inner.request(node, process, source).await
    }
    async fn cancel(&self, node: &NodeName, process: &Process) -> Result<bool> {
        self.inner.cancel(node, process).await
    }
    async fn pause(&self, reason: &str) -> Result<Pause> {
        self.inner.pause(reason).await
    }
    async fn resume(&self) -> Result<Option<Pause>> {
        self.inner.resume().await
    }
    async fn resumed_at(&self) -> Result<Option<Millis>> {
        self.inner.resumed_at().await
    }
    async fn paused(&self) -> Result<Option<Pause>> {
        self.inner.paused().await
    }
    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes()
    }
}
