//! A store out of reach: the server answers 503 `store_unavailable`, grants nothing, and
//! carries on once the store is back. PostgreSQL behind a proxy the test cuts, as an outage
//! of the database (or of the network to it) would.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{Fixture, Options};
use rota_e2e::proxy::Proxy;
use rota_store::PostgresStore;

fn server_of(url: &str) -> SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    host_port.parse().expect("the test server's address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_answers_503_store_unavailable_and_grants_nothing() {
    let Some(url) = rota_e2e::postgres::fresh_database().await else {
        return;
    };
    let server = server_of(&url);
    let proxy = Proxy::start(server).await.expect("a proxy");
    let proxied = url.replace(&server.to_string(), &proxy.addr().to_string());
    let store = Arc::new(PostgresStore::open(&proxied).await.expect("open"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let fixture = Fixture::serve(store, tmp, Options::default()).await;
    let host = fixture.client("fcos-1");
    assert_eq!(host.pre_reboot().await.kind, "draining");
    proxy.cut();
    fixture.let_drain("fcos-1");
    for _ in 0..5 {
        for answer in [host.pre_reboot().await, host.steady_state().await] {
            assert_eq!(
                (answer.status, answer.kind.as_str()),
                (503, "store_unavailable"),
                "{answer:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy.restore();
    host.until_granted(300, Duration::from_millis(100)).await;
    assert_eq!(
        fixture.record("fcos-1").await.state.to_string(),
        "rebooting"
    );
}
