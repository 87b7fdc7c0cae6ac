//! Procedures in the cluster: `Store::submit_procedure` creates a `Procedure` object and
//! `Store::procedures` lists them, with each script read from where the procedure says.
//!
//! Objects are named `<name_prefix><procedure name>` (the prefix is empty in production); a
//! listing only sees objects with the store's prefix. The order of submission is the
//! annotation `rota.dev/submitted-at` (Unix milliseconds) that `submit_procedure` writes, or
//! else the object's `creationTimestamp`, which has whole seconds only: procedures applied by
//! other means within one second are ordered by name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ListParams, PostParams, VersionMatch};
use rota_core::ProcedureSpec;
use rota_kube_api::procedure::{Procedure, ProcedureBody};
use rota_kube_client::is_conflict;
use rota_store::{Error, Millis, ProcedureRecord, Result, now_millis};
use tracing::warn;

use crate::error::Context;
use crate::watches::{ConfigWatch, ProcedureCache, revision};

pub(crate) const PROCEDURES: &str = "procedures.rota.dev";
const CONFIG_MAPS: &str = "configmaps";
/// When `submit_procedure` created the object, in Unix milliseconds.
pub const SUBMITTED_AT_ANNOTATION: &str = "rota.dev/submitted-at";

/// The store's view of the `Procedure` objects and the ConfigMaps their scripts live in.
#[derive(Clone)]
pub(crate) struct Procedures {
    pub api: Api<Procedure>,
    /// ConfigMaps of rota's namespace.
    pub config_maps: Api<ConfigMap>,
    /// The same, as their watch keeps them.
    pub config_watch: Arc<ConfigWatch>,
    pub namespace: String,
    pub prefix: String,
    /// The newest resourceVersion of the procedures this handle submitted: a list from the
    /// API server's cache waits until the cache holds it.
    pub submitted: Arc<Mutex<Option<u64>>>,
    /// An agent's last list: it answers while the procedures' fingerprint in `rota-config`
    /// is the list's.
    pub cache: Arc<ProcedureCache>,
}

