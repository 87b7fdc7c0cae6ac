//! The operators' audit trail: `RotaAuditRecord` objects (see [`rota_kube_api::audit_record`]).

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{ListParams, PostParams};
use rota_kube_api::audit_record;
use rota_store::{AuditRecord, Error, HistoryFilter, NewAuditRecord, Result, now_millis};
use tracing::warn;

use super::KubeStore;
use crate::error::Context;

const ROTA_AUDIT_RECORDS: &str = "rotaauditrecords.rota.dev";
const SELF_SUBJECT_REVIEWS: &str = "selfsubjectreviews.authentication.k8s.io";

impl KubeStore {
    /// Who this handle's operator is, as its commands are audited: the API user, as the API
    /// server authenticates these credentials.
    pub async fn actor(&self) -> Result<String> {
        let review = self
            .inner
            .reviews
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .context("create", SELF_SUBJECT_REVIEWS, "")?;
        review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                Error::Backend("the API server named no user for these credentials".into())
            })
    }

    /// `Store::record_audit`: a new RotaAuditRecord, at this process's time.
    pub(super) async fn write_audit(&self, new: &NewAuditRecord) -> Result<AuditRecord> {
        let at = now_millis();
        let created = self
            .inner
            .audit_records
            .create(&PostParams::default(), &audit_record::object(new, at))
            .await
            .context(
                "create",
                ROTA_AUDIT_RECORDS,
                self.lease_path(&format!("{}-", new.command)),
            )?;
        audit_record::record(&created)
    }

    /// The audit records that `filter` lets through (see `AuditRecord::matches`), oldest
    /// first; a filter on a history event lets none through, without a request.
    pub(super) async fn read_audit(&self, filter: &HistoryFilter) -> Result<Vec<AuditRecord>> {
        if filter.event.is_some() {
            return Ok(Vec::new());
        }
        let objects = self
            .inner
            .audit_records
            .list(&ListParams::default())
            .await
            .context("list", ROTA_AUDIT_RECORDS, self.lease_path(""))?;
        let mut records: Vec<AuditRecord> = objects
            .items
            .iter()
            .filter_map(|object| match audit_record::record(object) {
                Ok(record) => Some(record),
                Err(e) => {
                    warn!(error = %e, "leaving out a RotaAuditRecord that does not read");
                    None
                }
            })
            .filter(|record| admits(filter, record))
            .collect();
        records.sort_by_key(|r| r.at);
        Ok(records)
    }
}

/// Whether a history filter lets an audit record through: its node and process filters match
/// only commands on that node or process, and an event filter (history events only) none.
fn admits(filter: &HistoryFilter, record: &AuditRecord) -> bool {
    filter.event.is_none()
        && filter
            .node
            .as_ref()
            .is_none_or(|n| record.node.as_ref() == Some(n))
        && filter
            .process
            .as_ref()
            .is_none_or(|p| record.process.as_ref() == Some(p))
        && filter.since.is_none_or(|since| record.at >= since)
        && filter.until.is_none_or(|until| record.at <= until)
}
