//! Bare metal over TLS with client certificates: a client needs a certificate of the
//! operator's CA, and may lock and unlock only for the node its certificate names.

mod common;

use std::path::Path;

use common::{Backend, Fixture, Options, Zincati};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rota_fleetlock::Tls;

/// A CA, the server's certificate for `localhost`, and client certificates for `fcos-1` and
/// `fcos-2`, written to `dir`; the PEM identities (certificate and key) of the clients.
struct Pki {
    ca: String,
    clients: Vec<(String, String)>,
}

fn pki(dir: &Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key")).expect("CA");
    let issue = |name: &str| {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec![name.to_owned()])
            .expect("params")
            .signed_by(&key, &ca)
            .expect("signed");
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = issue("localhost");
    std::fs::write(dir.join("server.pem"), server_cert).expect("write");
    std::fs::write(dir.join("server.key"), server_key).expect("write");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    let clients = ["fcos-1", "fcos-2"]
        .iter()
        .map(|name| {
            let (cert, key) = issue(name);
            ((*name).to_owned(), format!("{cert}{key}"))
        })
        .collect();
    Pki {
        ca: ca.pem(),
        clients,
    }
}

async fn start(backend: Backend) -> Option<(Fixture, Pki, tempfile::TempDir)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let tls = Tls::load(
        &dir.path().join("server.pem"),
        &dir.path().join("server.key"),
        Some(&dir.path().join("ca.pem")),
    )
    .expect("load TLS");
    let options = Options {
        tls: Some(tls),
        ..Options::default()
    };
    let fixture = Fixture::start(backend, options).await?;
    Some((fixture, pki, dir))
}

/// A client that trusts the CA and shows `identity`, if any.
fn client(fixture: &Fixture, pki: &Pki, id: &str, identity: Option<&str>) -> Zincati {
    let mut http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca.as_bytes()).expect("CA"));
    if let Some(identity) = identity {
        http = http.identity(reqwest::Identity::from_pem(identity.as_bytes()).expect("identity"));
    }
    Zincati::with_client(
        &fixture.base(),
        id,
        "default",
        http.build().expect("client"),
    )
}

on_every_store!(
    a_client_without_a_certificate_of_the_ca_cannot_connect,
    a_client_may_lock_and_unlock_only_for_the_node_its_certificate_names,
);

async fn a_client_without_a_certificate_of_the_ca_cannot_connect(backend: Backend) {
    let Some((fixture, pki, _dir)) = start(backend).await else {
        return;
    };
    let anonymous = client(&fixture, &pki, "fcos-1", None);
    let refused = anonymous.try_pre_reboot().await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
}

async fn a_client_may_lock_and_unlock_only_for_the_node_its_certificate_names(backend: Backend) {
    let Some((fixture, pki, _dir)) = start(backend).await else {
        return;
    };
    let fcos_2 = pki.clients[1].1.as_str();
    let impostor = client(&fixture, &pki, "fcos-1", Some(fcos_2));
    for answer in [impostor.pre_reboot().await, impostor.steady_state().await] {
        assert_eq!(
            (answer.status, answer.kind.as_str()),
            (403, "foreign_id"),
            "{answer:?}"
        );
    }
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
    let fcos_1 = pki.clients[0].1.as_str();
    let own = client(&fixture, &pki, "fcos-1", Some(fcos_1));
    assert_eq!(own.pre_reboot().await.kind, "draining");
    assert_eq!(impostor.steady_state().await.kind, "foreign_id");
    assert_eq!(fixture.record("fcos-1").await.state.to_string(), "draining");
}