impl Procedures {
    pub fn object_name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Creates the procedure; the same spec again returns the stored one, another spec under
    /// its name is refused.
    pub async fn submit(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        spec.validate()?;
        let name = self.object_name(&spec.name);
        let object = Procedure {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                annotations: Some(BTreeMap::from([(
                    SUBMITTED_AT_ANNOTATION.into(),
                    now_millis().to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: ProcedureBody::of(spec),
            status: None,
        };
        match self.api.create(&PostParams::default(), &object).await {
            Ok(created) => {
                self.remember(&created);
                Ok((self.record(&created, &spec.name)?, true))
            }
            Err(e) if is_conflict(&e) => {
                let existing = self.api.get(&name).await.context("get", PROCEDURES, name)?;
                self.remember(&existing);
                let record = self.record(&existing, &spec.name)?;
                if &record.spec == spec {
                    Ok((record, false))
                } else {
                    Err(Error::ProcedureConflict {
                        name: spec.name.clone(),
                    })
                }
            }
            Err(e) => Err(e).context("create", PROCEDURES, name),
        }
    }

    /// Makes `object` part of what this handle's lists from the cache must hold.
    fn remember(&self, object: &Procedure) {
        if let Some(version) = revision(&object.metadata) {
            let mut newest = self.submitted.lock().unwrap_or_else(|e| e.into_inner());
            *newest = Some(newest.map_or(version, |n| n.max(version)));
        }
    }

    /// Every procedure with the store's prefix, in the order they were submitted, each with
    /// its script resolved. An object whose spec does not parse is left out with a warning,
    /// so that one bad procedure does not stop the others.
    ///
    /// With `from_cache` (an agent's look), the last list answers while the fingerprint the
    /// scheduler published in `rota-config` is the list's (see `watches`); else the API server answers from its
    /// cache as it is (holding at least the procedures this handle submitted) instead of a
    /// consistent read. Agents that start together
    /// look at about the same time, and a consistent read of a resource that nobody writes
    /// waits for etcd's next progress report: in a 100-node simulation those lists took 12 ms
    /// at the median and up to 117 ms, and the requests around them (an eviction, a look at
    /// the queue) slowed down with them.
    pub async fn list(&self, from_cache: bool) -> Result<Vec<ProcedureRecord>> {
        let newest = self
            .submitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or(0);
        if from_cache
            && let Some(published) = self.config_watch.procedures()
            && let Some(objects) = self.cache.cached(&published, newest)
        {
            return self.records(&objects).await;
        }
        let params = if from_cache {
            ListParams::default()
                .matching(VersionMatch::NotOlderThan)
                .at(&newest.to_string())
        } else {
            ListParams::default()
        };
        let list = self
            .api
            .list(&params)
            .await
            .context("list", PROCEDURES, "(all)")?;
        if let Some(revision) = list
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
        {
            self.cache.keep(revision, list.items.clone());
        }
        self.records(&list.items).await
    }

    /// The records of `objects` with the store's prefix, in the order they were submitted,
    /// each with its script resolved.
    async fn records(&self, objects: &[Procedure]) -> Result<Vec<ProcedureRecord>> {
        let mut records = Vec::new();
        let mut config_maps: BTreeMap<String, Option<ConfigMap>> = BTreeMap::new();
        for object in objects {
            let Some(name) = object
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix(&self.prefix))
            else {
                continue;
            };
            let mut record = match self.record(object, name) {
                Ok(record) => record,
                Err(e) => {
                    warn!(procedure = name, error = %e, "ignoring a procedure that does not parse");
                    continue;
                }
            };
            if let Some(source) = &record.spec.script_config_map {
                if !config_maps.contains_key(&source.name) {
                    let map = self.script_config_map(&source.name).await?;
                    config_maps.insert(source.name.clone(), map);
                }
                record.script = config_maps
                    .get(&source.name)
                    .and_then(Option::as_ref)
                    .and_then(|m| m.data.as_ref())
                    .and_then(|d| d.get(&source.key))
                    .cloned();
            }
            records.push(record);
        }
        records.sort_by(|a, b| (a.submitted_at, &a.spec.name).cmp(&(b.submitted_at, &b.spec.name)));
        Ok(records)
    }

    /// The ConfigMap `name`, from the watch if it has it. One the watch does not have is read:
    /// an operator creates the script's ConfigMap and then the procedure, and an agent that
    /// reads the procedure a moment later must not miss the script.
    async fn script_config_map(&self, name: &str) -> Result<Option<ConfigMap>> {
        if let Some(map) = self.config_watch.get(name) {
            return Ok(Some(map));
        }
        self.config_maps.get_opt(name).await.context(
            "get",
            CONFIG_MAPS,
            format!("{}/{}", self.namespace, name),
        )
    }

    /// The record of `object`, the procedure `name`, with its inline script (if any).
    fn record(&self, object: &Procedure, name: &str) -> Result<ProcedureRecord> {
        let spec = object.spec.to_spec(name).map_err(|e| Error::Corrupt {
            column: "procedures.rota.dev spec",
            value: self.object_name(name),
            reason: e.reason,
        })?;
        Ok(ProcedureRecord {
            script: spec.script.clone(),
            submitted_at: submitted_at(&object.metadata),
            spec,
        })
    }
}

/// When the procedure was submitted: the annotation, or the creation time.
fn submitted_at(meta: &ObjectMeta) -> Millis {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(SUBMITTED_AT_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .or_else(|| {
            meta.creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn the_annotation_is_more_exact_than_the_creation_time() {
        let created = "2027-01-15T08:00:01Z".parse().expect("time");
        let mut meta = ObjectMeta {
            creation_timestamp: Some(Time(created)),
            ..ObjectMeta::default()
        };
        assert_eq!(submitted_at(&meta), 1_800_000_001_000);
        meta.annotations = Some(BTreeMap::from([(
            SUBMITTED_AT_ANNOTATION.into(),
            "1800000001234".into(),
        )]));
        assert_eq!(submitted_at(&meta), 1_800_000_001_234);
        meta.annotations = Some(BTreeMap::from([(
            SUBMITTED_AT_ANNOTATION.into(),
            "soon".into(),
        )]));
        assert_eq!(submitted_at(&meta), 1_800_000_001_000, "a bad annotation");
    }
}
