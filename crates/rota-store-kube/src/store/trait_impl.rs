//! [`Store`] for [`KubeStore`]: each method handed to the file of its concern (see the map in
//! `store`).

use std::time::Duration;

use async_trait::async_trait;
use rota_core::{NodeName, ProcedureSpec, Write};
use rota_store::{
    Acquire, AuditRecord, Fleet, History, HistoryFilter, NewAuditRecord, NodeOverview, Part, Pause,
    ProcedureRecord, Result, Session, Setting, Settings, Store, Writer, Written,
};
use tokio::sync::watch;

use super::KubeStore;

#[async_trait]
impl Store for KubeStore {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        self.start_session(node, ttl).await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        self.renew_session(session, ttl).await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        self.end_session(session).await
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        self.take_turn(session).await
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        self.prove_turn(session, ttl).await
    }

    async fn write(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        self.apply_write(writer, write).await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    async fn record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        self.read_record(node).await
    }

    async fn fleet(&self) -> Result<Fleet> {
        self.read_fleet().await
    }

    async fn settings(&self) -> Result<Settings> {
        self.read_settings().await
    }

    async fn set(&self, setting: Setting) -> Result<Option<Pause>> {
        self.change_setting(setting).await
    }

    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        let (record, changed) = self.inner.procedures.submit(spec).await?;
        if changed {
            self.wake_agents(None).await;
        }
        Ok((record, changed))
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        // An agent's handle reads them from the API server's cache; an operator's command
        // reads them as they are now.
        self.inner.procedures.list(self.has_local_sessions()).await
    }

    async fn read_history(&self, filter: &HistoryFilter, part: Part) -> Result<History> {
        if part == Part::Audit {
            return Ok(History {
                audit: self.read_audit(filter).await?,
                ..History::default()
            });
        }
        self.read_past(filter, part).await
    }

    async fn record_audit(&self, record: &NewAuditRecord) -> Result<AuditRecord> {
        self.write_audit(record).await
    }
}
