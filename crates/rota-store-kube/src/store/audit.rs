//! The operators' audit trail: `RotaAction` objects (see [`crate::actions`]).

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{ListParams, PostParams};
use rota_store::{ActionRecord, Error, HistoryFilter, NewAction, Result, now_millis};
use tracing::warn;

use super::KubeStore;
use crate::actions;
use crate::error::Context;

const ROTA_ACTIONS: &str = "rotaactions.rota.dev";
const SELF_SUBJECT_REVIEWS: &str = "selfsubjectreviews.authentication.k8s.io";

impl KubeStore {
    /// Who this handle's operator is, as its actions are recorded: the API user, as the API
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

    /// `Store::record_action`: a new RotaAction, at this process's time.
    pub(super) async fn write_action(&self, action: &NewAction) -> Result<ActionRecord> {
        let at = now_millis();
        let created = self
            .inner
            .actions
            .create(&PostParams::default(), &actions::object(action, at))
            .await
            .context(
                "create",
                ROTA_ACTIONS,
                self.lease_path(&format!("{}-", action.action)),
            )?;
        actions::record(&created)
    }

    /// The recorded actions that `filter` lets through (see `ActionRecord::matches`), oldest
    /// first; a filter on a history event lets none through, without a request.
    pub(super) async fn read_actions(&self, filter: &HistoryFilter) -> Result<Vec<ActionRecord>> {
        if filter.event.is_some() {
            return Ok(Vec::new());
        }
        let objects = self
            .inner
            .actions
            .list(&ListParams::default())
            .await
            .context("list", ROTA_ACTIONS, self.lease_path(""))?;
        let mut records: Vec<ActionRecord> = objects
            .items
            .iter()
            .filter_map(|object| match actions::record(object) {
                Ok(record) => Some(record),
                Err(e) => {
                    warn!(error = %e, "leaving out a RotaAction that does not read");
                    None
                }
            })
            .filter(|record| record.matches(filter))
            .collect();
        records.sort_by_key(|r| r.at);
        Ok(records)
    }
}
