//! The FleetLock server's metrics: its hosts' nodes under the names an agent gives its own
//! (`rota_node_state`, `rota_slot_held`, `rota_group`, `rota_work_results_total`), so that
//! dashboards show FleetLock hosts like any other node, and its answers by endpoint and kind.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rota_core::{NodeState, Process, WindowChange};
use rota_store::NodeRecord;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::server::Endpoint;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnswerLabels {
    endpoint: String,
    kind: String,
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    state: Family<StateLabels, Gauge>,
    slot_held: Family<NodeLabels, Gauge>,
    group: Family<GroupLabels, Gauge>,
    work_results: Family<WorkLabels, Counter>,
    answers: Family<AnswerLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
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
        let group = Family::<GroupLabels, Gauge>::default();
        registry.register(
            "group",
            "The node's slot group (a FleetLock host's group), 1 for the group it last recorded",
            group.clone(),
        );
        let work_results = Family::<WorkLabels, Counter>::default();
        registry.register(
            "work_results",
            "Work that ended, by process and outcome (finished, failed, canceled, postponed)",
            work_results.clone(),
        );
        let answers = Family::<AnswerLabels, Counter>::default();
        registry.register(
            "fleetlock_answers",
            "FleetLock answers by endpoint and kind (granted for a 200)",
            answers.clone(),
        );
        Metrics {
            registry,
            state,
            slot_held,
            group,
            work_results,
            answers,
        }
    }

    /// One answer of `endpoint`: `None` for a 200, else its error kind.
    pub(crate) fn answered(&self, endpoint: Endpoint, kind: Option<&str>) {
        let endpoint = match endpoint {
            Endpoint::PreReboot => "pre-reboot",
            Endpoint::SteadyState => "steady-state",
        };
        self.answers
            .get_or_create(&AnswerLabels {
                endpoint: endpoint.to_owned(),
                kind: kind.unwrap_or("granted").to_owned(),
            })
            .inc();
    }

    /// A node's record as read (after a restart, an operator's retry or unlock).
    pub(crate) fn observed(&self, record: &NodeRecord) {
        self.written(record, record, &WindowChange::None);
    }

    /// A node's record after a write, and the window change the write made.
    pub(crate) fn written(&self, before: &NodeRecord, after: &NodeRecord, window: &WindowChange) {
        let node = after.node.to_string();
        for state in NodeState::ALL {
            self.state
                .get_or_create(&StateLabels {
                    node: node.clone(),
                    state: state.to_string(),
                })
                .set(i64::from(state == after.state));
        }
        self.slot_held
            .get_or_create(&NodeLabels { node: node.clone() })
            .set(i64::from(after.slot.is_some()));
        if let Some(old) = before
            .group
            .as_ref()
            .filter(|_| before.group != after.group)
        {
            self.group.remove(&GroupLabels {
                node: node.clone(),
                group: old.clone(),
            });
        }
        if let Some(group) = &after.group {
            self.group
                .get_or_create(&GroupLabels {
                    node: node.clone(),
                    group: group.clone(),
                })
                .set(1);
        }
        let outcome = match window {
            WindowChange::Finish => "finished",
            WindowChange::Fail { .. } => "failed",
            WindowChange::Cancel { .. } => "canceled",
            WindowChange::Postpone { .. } => "postponed",
            _ => return,
        };
        self.work_results
            .get_or_create(&WorkLabels {
                node,
                process: Process::FleetLock.to_string(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Every metric in the OpenMetrics text format, which Prometheus reads.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }

    /// Serves `/metrics` on `listener` until `cancel`.
    pub async fn serve(
        self: Arc<Metrics>,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        let app = Router::new().route(
            "/metrics",
            get(move || async move {
                match self.encode() {
                    Ok(text) => (
                        StatusCode::OK,
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        text,
                    )
                        .into_response(),
                    Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
                }
            }),
        );
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(cancel.cancelled_owned())
        .await
    }
}
