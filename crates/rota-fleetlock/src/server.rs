//! The HTTP side: the protocol's two endpoints, every check a request goes through before it
//! reaches its host's node, and the answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::hosts::Hosts;
use crate::ids::Ids;
use crate::protocol::{self, Kind, MAX_BODY, Rejection};

/// The protocol's two operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `RecursiveLock`: take a reboot slot.
    PreReboot,
    /// `UnlockIfHeld`: give it back.
    SteadyState,
}

/// A FleetLock server: who the clients are, and the tokens their groups need.
pub struct Server {
    hosts: Hosts,
    ids: Arc<dyn Ids>,
    /// A token per group: a request of a group listed here must carry
    /// `Authorization: Bearer <token>`, and a request of another group is refused. Empty:
    /// no tokens.
    tokens: HashMap<String, String>,
}

impl Server {
    pub fn new(hosts: Hosts, ids: Arc<dyn Ids>, tokens: HashMap<String, String>) -> Server {
        Server { hosts, ids, tokens }
    }

    /// The protocol's routes, at the root of the server (Zincati's `base_url`).
    pub fn router(self: Arc<Server>) -> Router {
        Router::new()
            .route(
                "/v1/pre-reboot",
                post(
                    |State(server): State<Arc<Server>>,
                     ConnectInfo(peer): ConnectInfo<SocketAddr>,
                     headers: HeaderMap,
                     body: Body| async move {
                        server
                            .answer(Endpoint::PreReboot, peer, &headers, body)
                            .await
                    },
                ),
            )
            .route(
                "/v1/steady-state",
                post(
                    |State(server): State<Arc<Server>>,
                     ConnectInfo(peer): ConnectInfo<SocketAddr>,
                     headers: HeaderMap,
                     body: Body| async move {
                        server
                            .answer(Endpoint::SteadyState, peer, &headers, body)
                            .await
                    },
                ),
            )
            .fallback(|| async {
                reject(&Rejection::new(
                    Kind::NotFound,
                    "FleetLock serves POST /v1/pre-reboot and POST /v1/steady-state",
                ))
            })
            .method_not_allowed_fallback(|| async {
                reject(&Rejection::new(
                    Kind::MethodNotAllowed,
                    "FleetLock's endpoints take POST only",
                ))
            })
            .with_state(self)
    }

    /// Serves on `listener` until `cancel`.
    pub async fn serve(
        self: Arc<Server>,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        let app = self
            .router()
            .into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await
    }

    async fn answer(
        &self,
        endpoint: Endpoint,
        peer: SocketAddr,
        headers: &HeaderMap,
        body: Body,
    ) -> Response {
        match self.decide(endpoint, peer, headers, body).await {
            Ok(node) => (StatusCode::OK, Json(json!({ "node": node }))).into_response(),
            Err(rejection) => {
                debug!(?endpoint, %peer, kind = rejection.kind.as_str(), value = rejection.value, "refused");
                reject(&rejection)
            }
        }
    }

    async fn decide(
        &self,
        endpoint: Endpoint,
        peer: SocketAddr,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<String, Rejection> {
        // Read one byte past the limit, so that a body over it is told apart from one at it.
        let bytes = axum::body::to_bytes(body, MAX_BODY + 1)
            .await
            .map_err(|_| protocol::too_large())?;
        let params = protocol::read_request(headers, &bytes)?;
        self.authorize(headers, &params.group)?;
        let client = self
            .ids
            .client(&params.id)
            .await
            .map_err(|e| e.rejection())?
            .ok_or_else(|| {
                Rejection::new(
                    Kind::UnknownId,
                    format!(
                        "client id {:?} maps to no node; nothing was written",
                        params.id
                    ),
                )
            })?;
        if let Some(address) = client.address
            && address != peer.ip()
        {
            return Err(Rejection::new(
                Kind::ForeignId,
                format!(
                    "client id {:?} is node {}'s, whose requests come from {address}, not {}",
                    params.id,
                    client.node,
                    peer.ip()
                ),
            ));
        }
        match endpoint {
            Endpoint::PreReboot => self.hosts.pre_reboot(&client.node, &params.group).await?,
            Endpoint::SteadyState => self.hosts.steady_state(&client.node).await?,
        }
        Ok(client.node.to_string())
    }

    fn authorize(&self, headers: &HeaderMap, group: &str) -> Result<(), Rejection> {
        if self.tokens.is_empty() {
            return Ok(());
        }
        let Some(expected) = self.tokens.get(group) else {
            return Err(Rejection::new(
                Kind::Unauthorized,
                format!("group {group:?} has no token on this server"),
            ));
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given.map(str::trim) == Some(expected.as_str()) {
            Ok(())
        } else {
            Err(Rejection::new(
                Kind::Unauthorized,
                format!("group {group:?} needs its token: Authorization: Bearer <token>"),
            ))
        }
    }
}

fn reject(rejection: &Rejection) -> Response {
    (rejection.kind.status(), Json(rejection.body())).into_response()
}
