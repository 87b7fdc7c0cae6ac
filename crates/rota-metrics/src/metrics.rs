//! The numbers, kept up to date by the agent through [`AgentObserver`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use rota_blockers::{Block, BlockKind};
use rota_core::{Event, NodeName, NodeState, Process};
use rota_notify::Counters;
use rota_observer::{AgentObserver, WorkOutcome};
use rota_store::{Millis, NodeRecord, RequestRecord};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    node: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    node: String,
    process: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BlockedLabels {
    node: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    node: String,
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkLabels {
    node: String,
    process: String,
    outcome: String,
}

/// Seconds from 1 s to about 2.3 h, doubling: drains and slot waits take seconds to hours.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 14))
}

/// One agent's metrics, and whether it is ready. Every observer call only updates atomics
/// or takes an uncontended lock, so it never delays the agent.
#[derive(Debug)]
pub struct Metrics {
    node: NodeName,
    registry: Registry,
    state: Family<StateLabels, Gauge>,
    slot_held: Family<NodeLabels, Gauge>,
    requests_open: Family<ProcessLabels, Gauge>,
    reboot_required: Family<NodeLabels, Gauge>,
    maintenance_required: Family<NodeLabels, Gauge>,
    work_results: Family<WorkLabels, Counter>,
    within_hours: Family<NodeLabels, Gauge>,
    budget_failed: Family<NodeLabels, Gauge>,
    budget: Family<NodeLabels, Gauge>,
    blocked: Family<BlockedLabels, Gauge>,
    group: Family<GroupLabels, Gauge>,
    drain: Histogram,
    maintenance: Histogram,
    reboot: Histogram,
    verify: Histogram,
    slot_wait: Histogram,
    session_current: AtomicBool,
    store_ok: AtomicBool,
    /// Whether the store answered the agent's last access (1), or was unavailable (0).
    store_available: Family<NodeLabels, Gauge>,
    /// Why the store was last unavailable, until an access succeeds again (on Kubernetes:
    /// also that no scheduler runs).
    store_unavailable: Mutex<Option<String>>,
    /// The state the node entered and when, as this process saw it: a transition within one
    /// state (requests joining a window) restarts the store's `since`, not the step.
    entered: Mutex<Option<(NodeState, Millis)>>,
    /// Why the last access to the host's files failed, until one succeeds again.
    host_error: Mutex<Option<String>>,
}

