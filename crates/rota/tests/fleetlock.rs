//! `rota fleetlock` as an operator runs it on bare metal: the protocol and /metrics served by
//! the binary, and flags it refuses by name.

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ROTA, assert_refused};

/// A free loopback port, for a server started as a separate process.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Asks until the server answers, for at most 30 s.
async fn answered(request: impl Fn() -> reqwest::RequestBuilder) -> reqwest::Response {
    let start = Instant::now();
    loop {
        match request().send().await {
            Ok(response) => return response,
            Err(e) if start.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the server never answered: {e}"),
        }
    }
}

#[tokio::test]
async fn the_fleetlock_command_serves_the_protocol_and_its_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (listen, metrics) = (free_port(), free_port());
    std::fs::write(
        dir.path().join("ids"),
        "fcos-1 975228d46dc94622b9bbe16671e2b58d\n",
    )
    .expect("ids");
    let mut server = Command::new(ROTA)
        .args(["fleetlock", "--concurrency", "2"])
        .arg("--ids")
        .arg(dir.path().join("ids"))
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .env(
            "ROTA_STORE",
            format!("sqlite://{}", dir.path().join("rota.db").display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start rota fleetlock");
    let http = reqwest::Client::new();
    let body = "{\n  \"client_params\": {\n    \"id\": \"975228d46dc94622b9bbe16671e2b58d\",\n    \"group\": \"default\"\n  }\n}";
    let response = answered(|| {
        http.post(format!("http://127.0.0.1:{listen}/v1/pre-reboot"))
            .header("fleet-lock-protocol", "true")
            .body(body)
    })
    .await;
    // No drain command: the drain is done at once, and the next ask takes the lock.
    assert_eq!(response.status().as_u16(), 409);
    let error: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(error["kind"], "draining");
    let text = answered(|| http.get(format!("http://127.0.0.1:{metrics}/metrics")))
        .await
        .text()
        .await
        .expect("metrics");
    let _ = server.kill();
    let _ = server.wait();
    for line in [
        "rota_slot_held{node=\"fcos-1\"} 1",
        "rota_fleetlock_answers_total{endpoint=\"pre-reboot\",kind=\"draining\"} 1",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}

#[test]
fn bad_fleetlock_flags_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("rota.db").display());
    let bad_ids = dir.path().join("bad-ids");
    std::fs::write(&bad_ids, "fcos-1 id 300.1.1.1\n").expect("ids");
    let bad_ids = bad_ids.display().to_string();
    let cases: [(&[&str], &str); 5] = [
        (&["--group-token", "workers"], "--group-token \"workers\""),
        (&["--group-token", "work ers=/dev/null"], "^[a-zA-Z0-9.-]+$"),
        (&["--client-ttl", "0s"], "--client-ttl 0s"),
        (&["--ids", &bad_ids], "line 1: address"),
        (&["--listen", "127.0.0.1:80:80"], "--listen"),
    ];
    for (args, named) in cases {
        let output = Command::new(ROTA)
            .arg("fleetlock")
            .args(args)
            .args(["--store", &store])
            .output()
            .expect("run rota fleetlock");
        assert_refused(&output, &args, named);
    }
}
