//! A drain through the Kubernetes API from its flags (`cli::KubeDrainArgs`), for `rota agent
//! --node-actions kube` and `rota fleetlock --store kube` alike: which flags were given, the
//! drain's options, checked before anything connects, and the bound behind the drain's own.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, bail};
use rota_kube_actions::{DrainOptions, NodeLabels};

use crate::cli::{KubeDrainArgs, NodeLabelArg};

/// How much later than the drain's own bounds the caller's bound of a drain through the
/// Kubernetes API fires. That drain bounds itself: its evictions by --drain-timeout, its wait
/// for wait-completed pods by --drain-wait-completed-timeout, and each fails naming the pods it
/// still waits for. The caller's bound is the backstop behind both (one that a request hung
/// past its own timeouts would meet), so that theirs are the ones that fire.
pub const BACKSTOP: Duration = Duration::from_secs(60);

impl KubeDrainArgs {
    /// The first of these flags given, if any (`--node-conditions` is on by default): each
    /// needs the Kubernetes API.
    pub fn first_given(&self) -> Option<&'static str> {
        [
            ("--drain-concurrency", self.drain_concurrency.is_some()),
            ("--drain-force", self.drain_force),
            (
                "--drain-delete-emptydir-data",
                self.drain_delete_emptydir_data,
            ),
            ("--drain-grace-period", self.drain_grace_period.is_some()),
            (
                "--drain-skip-wait-for-delete-timeout",
                self.drain_skip_wait_for_delete_timeout.is_some(),
            ),
            ("--drain-pod-selector", self.drain_pod_selector.is_some()),
            (
                "--drain-wait-completed-selector",
                self.drain_wait_completed_selector.is_some(),
            ),
            (
                "--drain-wait-completed-timeout",
                self.drain_wait_completed_timeout.is_some(),
            ),
            ("--health-pdbs", self.health_pdbs),
            ("--cordon-label", !self.cordon_labels.is_empty()),
            ("--uncordon-label", !self.uncordon_labels.is_empty()),
            (
                "--prefer-no-schedule-taint",
                self.prefer_no_schedule_taint.is_some(),
            ),
            ("--annotate-nodes", self.annotate_nodes),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    /// How long the drain waits for its wait-completed pods.
    pub fn wait_completed_timeout(&self) -> Duration {
        self.drain_wait_completed_timeout
            .unwrap_or(rota_kube_actions::WAIT_COMPLETED_TIMEOUT)
    }

    /// The caller's bound of a whole drain whose evictions `timeout` bounds: the backstop
    /// behind the drain's own bounds.
    pub fn bound(&self, timeout: Duration) -> Duration {
        timeout.max(self.wait_completed_timeout()) + BACKSTOP
    }

    /// The drain's options, its evictions bounded by `timeout`; its labels and selector are
    /// checked here, before anything connects.
    pub fn drain_options(&self, timeout: Duration) -> Result<DrainOptions> {
        let labels = NodeLabels::new(
            label_map("--cordon-label", &self.cordon_labels)?,
            label_map("--uncordon-label", &self.uncordon_labels)?,
        );
        if let Some(selector) = &self.drain_pod_selector {
            rota_blockers::parse_selector_for("--drain-pod-selector", selector)?;
        }
        Ok(DrainOptions {
            concurrency: self
                .drain_concurrency
                .unwrap_or(DrainOptions::default().concurrency),
            force: self.drain_force,
            delete_emptydir_data: self.drain_delete_emptydir_data,
            grace_period: self.drain_grace_period,
            skip_wait_for_delete: self.drain_skip_wait_for_delete_timeout,
            pod_selector: self.drain_pod_selector.clone(),
            timeout: Some(timeout),
            wait_completed_selector: self.drain_wait_completed_selector.clone(),
            wait_completed_timeout: self.wait_completed_timeout(),
            labels,
            ..DrainOptions::default()
        })
    }
}

/// The labels of every `flag` given, refusing a key given twice with two values: one of them
/// would be ignored.
fn label_map(flag: &str, given: &[NodeLabelArg]) -> Result<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    for (key, value) in given.iter().flat_map(|arg| &arg.0) {
        if let Some(earlier) = labels.insert(key.clone(), value.clone())
            && earlier != *value
        {
            bail!("{flag} gives the label {key} twice, as {earlier:?} and {value:?}; give it once");
        }
    }
    Ok(labels)
}
