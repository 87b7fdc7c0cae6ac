//! rota's agent metrics: the agent's state, requests, work results and step
//! durations in Prometheus text format, with the notification counters of rota-notify, served
//! on `/metrics` beside `/healthz` and `/readyz`.
//!
//! - [`metrics`]: [`Metrics`], an [`rota_observer::AgentObserver`] that keeps the numbers;
//! - [`server`]: the HTTP endpoints.

pub mod metrics;
pub mod server;

pub use metrics::Metrics;
pub use server::{MetricsError, MetricsServer};
