//! The operators' audit trail from the command line's side: who runs an operator command, and
//! the record of what it did, written once it is done.

use std::sync::Arc;

use anyhow::{Context, Result};
use backon::Retryable;
use rota_core::{NodeName, Process};
use rota_store::{NewAuditRecord, OperatorCommand, Store};

use crate::cli::StoreArgs;

/// An operator's handle on the store: the store, and who the store records as acting.
pub struct Operator {
    pub store: Arc<dyn Store>,
    by: String,
}

impl Operator {
    /// Opens the store and learns who runs the command (in Kubernetes, from the API server),
    /// before anything is changed: an operator who cannot be named changes nothing.
    pub async fn open(args: &StoreArgs) -> Result<Operator> {
        let (store, by) = crate::store::open_operator(args).await?;
        Ok(Operator { store, by })
    }

    /// Writes the audit record of a command that was done. When this fails what the command
    /// did stands, and the error says so.
    pub async fn record(
        &self,
        command: OperatorCommand,
        node: Option<&NodeName>,
        process: Option<&Process>,
        reason: Option<&str>,
    ) -> Result<()> {
        let record = NewAuditRecord {
            command,
            node: node.cloned(),
            process: process.cloned(),
            by: self.by.clone(),
            reason: reason.map(str::to_owned),
        };
        // A RotaAuditRecord CRD installed a moment ago answers 429 until its storage is ready.
        (|| self.store.record_audit(&record))
            .retry(rota_store::retry_pauses().with_max_times(6))
            .when(rota_store::Error::is_unavailable)
            .await
            .with_context(|| {
                format!(
                    "the {} was done, but recording it in the audit trail failed",
                    record.command
                )
            })?;
        Ok(())
    }
}
