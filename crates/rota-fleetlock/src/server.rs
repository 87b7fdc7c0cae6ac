//! The HTTP side: the protocol's two endpoints, every check a request goes through before it
//! reaches its host's node, and the answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::CertificateDer;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::hosts::Hosts;
use crate::ids::Ids;
use crate::protocol::{self, Kind, MAX_BODY, Rejection};
use crate::tls::{self, Tls};

/// How long open connections have to finish once the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Who a connection is: its address, and the client certificate it showed over TLS.
#[derive(Clone)]
struct Peer {
    addr: SocketAddr,
    certificate: Option<CertificateDer<'static>>,
}

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
    fn router(self: Arc<Server>) -> Router {
        Router::new()
            .route("/v1/{operation}", post(operation))
            .fallback(|| async { not_found() })
            .method_not_allowed_fallback(|| async {
                reject(&Rejection::new(
                    Kind::MethodNotAllowed,
                    "FleetLock's endpoints take POST only",
                ))
            })
            .with_state(self)
    }

    /// Serves on `listener`, over `tls` when given, until `cancel`; open connections then
    /// have a few seconds to finish.
    pub async fn serve(
        self: Arc<Server>,
        listener: TcpListener,
        tls: Option<Tls>,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        let router = self.router();
        let graceful = GracefulShutdown::new();
        loop {
            let (stream, addr) = tokio::select! {
                () = cancel.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, or a connection reset before it was taken.
                        warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let router = router.clone();
            let tls = tls.clone();
            let watcher = graceful.watcher();
            // The handshake runs in the connection's task: a slow client holds up nobody.
            tokio::spawn(async move {
                let Some(tls) = tls else {
                    let peer = Peer {
                        addr,
                        certificate: None,
                    };
                    watcher.watch(connection(router, peer, stream)).await.ok();
                    return;
                };
                let stream = match tls.acceptor.accept(stream).await {
                    Ok(stream) => stream,
                    Err(e) => {
                        debug!(%addr, error = %e, "TLS handshake failed");
                        return;
                    }
                };
                let certificate = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|c| c.clone().into_owned());
                let peer = Peer { addr, certificate };
                watcher.watch(connection(router, peer, stream)).await.ok();
            });
        }
        if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
            .await
            .is_err()
        {
            warn!("FleetLock connections still open at shutdown were dropped");
        }
        Ok(())
    }

    async fn answer(
        &self,
        endpoint: Endpoint,
        peer: &Peer,
        headers: &HeaderMap,
        body: Body,
    ) -> Response {
        let decided = self.decide(endpoint, peer, headers, body).await;
        let metrics = self.hosts.metrics();
        metrics.answered(endpoint, decided.as_ref().err().map(|r| r.kind.as_str()));
        match decided {
            Ok(node) => (StatusCode::OK, Json(json!({ "node": node }))).into_response(),
            Err(rejection) => {
                debug!(?endpoint, peer = %peer.addr, kind = rejection.kind.as_str(), value = rejection.value, "refused");
                reject(&rejection)
            }
        }
    }

    async fn decide(
        &self,
        endpoint: Endpoint,
        peer: &Peer,
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
        if let Some(certificate) = &peer.certificate
            && !tls::names(certificate, client.node.as_str())
        {
            return Err(Rejection::new(
                Kind::ForeignId,
                format!(
                    "client id {:?} is node {}'s, and the client's certificate is not valid for that name",
                    params.id, client.node
                ),
            ));
        }
        // A server listening on `[::]` sees an IPv4 client as an IPv4-mapped address.
        let from = peer.addr.ip().to_canonical();
        if let Some(address) = client.address
            && address.to_canonical() != from
        {
            return Err(Rejection::new(
                Kind::ForeignId,
                format!(
                    "client id {:?} is node {}'s, whose requests come from {address}, not {}",
                    params.id, client.node, from
                ),
            ));
        }
        // In a task of its own: a client that gives up (its request dropped) must not stop
        // the host's writes halfway, which may leave a store connection inside a transaction.
        let hosts = self.hosts.clone();
        let node = client.node.clone();
        let group = params.group;
        let work = tokio::spawn(async move {
            match endpoint {
                Endpoint::PreReboot => hosts.pre_reboot(&node, &group).await,
                Endpoint::SteadyState => hosts.steady_state(&node).await,
            }
        });
        work.await.map_err(|e| {
            Rejection::new(Kind::Internal, format!("the request's task ended: {e}"))
        })??;
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

/// The handler of the protocol's operations: `/v1/pre-reboot` and `/v1/steady-state`.
async fn operation(
    State(server): State<Arc<Server>>,
    Path(operation): Path<String>,
    Extension(peer): Extension<Peer>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = match operation.as_str() {
        "pre-reboot" => Endpoint::PreReboot,
        "steady-state" => Endpoint::SteadyState,
        _ => return not_found(),
    };
    server.answer(endpoint, &peer, &headers, body).await
}

fn not_found() -> Response {
    reject(&Rejection::new(
        Kind::NotFound,
        "FleetLock serves POST /v1/pre-reboot and POST /v1/steady-state",
    ))
}

fn reject(rejection: &Rejection) -> Response {
    (rejection.kind.status(), Json(rejection.body())).into_response()
}

/// Serves HTTP/1.1 on one connection, its requests seeing who `peer` is.
fn connection<S>(
    router: Router,
    peer: Peer,
    stream: S,
) -> hyper::server::conn::http1::Connection<TokioIo<S>, TowerToHyperService<Router>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router.layer(Extension(peer)));
    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service)
}