impl Metrics {
    /// The metrics of `node`'s agent; `notifications` are the notifier's counters, when it
    /// sends any.
    pub fn new(node: NodeName, notifications: Option<Arc<Counters>>) -> Metrics {
        let mut registry = Registry::with_prefix("rota");
        let state = Family::<StateLabels, Gauge>::default();
        registry.register(
            "node_state",
            "The node's lifecycle state: 1 for the current one, 0 for the others",
            state.clone(),
        );
        let slot_held = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "slot_held",
            "Whether the node holds a maintenance slot",
            slot_held.clone(),
        );
        let requests_open = Family::<ProcessLabels, Gauge>::default();
        registry.register(
            "requests_open",
            "The node's open (pending or active) requests by process",
            requests_open.clone(),
        );
        let reboot_required = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "reboot_required",
            "Whether a reboot request is open on the node",
            reboot_required.clone(),
        );
        let maintenance_required = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "maintenance_required",
            "Whether any request (reboot, maintenance, procedure) is open on the node",
            maintenance_required.clone(),
        );
        let work_results = Family::<WorkLabels, Counter>::default();
        registry.register(
            "work_results",
            "Work that ended, by process and outcome (finished, failed, canceled)",
            work_results.clone(),
        );
        let within_hours = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "within_hours",
            "Whether now is within the node's maintenance hours (1 without configured hours)",
            within_hours.clone(),
        );
        let budget_failed = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "failure_budget_failed_nodes",
            "Nodes that failed since the rollout began (the last rota resume), as last counted",
            budget_failed.clone(),
        );
        let budget = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "failure_budget",
            "Failed nodes at which the agent pauses the fleet (only with a failure budget)",
            budget.clone(),
        );
        let blocked = Family::<BlockedLabels, Gauge>::default();
        registry.register(
            "blocked",
            "Whether the node holds back before a slot or its reboot, by the kind of the first \
             reason (pod, alert, prometheus-unreachable, node-annotation, paused)",
            blocked.clone(),
        );
        for kind in BlockKind::ALL {
            blocked
                .get_or_create(&BlockedLabels {
                    node: node.to_string(),
                    reason: kind.as_str().to_owned(),
                })
                .set(0);
        }
        let group = Family::<GroupLabels, Gauge>::default();
        registry.register(
            "group",
            "The node's slot group (--group, --group-by), 1 for the group it last recorded",
            group.clone(),
        );
        let store_available = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "store_available",
            "Whether the store answered the agent's last access (1) or was unavailable (0): \
             unreachable, overloaded, or on Kubernetes with no scheduler running",
            store_available.clone(),
        );
        let histograms = [
            (
                "drain_duration",
                "How long drains took, failed ones included",
            ),
            (
                "maintenance_duration",
                "How long the maintenance step took (procedures, kustodian's script)",
            ),
            (
                "reboot_duration",
                "From the reboot command to the node back with a new boot id (or timed out)",
            ),
            ("verify_duration", "How long health verification took"),
            (
                "slot_wait",
                "From the node being eligible in the queue to a slot being granted",
            ),
        ]
        .map(|(name, help)| {
            let histogram = duration_histogram();
            registry.register_with_unit(name, help, Unit::Seconds, histogram.clone());
            histogram
        });
        let [drain, maintenance, reboot, verify, slot_wait] = histograms;
        registry.register_collector(Box::new(NotificationCounters(
            notifications.unwrap_or_default(),
        )));
        Metrics {
            node,
            registry,
            state,
            slot_held,
            requests_open,
            reboot_required,
            maintenance_required,
            work_results,
            within_hours,
            budget_failed,
            budget,
            blocked,
            group,
            drain,
            maintenance,
            reboot,
            verify,
            slot_wait,
            session_current: AtomicBool::new(false),
            store_ok: AtomicBool::new(false),
            store_available,
            store_unavailable: Mutex::new(None),
            entered: Mutex::new(None),
            host_error: Mutex::new(None),
        }
    }

    /// Every metric in the OpenMetrics text format, which Prometheus reads.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }

    /// `Ok` when the agent has a current session, its last store access succeeded and its
    /// last access to the host's files did too; otherwise what is missing.
    pub fn ready(&self) -> Result<(), String> {
        let mut missing = Vec::new();
        if !self.session_current.load(Ordering::Relaxed) {
            missing.push("the agent has no current session".to_owned());
        }
        if let Some(cause) = self
            .store_unavailable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            missing.push(format!("the store is unavailable: {cause}"));
        } else if !self.store_ok.load(Ordering::Relaxed) {
            missing.push("the agent's last store access failed or none was made yet".to_owned());
        }
        if let Some(cause) = self
            .host_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            missing.push(format!("an access to the host's files failed: {cause}"));
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join("; "))
        }
    }

    fn node_labels(&self) -> NodeLabels {
        NodeLabels {
            node: self.node.to_string(),
        }
    }

    fn entered(&self) -> std::sync::MutexGuard<'_, Option<(NodeState, Millis)>> {
        self.entered.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Seconds between two store times, never negative.
fn seconds(from: Millis, to: Millis) -> f64 {
    // Millisecond counts below 2^53 convert exactly.
    let millis = to.saturating_sub(from).max(0) as f64;
    millis / 1000.0
}

impl AgentObserver for Metrics {
    fn session(&self, current: bool) {
        self.session_current.store(current, Ordering::Relaxed);
    }

