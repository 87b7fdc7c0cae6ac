//! The HTTP side: `/metrics`, `/healthz` (the process is alive) and `/readyz` (the agent has
//! a current session and its last store access succeeded).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Metrics;

/// What OpenMetrics text is served as; Prometheus asks for it and reads it.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("--metrics-addr {addr}: cannot listen there: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("serving metrics on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A bound listener: binding happens before the agent starts, so that a taken port stops it
/// with an error instead of leaving an agent without metrics.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    addr: SocketAddr,
}

impl MetricsServer {
    pub async fn bind(addr: SocketAddr) -> Result<MetricsServer, MetricsError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| MetricsError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| MetricsError::Bind { addr, source })?;
        Ok(MetricsServer { listener, addr })
    }

    /// Where it listens (the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `cancel`.
    pub async fn serve(
        self,
        metrics: Arc<Metrics>,
        cancel: CancellationToken,
    ) -> Result<(), MetricsError> {
        let app = Router::new()
            .route("/metrics", get(scrape))
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(ready))
            .with_state(metrics);
        let addr = self.addr;
        axum::serve(self.listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await
            .map_err(|source| MetricsError::Serve { addr, source })
    }
}

async fn scrape(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed\n",
        )
            .into_response(),
    }
}

async fn ready(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.ready() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(missing) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {missing}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use rota_core::NodeName;
    use rota_observer::AgentObserver;

    use super::*;

    #[tokio::test]
    async fn endpoints_answer_over_http() {
        let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let base = format!("http://{}", server.local_addr());
        let metrics = Arc::new(Metrics::new(NodeName::new("node-1").unwrap(), None));
        let cancel = CancellationToken::new();
        let task = tokio::spawn(server.serve(metrics.clone(), cancel.clone()));
        let client = reqwest::Client::new();
        let get = |path: &str| client.get(format!("{base}{path}")).send();

        let health = get("/healthz").await.unwrap();
        assert_eq!(health.status(), 200);
        let unready = get("/readyz").await.unwrap();
        assert_eq!(unready.status(), 503);
        assert!(unready.text().await.unwrap().contains("no current session"));
        metrics.session(true);
        metrics.store_access(true);
        assert_eq!(get("/readyz").await.unwrap().status(), 200);

        let scraped = get("/metrics").await.unwrap();
        assert_eq!(scraped.status(), 200);
        assert_eq!(scraped.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        let text = scraped.text().await.unwrap();
        assert!(
            text.contains("# TYPE rota_drain_duration_seconds histogram"),
            "{text}"
        );

        // A taken port is an error naming the flag.
        let taken = MetricsServer::bind(base.trim_start_matches("http://").parse().unwrap())
            .await
            .unwrap_err();
        assert!(
            taken.to_string().starts_with("--metrics-addr 127.0.0.1:"),
            "{taken}"
        );

        cancel.cancel();
        task.await.unwrap().unwrap();
    }
}
