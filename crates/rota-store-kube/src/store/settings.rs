//! Settings in the ConfigMap `rota-config`: its keys, reading it (from its watch when that
//! has listed it), compare-and-swap writes of one key, and waking idle agents through it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use rota_core::NodeName;
use rota_kube_api::CONFIG_MAP;
use rota_kube_client::is_conflict;
use rota_store::{Error, Pause, Result, Setting, Settings, now_millis};
use tracing::warn;

use super::jitter;

use super::{CONFIG_MAPS, KubeStore};
use crate::error::{Context, KubeError};
use crate::watches;

/// The rota-config key that holds the fleet's pause (empty: none).
pub(crate) const PAUSED_KEY: &str = "paused";
/// Where a pause that does not read is named in its error.
pub(super) const PAUSED_COLUMN: &str = "rota-config.data.paused";

/// The rota-config key that holds when the fleet was last resumed (the start of the rollout).
pub(crate) const RESUMED_KEY: &str = "resumedAt";
/// Where a resume time that does not read is named in its error.
pub(super) const RESUMED_COLUMN: &str = "rota-config.data.resumedAt";

pub(crate) const CONCURRENCY_KEY: &str = "concurrency";

/// The rota-config key that holds the rollout's batches and failure budget.
pub(crate) const ROLLOUT_KEY: &str = "rollout";

/// The rota-config key that holds the slot groups' rules.
pub(crate) const GROUPS_KEY: &str = "groups";

/// The Procedures' fingerprint, which the scheduler publishes (see
/// `watches::procedures_fingerprint`).
pub const PROCEDURES_KEY: &str = "procedures";

/// An operator's latest change that an idle agent must act on (see `wake_agents`).
pub(crate) const WAKE_KEY: &str = "wake";

/// Attempts at `rota-config`, which every new node writes once.
const CONFIG_ATTEMPTS: u32 = 64;

impl KubeStore {
    /// `rota-config` from its watch, or read now while the watch has not listed it (or failed
    /// since). The pause read before anything disruptive and the concurrency at a look at the queue
    /// come from here: a change reaches them when its event arrives, milliseconds after the
    /// write, as a read would have found it a moment later.
    pub(super) async fn config_map(&self) -> Result<Option<ConfigMap>> {
        match self.inner.settings.config_map() {
            Some(map) => Ok(map),
            None => self.read_config_map().await,
        }
    }

    async fn read_config_map(&self) -> Result<Option<ConfigMap>> {
        self.inner.config_maps.get_opt(CONFIG_MAP).await.context(
            "get",
            CONFIG_MAPS,
            self.lease_path(CONFIG_MAP),
        )
    }

    /// Changes one key of `rota-config` with a compare-and-swap; `change` gets the current
    /// value and returns the new one and what to return. A lost race (agents pausing the fleet
    /// together) waits a random while, growing with the attempts, so that the writers spread out
    /// instead of colliding again.
    pub(super) async fn update_config<T>(
        &self,
        key: &str,
        mut change: impl FnMut(Option<&str>) -> Result<(String, T)>,
    ) -> Result<T> {
        let path = self.lease_path(CONFIG_MAP);
        for attempt in 0..CONFIG_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(jitter(attempt)).await;
            }
            // A lost compare-and-swap means the view is behind: read the ConfigMap itself.
            let existing = if attempt == 0 {
                self.config_map().await?
            } else {
                self.read_config_map().await?
            };
            let current = existing
                .as_ref()
                .and_then(|c| c.data.as_ref())
                .and_then(|d| d.get(key))
                .map(String::as_str);
            let (value, result) = change(current)?;
            let written = match existing {
                Some(mut map) => {
                    map.data
                        .get_or_insert_with(BTreeMap::new)
                        .insert(key.into(), value);
                    self.inner
                        .config_maps
                        .replace(CONFIG_MAP, &PostParams::default(), &map)
                        .await
                }
                None => {
                    let map = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(CONFIG_MAP.into()),
                            ..ObjectMeta::default()
                        },
                        data: Some(BTreeMap::from([(key.into(), value)])),
                        ..ConfigMap::default()
                    };
                    self.inner
                        .config_maps
                        .create(&PostParams::default(), &map)
                        .await
                }
            };
            match written {
                // What this handle wrote is what its next look must see, and a new setting
                // wakes this process's waiters at once, before the watch echoes it.
                Ok(map) => {
                    self.inner.settings.written(&map);
                    return Ok(result);
                }
                Err(e) if is_conflict(&e) => {}
                Err(e) => return Err(e).context("write", CONFIG_MAPS, path),
            }
        }
        Err(KubeError::Contended {
            resource: CONFIG_MAPS,
            name: path,
            attempts: CONFIG_ATTEMPTS,
        }
        .into())
    }

    /// Tells the idle agent of `node` (of every node: `None`) that an operator changed what
    /// it has to do, through the ConfigMap every agent watches: without this, an idle agent
    /// would see it at its next `--procedure-poll`. Best effort: the change is already
    /// written, and the poll still finds it.
    pub(super) async fn wake_agents(&self, node: Option<&NodeName>) {
        let value = watches::wake_value(now_millis(), node.map(NodeName::as_str));
        if let Err(e) = self
            .update_config(WAKE_KEY, |_| Ok((value.clone(), ())))
            .await
        {
            warn!(error = %e, "could not wake the agents; they see the change at their next procedure poll");
        }
    }

    /// `Store::set`: keys of `rota-config` written. Every agent's ConfigMap watch delivers the
    /// change, which wakes its waiters (see `watches`). Returns the pause set or lifted.
    pub(super) async fn change_setting(&self, setting: Setting) -> Result<Option<Pause>> {
        match setting {
            Setting::Concurrency(concurrency) => {
                // A value outside this range would be refused by every read (`concurrency_of`).
                if !(1..=1000).contains(&concurrency) {
                    return Err(Error::Concurrency { value: concurrency });
                }
                self.update_config(CONCURRENCY_KEY, |_| Ok((concurrency.to_string(), ())))
                    .await?;
                Ok(None)
            }
            Setting::Rollout(rollout) => {
                let value = rollout.to_string();
                self.update_config(ROLLOUT_KEY, |_| Ok((value.clone(), ())))
                    .await?;
                Ok(None)
            }
            Setting::Groups(groups) => {
                let value = groups.to_string();
                self.update_config(GROUPS_KEY, |_| Ok((value.clone(), ())))
                    .await?;
                Ok(None)
            }
            Setting::Pause { reason } => {
                let pause = Pause {
                    reason,
                    since: now_millis(),
                };
                let value = pause.encode();
                self.update_config(PAUSED_KEY, |_| Ok((value.clone(), ())))
                    .await?;
                Ok(Some(pause))
            }
            Setting::Resume => {
                // The new rollout first: a resume that fails halfway leaves the fleet paused,
                // never resumed into the old rollout (whose failures would pause it again).
                let now = now_millis().to_string();
                self.update_config(RESUMED_KEY, |_| Ok((now.clone(), ())))
                    .await?;
                // An empty value is no pause: the ConfigMap keeps the key, and a replace never
                // races with a delete of it.
                let previous = self
                    .update_config(PAUSED_KEY, |current| {
                        Ok((String::new(), current.unwrap_or_default().to_string()))
                    })
                    .await?;
                rota_store::decode_setting(PAUSED_COLUMN, Some(&previous), Pause::decode)
            }
        }
    }
}