    fn store_access(&self, ok: bool) {
        self.store_ok.store(ok, Ordering::Relaxed);
        if ok {
            *self
                .store_unavailable
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
        self.store_available
            .get_or_create(&self.node_labels())
            .set(i64::from(ok));
    }

    fn store_unavailable(&self, cause: &str) {
        *self
            .store_unavailable
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(cause.to_owned());
    }

    fn host_error(&self, cause: Option<&str>) {
        *self.host_error.lock().unwrap_or_else(|e| e.into_inner()) = cause.map(str::to_owned);
    }

    fn record(&self, record: &NodeRecord) {
        for state in NodeState::ALL {
            self.state
                .get_or_create(&StateLabels {
                    node: self.node.to_string(),
                    state: state.as_str().to_owned(),
                })
                .set(i64::from(state == record.state));
        }
        self.slot_held
            .get_or_create(&self.node_labels())
            .set(i64::from(record.slot.is_some()));
        let mut entered = self.entered();
        if entered.is_none_or(|(state, _)| state != record.state) {
            *entered = Some((record.state, record.since));
        }
    }

    fn requests(&self, open: &[RequestRecord]) {
        // Cleared first: a process whose requests all closed has no series left.
        self.requests_open.clear();
        for request in open {
            self.requests_open
                .get_or_create(&ProcessLabels {
                    node: self.node.to_string(),
                    process: request.process.to_string(),
                })
                .inc();
        }
        let reboot = open.iter().any(|r| r.process == Process::Reboot);
        self.reboot_required
            .get_or_create(&self.node_labels())
            .set(i64::from(reboot));
        self.maintenance_required
            .get_or_create(&self.node_labels())
            .set(i64::from(!open.is_empty()));
    }

    fn transition(&self, before: &NodeRecord, after: &NodeRecord, event: &Event) {
        if before.group != after.group
            && let Some(old) = &before.group
        {
            self.group.remove(&GroupLabels {
                node: self.node.to_string(),
                group: old.clone(),
            });
        }
        if let Some(group) = &after.group {
            self.group
                .get_or_create(&GroupLabels {
                    node: self.node.to_string(),
                    group: group.clone(),
                })
                .set(1);
        }
        let mut entered = self.entered();
        if before.state == after.state {
            return;
        }
        let since = match *entered {
            Some((state, at)) if state == before.state => at,
            _ => before.since,
        };
        *entered = Some((after.state, after.since));
        drop(entered);
        let histogram = match (before.state, event) {
            (NodeState::Queued, Event::SlotAcquired { .. }) => {
                // Waiting for a slot starts when the backoff ends, not when the node queued.
                let eligible = before.queued_at.map_or(since, |at| at.max(since));
                self.slot_wait.observe(seconds(eligible, after.since));
                return;
            }
            (NodeState::Draining, Event::Drained | Event::DrainFailed(_)) => &self.drain,
            (NodeState::Maintaining, _) => &self.maintenance,
            (NodeState::Rebooting, _) => {
                // The reboot restarts the agent: its start is in the store, not in memory.
                let started = before.reboot_started_at.unwrap_or(since);
                self.reboot.observe(seconds(started, after.since));
                return;
            }
            (NodeState::Verifying, _) => &self.verify,
            _ => return,
        };
        histogram.observe(seconds(since, after.since));
    }

    fn blocked(&self, block: Option<&Block>) {
        for kind in BlockKind::ALL {
            self.blocked
                .get_or_create(&BlockedLabels {
                    node: self.node.to_string(),
                    reason: kind.as_str().to_owned(),
                })
                .set(i64::from(block.is_some_and(|b| b.kind == kind)));
        }
    }

    fn work_ended(&self, process: &Process, outcome: WorkOutcome, _cause: Option<&str>) {
        self.work_results
            .get_or_create(&WorkLabels {
                node: self.node.to_string(),
                process: process.to_string(),
                outcome: outcome.as_str().to_owned(),
            })
            .inc();
    }

    fn within_hours(&self, within: bool) {
        self.within_hours
            .get_or_create(&self.node_labels())
            .set(i64::from(within));
    }

    fn failure_budget(&self, failed: u32, budget: u32) {
        self.budget_failed
            .get_or_create(&self.node_labels())
            .set(i64::from(failed));
        self.budget
            .get_or_create(&self.node_labels())
            .set(i64::from(budget));
    }
}

/// rota-notify's counters, read at each scrape.
#[derive(Debug)]
struct NotificationCounters(Arc<Counters>);

impl Collector for NotificationCounters {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counters = [
            ("sent", &self.0.sent),
            ("failed", &self.0.failed),
            ("dropped", &self.0.dropped),
        ];
        let first = ConstCounter::new(0_u64);
        // The registry's "rota" prefix applies to collectors too.
        let mut family = encoder.encode_descriptor(
            "notifications",
            "Webhook notifications: sent (accepted with 2xx, per webhook), failed (per webhook), \
             dropped (per event: queue full or shutting down)",
            None,
            first.metric_type(),
        )?;
        for (outcome, counter) in counters {
            let labels = [("outcome", outcome)];
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(counter.load(Ordering::Relaxed)).encode(metric)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;

    fn record(state: NodeState, since: Millis) -> NodeRecord {
        NodeRecord::new(NodeName::new("node-1").unwrap(), state, since)
    }

    fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {text}"))
    }

    #[test]
    fn a_failed_access_to_the_hosts_files_makes_the_agent_unready_until_one_succeeds() {
        let metrics = Metrics::new(NodeName::new("node-1").unwrap(), None);
        metrics.session(true);
        metrics.store_access(true);
        assert_eq!(metrics.ready(), Ok(()));
        metrics.host_error(Some(
            "creating /host/var/99.maintenance: No such file or directory",
        ));
        assert_eq!(
            metrics.ready(),
            Err(
                "an access to the host's files failed: creating /host/var/99.maintenance: No \
                 such file or directory"
                    .to_owned()
            )
        );
        metrics.host_error(None);
        assert_eq!(metrics.ready(), Ok(()));
    }

