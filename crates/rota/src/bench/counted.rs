//! A store that counts its calls: how many of each, and the time they took as their callers
//! waited for them (a pool's connection and the write gate included). The fleetlock workload
//! hands it to the server, to tell where a request's time goes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rota_core::{NodeName, ProcedureSpec, Write};
use rota_store::{
    Acquire, AuditRecord, Fleet, History, HistoryFilter, NewAuditRecord, NodeOverview, Part, Pause,
    ProcedureRecord, Result, Session, Setting, Settings, Store, Writer, Written,
};
use tokio::sync::watch;

/// The store's calls, by name; `writes` says which change the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    OpenSession,
    Heartbeat,
    CloseSession,
    TryAcquireSlot,
    Fence,
    Write,
    Record,
    Fleet,
    Settings,
    Set,
    SubmitProcedure,
    Procedures,
    ReadHistory,
    RecordAudit,
}

impl Call {
    pub const ALL: [Call; 14] = [
        Call::OpenSession,
        Call::Heartbeat,
        Call::CloseSession,
        Call::TryAcquireSlot,
        Call::Fence,
        Call::Write,
        Call::Record,
        Call::Fleet,
        Call::Settings,
        Call::Set,
        Call::SubmitProcedure,
        Call::Procedures,
        Call::ReadHistory,
        Call::RecordAudit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Call::OpenSession => "open_session",
            Call::Heartbeat => "heartbeat",
            Call::CloseSession => "close_session",
            Call::TryAcquireSlot => "try_acquire_slot",
            Call::Fence => "fence",
            Call::Write => "write",
            Call::Record => "record",
            Call::Fleet => "fleet",
            Call::Settings => "settings",
            Call::Set => "set",
            Call::SubmitProcedure => "submit_procedure",
            Call::Procedures => "procedures",
            Call::ReadHistory => "read_history",
            Call::RecordAudit => "record_audit",
        }
    }

    /// Whether the call is a write transaction. `try_acquire_slot` is a read, and a write
    /// only when the node's turn has come: counted apart.
    pub fn writes(self) -> bool {
        matches!(
            self,
            Call::OpenSession
                | Call::Heartbeat
                | Call::CloseSession
                | Call::Fence
                | Call::Write
                | Call::Set
                | Call::SubmitProcedure
                | Call::RecordAudit
        )
    }
}

#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    nanos: AtomicU64,
    max_nanos: AtomicU64,
}

/// One call's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    pub calls: u64,
    pub total: Duration,
    pub max: Duration,
}

pub struct Counted {
    inner: Arc<dyn Store>,
    tallies: [Tally; Call::ALL.len()],
}

impl Counted {
    pub fn new(inner: Arc<dyn Store>) -> Counted {
        Counted {
            inner,
            tallies: Default::default(),
        }
    }

    /// Every call made so far, in [`Call::ALL`]'s order.
    pub fn figures(&self) -> Vec<(Call, Figures)> {
        Call::ALL
            .iter()
            .zip(&self.tallies)
            .map(|(call, tally)| {
                let figures = Figures {
                    calls: tally.calls.load(Ordering::Relaxed),
                    total: Duration::from_nanos(tally.nanos.load(Ordering::Relaxed)),
                    max: Duration::from_nanos(tally.max_nanos.load(Ordering::Relaxed)),
                };
                (*call, figures)
            })
            .collect()
    }

    /// Forgets the calls so far.
    pub fn reset(&self) {
        for tally in &self.tallies {
            tally.calls.store(0, Ordering::Relaxed);
            tally.nanos.store(0, Ordering::Relaxed);
            tally.max_nanos.store(0, Ordering::Relaxed);
        }
    }

    async fn timed<T>(&self, call: Call, future: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let answer = future.await;
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let tally = &self.tallies[call as usize];
        tally.calls.fetch_add(1, Ordering::Relaxed);
        tally.nanos.fetch_add(nanos, Ordering::Relaxed);
        tally.max_nanos.fetch_max(nanos, Ordering::Relaxed);
        answer
    }
}

#[async_trait]
impl Store for Counted {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        self.timed(Call::OpenSession, self.inner.open_session(node, ttl))
            .await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        self.timed(Call::Heartbeat, self.inner.heartbeat(session, ttl))
            .await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        self.timed(Call::CloseSession, self.inner.close_session(session))
            .await
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        self.timed(Call::TryAcquireSlot, self.inner.try_acquire_slot(session))
            .await
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        self.timed(Call::Fence, self.inner.fence(session, ttl))
            .await
    }

    async fn write(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        self.timed(Call::Write, self.inner.write(writer, write))
            .await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes()
    }

    async fn record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        self.timed(Call::Record, self.inner.record(node)).await
    }

    async fn fleet(&self) -> Result<Fleet> {
        self.timed(Call::Fleet, self.inner.fleet()).await
    }

    async fn settings(&self) -> Result<Settings> {
        self.timed(Call::Settings, self.inner.settings()).await
    }

    async fn set(&self, setting: Setting) -> Result<Option<Pause>> {
        self.timed(Call::Set, self.inner.set(setting)).await
    }

    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        self.timed(Call::SubmitProcedure, self.inner.submit_procedure(spec))
            .await
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        self.timed(Call::Procedures, self.inner.procedures()).await
    }

    async fn read_history(&self, filter: &HistoryFilter, part: Part) -> Result<History> {
        self.timed(Call::ReadHistory, self.inner.read_history(filter, part))
            .await
    }

    async fn record_audit(&self, record: &NewAuditRecord) -> Result<AuditRecord> {
        self.timed(Call::RecordAudit, self.inner.record_audit(record))
            .await
    }
}