/// The fleet's settings as `rota-config` holds them (`None`: there is none). A value that does
/// not read is refused, naming the key and the value.
pub fn settings_of(map: Option<&ConfigMap>) -> Result<Settings> {
    let value = |key: &str| {
        map.and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(key))
            .map(String::as_str)
    };
    Ok(Settings {
        concurrency: concurrency_of(map)?,
        pause: rota_store::decode_setting(PAUSED_COLUMN, value(PAUSED_KEY), Pause::decode)?,
        resumed_at: rota_store::decode_setting(RESUMED_COLUMN, value(RESUMED_KEY), str::parse)?,
        rollout: rota_store::rollout_setting(value(ROLLOUT_KEY))?,
        groups: rota_store::groups_setting(value(GROUPS_KEY))?,
    })
}

fn concurrency_of(map: Option<&ConfigMap>) -> Result<Option<u32>> {
    let value = map
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get(CONCURRENCY_KEY))
        .map(String::as_str);
    // What `set_concurrency` allows; 0 (a hand edit) would let no node take a slot, silently.
    match parse_config(CONCURRENCY_COLUMN, value)? {
        Some(concurrency) if !(1..=1000).contains(&concurrency) => Err(Error::Corrupt {
            column: CONCURRENCY_COLUMN,
            value: concurrency.to_string(),
            reason: "expected an integer 1..=1000".into(),
        }),
        concurrency => Ok(concurrency),
    }
}

const CONCURRENCY_COLUMN: &str = "rota-config.data.concurrency";

pub(super) fn parse_config(key: &'static str, value: Option<&str>) -> Result<Option<u32>> {
    value
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|e: std::num::ParseIntError| Error::Corrupt {
                    column: key,
                    value: v.into(),
                    reason: e.to_string(),
                })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn concurrency(value: &str) -> Result<Option<u32>> {
        concurrency_of(Some(&ConfigMap {
            data: Some(BTreeMap::from([(
                CONCURRENCY_KEY.to_owned(),
                value.to_owned(),
            )])),
            ..ConfigMap::default()
        }))
    }

    /// An operator's `kubectl edit configmap rota-config` may leave any text; what
    /// `set_concurrency` would refuse is refused by name, not read as a fleet that never grants
    /// a slot.
    #[test]
    fn a_concurrency_edited_by_hand_is_read_or_refused_by_name() {
        assert_eq!(concurrency(" 3 ").ok(), Some(Some(3)));
        assert_eq!(concurrency_of(None).ok(), Some(None));
        for bad in ["0", "1001", "x", "-1", ""] {
            let message = concurrency(bad).expect_err(bad).to_string();
            assert!(
                message.starts_with("stored value \"")
                    && message.contains("in rota-config.data.concurrency is not valid"),
                "{message}"
            );
        }
        let message = concurrency("0").expect_err("0").to_string();
        assert!(
            message.ends_with("expected an integer 1..=1000"),
            "{message}"
        );
    }
}