    #[test]
    fn the_blocked_reason_kind_is_one_series_set_to_one() {
        let metrics = Metrics::new(NodeName::new("node-1").unwrap(), None);
        let text = metrics.encode().unwrap();
        for kind in BlockKind::ALL {
            let series = format!(
                "rota_blocked{{node=\"node-1\",reason=\"{}\"}} 0",
                kind.as_str()
            );
            assert!(text.contains(&series), "{series} before any check: {text}");
        }
        metrics.blocked(Some(&Block {
            kind: BlockKind::PrometheusUnreachable,
            reason: "prometheus at http://127.0.0.1:1/ unreachable: connection refused".into(),
        }));
        let text = metrics.encode().unwrap();
        assert!(text.contains("rota_blocked{node=\"node-1\",reason=\"prometheus-unreachable\"} 1"));
        assert!(text.contains("rota_blocked{node=\"node-1\",reason=\"alert\"} 0"));
        metrics.blocked(None);
        let text = metrics.encode().unwrap();
        assert!(text.contains("rota_blocked{node=\"node-1\",reason=\"prometheus-unreachable\"} 0"));
    }

    #[test]
    fn state_durations_and_results_are_exposed() {
        let metrics = Metrics::new(NodeName::new("node-1").unwrap(), None);
        assert!(metrics.ready().is_err(), "no session yet");
        metrics.session(true);
        metrics.store_access(true);
        assert_eq!(metrics.ready(), Ok(()));

        let mut queued = record(NodeState::Queued, 1_000);
        queued.queued_at = Some(3_000);
        metrics.record(&queued);
        let mut draining = record(NodeState::Draining, 5_000);
        draining.slot = Some(0);
        metrics.transition(
            &queued,
            &draining,
            &Event::SlotAcquired {
                pre_cordoned: false,
            },
        );
        metrics.record(&draining);
        // A request joining the window restarts the store's `since`, not the drain.
        let mut joined = draining.clone();
        joined.since = 6_000;
        metrics.transition(&draining, &joined, &Event::Joined);
        let mut maintaining = record(NodeState::Maintaining, 9_000);
        maintaining.slot = Some(0);
        metrics.transition(&joined, &maintaining, &Event::Drained);
        metrics.record(&maintaining);
        metrics.work_ended(&Process::Reboot, WorkOutcome::Finished, None);

        let text = metrics.encode().unwrap();
        assert_eq!(
            line(
                &text,
                "rota_node_state{node=\"node-1\",state=\"maintaining\"}"
            ),
            "rota_node_state{node=\"node-1\",state=\"maintaining\"} 1"
        );
        assert!(text.contains("rota_node_state{node=\"node-1\",state=\"draining\"} 0"));
        assert!(text.contains("rota_slot_held{node=\"node-1\"} 1"));
        assert!(text.contains("rota_slot_wait_seconds_sum 2.0"), "{text}");
        assert!(
            text.contains("rota_drain_duration_seconds_sum 4.0"),
            "{text}"
        );
        assert!(
            text.contains("rota_drain_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "rota_work_results_total{node=\"node-1\",process=\"reboot\",outcome=\"finished\"} 1"
            ),
            "{text}"
        );
        assert_eq!(
            line(&text, "rota_notifications_total{outcome=\"dropped\"}"),
            "rota_notifications_total{outcome=\"dropped\"} 0"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");

        metrics.store_access(false);
        assert!(metrics.ready().unwrap_err().contains("store access failed"));
    }

    #[test]
    fn the_nodes_slot_group_is_exposed_and_follows_a_change() {
        let metrics = Metrics::new(NodeName::new("node-1").unwrap(), None);
        let idle = record(NodeState::Idle, 1_000);
        let mut queued = record(NodeState::Queued, 2_000);
        queued.group = Some("zone-a".into());
        metrics.transition(&idle, &queued, &Event::Requested { eligible_at: 2_000 });
        let text = metrics.encode().unwrap();
        assert_eq!(
            line(&text, "rota_group{"),
            "rota_group{node=\"node-1\",group=\"zone-a\"} 1"
        );
        let mut moved = record(NodeState::Queued, 3_000);
        moved.group = Some("zone-b".into());
        metrics.transition(&queued, &moved, &Event::Requested { eligible_at: 3_000 });
        let text = metrics.encode().unwrap();
        assert!(!text.contains("group=\"zone-a\""), "{text}");
        assert!(
            text.contains("rota_group{node=\"node-1\",group=\"zone-b\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn the_maintenance_hours_and_the_failure_budget_are_exposed() {
        let metrics = Metrics::new(NodeName::new("node-1").unwrap(), None);
        metrics.within_hours(true);
        metrics.within_hours(false);
        metrics.failure_budget(1, 2);
        metrics.failure_budget(2, 2);
        let text = metrics.encode().unwrap();
        assert_eq!(
            line(&text, "rota_within_hours{"),
            "rota_within_hours{node=\"node-1\"} 0"
        );
        assert_eq!(
            line(&text, "rota_failure_budget_failed_nodes{"),
            "rota_failure_budget_failed_nodes{node=\"node-1\"} 2"
        );
        assert_eq!(
            line(&text, "rota_failure_budget{"),
            "rota_failure_budget{node=\"node-1\"} 2"
        );
    }
}
