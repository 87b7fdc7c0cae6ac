//! The FleetLock protocol's every MUST and SHOULD (coreos/zincati
//! `docs/development/fleetlock/protocol.md`), each in a test named after it, and the bad input
//! the issue lists, against a real server on SQLite and on PostgreSQL.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{Backend, Fixture, Options, Zincati};
use rota_fleetlock::FileIds;
use rota_fleetlock::protocol::{Kind, MAX_BODY, MAX_ID};

on_every_store!(
    a_request_without_the_fleet_lock_protocol_header_is_refused,
    the_body_must_hold_client_params_with_a_non_empty_id_and_group,
    the_group_is_checked_against_its_pattern,
    errors_are_json_with_a_kind_and_a_value_and_a_4xx_or_5xx_status,
    every_kind_answered_is_one_of_a_small_fixed_set,
    the_lock_is_recursive_the_holder_asking_again_is_granted_again,
    only_the_holder_can_unlock_what_it_holds,
    zincatis_start_up_steady_state_gives_back_nothing_it_does_not_hold,
    bad_input_gets_a_4xx_naming_the_problem_and_nothing_is_written,
    an_unknown_id_is_refused_and_nothing_is_written,
    a_request_for_another_hosts_id_is_refused,
    a_host_is_known_by_its_ipv4_address_on_a_dual_stack_listener,
    a_group_with_a_token_needs_it,
    unknown_paths_and_methods_get_json_errors,
);

async fn start(backend: Backend) -> Option<Fixture> {
    Fixture::start(backend, Options::default()).await
}

/// Until the node of `client` holds the lock.
async fn granted(fixture: &Fixture, node: &str, client: &Zincati) {
    let first = client.pre_reboot().await;
    assert!(!first.ok(), "granted before the drain: {first:?}");
    fixture.let_drain(node);
    client
        .until_granted(300, std::time::Duration::from_millis(100))
        .await;
}

async fn a_request_without_the_fleet_lock_protocol_header_is_refused(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let client = fixture.client("fcos-1");
    for path in ["v1/pre-reboot", "v1/steady-state"] {
        let answer = client.send(path, &[], client.body.clone()).await;
        assert_eq!(
            (answer.status, answer.kind.as_str()),
            (400, "missing_protocol_header"),
            "{path}"
        );
        let answer = client
            .send(
                path,
                &[("fleet-lock-protocol", "false")],
                client.body.clone(),
            )
            .await;
        assert_eq!(answer.kind, "missing_protocol_header", "{path}");
    }
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
}

async fn the_body_must_hold_client_params_with_a_non_empty_id_and_group(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let client = fixture.client("fcos-1");
    let header = [("fleet-lock-protocol", "true")];
    for (body, kind) in [
        ("{}", "malformed_body"),
        (
            r#"{"client_params": {"group": "default"}}"#,
            "malformed_body",
        ),
        (r#"{"client_params": {"id": "fcos-1"}}"#, "malformed_body"),
        (
            r#"{"client_params": {"id": "", "group": "default"}}"#,
            "invalid_id",
        ),
        (
            r#"{"client_params": {"id": "fcos-1", "group": ""}}"#,
            "invalid_group",
        ),
    ] {
        let answer = client.send("v1/pre-reboot", &header, body.into()).await;
        assert_eq!((answer.status, answer.kind.as_str()), (400, kind), "{body}");
    }
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
}

async fn the_group_is_checked_against_its_pattern(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    for group in ["work ers", "workers/a", "é", "a_b"] {
        let client = Zincati::new(&fixture.base(), "fcos-1", group, None);
        let answer = client.pre_reboot().await;
        assert_eq!(
            (answer.status, answer.kind.as_str()),
            (400, "invalid_group"),
            "{group}"
        );
        assert!(answer.value.contains("^[a-zA-Z0-9.-]+$"), "{answer:?}");
    }
    for group in ["default", "workers.eu-1", "A-1"] {
        let client = Zincati::new(
            &fixture.base(),
            &format!("fcos-{}", group.len()),
            group,
            None,
        );
        assert_ne!(client.pre_reboot().await.kind, "invalid_group", "{group}");
    }
}

async fn errors_are_json_with_a_kind_and_a_value_and_a_4xx_or_5xx_status(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let client = fixture.client("fcos-1");
    // Zincati's first ask: the node queues and takes the only slot; its drain waits.
    let answer = client.pre_reboot().await;
    assert_eq!(answer.status, 409, "{answer:?}");
    assert_eq!(answer.kind, "draining");
    assert!(answer.value.contains("fcos-1"), "{answer:?}");
    let other = fixture.client("fcos-2").pre_reboot().await;
    assert_eq!(
        (other.status, other.kind.as_str()),
        (409, "waiting_for_slot")
    );
    assert!(!other.value.is_empty());
}

async fn every_kind_answered_is_one_of_a_small_fixed_set(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let known: Vec<&str> = Kind::all().into_iter().map(Kind::as_str).collect();
    assert!(known.len() <= 30, "{known:?}");
    let header = [("fleet-lock-protocol", "true")];
    let client = fixture.client("fcos-1");
    let mut answers = vec![
        client.pre_reboot().await,
        fixture.client("fcos-2").pre_reboot().await,
        client.send("v1/pre-reboot", &[], client.body.clone()).await,
        client.send("v1/pre-reboot", &header, "x".into()).await,
        client.send("v1/other", &header, client.body.clone()).await,
        fixture.client("Not A Node").pre_reboot().await,
    ];
    answers.push(client.steady_state().await);
    for answer in answers.iter().filter(|a| !a.ok()) {
        assert!(known.contains(&answer.kind.as_str()), "{answer:?}");
    }
}

async fn the_lock_is_recursive_the_holder_asking_again_is_granted_again(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let client = fixture.client("fcos-1");
    granted(&fixture, "fcos-1", &client).await;
    for _ in 0..3 {
        assert!(
            client.pre_reboot().await.ok(),
            "the holder is granted again"
        );
    }
    let record = fixture.record("fcos-1").await;
    assert_eq!(record.state.to_string(), "rebooting");
    let reboots: Vec<_> = fixture
        .events("fcos-1")
        .await
        .into_iter()
        .filter(|(_, e)| e.as_str() == "started")
        .collect();
    assert_eq!(reboots.len(), 1, "one window, one start: {reboots:?}");
}

async fn only_the_holder_can_unlock_what_it_holds(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let holder = fixture.client("fcos-1");
    granted(&fixture, "fcos-1", &holder).await;
    // Another client's unlock is "if held": it holds nothing, so nothing changes.
    let other = fixture.client("fcos-2");
    assert!(other.steady_state().await.ok());
    assert_eq!(
        fixture.record("fcos-1").await.state.to_string(),
        "rebooting"
    );
    assert!(
        holder.pre_reboot().await.ok(),
        "the holder still holds its lock"
    );
    let refused = other.pre_reboot().await;
    assert_eq!(refused.kind, "waiting_for_slot", "the slot is still taken");
}

async fn zincatis_start_up_steady_state_gives_back_nothing_it_does_not_hold(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let client = fixture.client("fcos-1");
    for _ in 0..2 {
        assert!(
            client.steady_state().await.ok(),
            "unlock-if-held of nothing"
        );
    }
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
}

async fn bad_input_gets_a_4xx_naming_the_problem_and_nothing_is_written(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let client = fixture.client("fcos-1");
    let header = ("fleet-lock-protocol", "true");
    let padded = format!(
        "{{\"client_params\": {{\"id\": \"fcos-1\", \"group\": \"default\"}}, \"pad\": \"{}\"}}",
        "x".repeat(MAX_BODY)
    );
    let long_id = format!(
        "{{\"client_params\": {{\"id\": \"{}\", \"group\": \"default\"}}}}",
        "a".repeat(MAX_ID + 1)
    );
    // Headers, body, and the status, kind and named value expected.
    type Case<'a> = (Vec<(&'a str, &'a str)>, String, u16, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (vec![header], padded, 413, "body_too_large", "16384"),
        (
            vec![header],
            "not json".into(),
            400,
            "malformed_body",
            "client_params",
        ),
        (
            vec![header, ("content-type", "text/plain")],
            client.body.clone(),
            415,
            "unsupported_content_type",
            "text/plain",
        ),
        (vec![header], long_id, 400, "invalid_id", "257 bytes"),
    ];
    for (headers, body, status, kind, named) in cases {
        for path in ["v1/pre-reboot", "v1/steady-state"] {
            let answer = client.send(path, &headers, body.clone()).await;
            assert_eq!(
                (answer.status, answer.kind.as_str()),
                (status, kind),
                "{path}"
            );
            assert!(answer.value.contains(named), "{answer:?} names {named}");
        }
    }
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
}

async fn an_unknown_id_is_refused_and_nothing_is_written(backend: Backend) {
    let ids = FileIds::parse("fcos-1 975228d46dc94622b9bbe16671e2b58d\n").expect("ids");
    let options = Options {
        ids: Arc::new(ids),
        ..Options::default()
    };
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    let stranger = fixture.client("c988d2509fdf4cdcbed39037c56406fb");
    for answer in [stranger.pre_reboot().await, stranger.steady_state().await] {
        assert_eq!((answer.status, answer.kind.as_str()), (404, "unknown_id"));
        assert!(
            answer.value.contains("c988d2509fdf4cdcbed39037c56406fb"),
            "{answer:?}"
        );
    }
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
    let known = fixture.client("975228d46dc94622b9bbe16671e2b58d");
    assert_eq!(known.pre_reboot().await.kind, "draining");
    assert_eq!(fixture.record("fcos-1").await.state.to_string(), "draining");
}

async fn a_request_for_another_hosts_id_is_refused(backend: Backend) {
    let ids = FileIds::parse("fcos-1 id-one 127.0.0.2\nfcos-2 id-two 127.0.0.3\n").expect("ids");
    let options = Options {
        ids: Arc::new(ids),
        ..Options::default()
    };
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    let from = |a: &str| Some(a.parse().expect("address"));
    // fcos-2's host asks with fcos-1's id, for both operations.
    let impostor = Zincati::new(&fixture.base(), "id-one", "default", from("127.0.0.3"));
    for answer in [impostor.pre_reboot().await, impostor.steady_state().await] {
        assert_eq!((answer.status, answer.kind.as_str()), (403, "foreign_id"));
        assert!(answer.value.contains("127.0.0.3"), "{answer:?}");
    }
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
    let own = Zincati::new(&fixture.base(), "id-one", "default", from("127.0.0.2"));
    assert_eq!(own.pre_reboot().await.kind, "draining");
    // Once fcos-1 holds the lock, the impostor cannot give it back either.
    assert_eq!(impostor.steady_state().await.kind, "foreign_id");
    assert_eq!(fixture.record("fcos-1").await.state.to_string(), "draining");
}

async fn a_group_with_a_token_needs_it(backend: Backend) {
    let options = Options {
        tokens: HashMap::from([("workers".to_owned(), "s3cret".to_owned())]),
        ..Options::default()
    };
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    let workers = Zincati::new(&fixture.base(), "fcos-1", "workers", None);
    let header = ("fleet-lock-protocol", "true");
    for headers in [
        vec![header],
        vec![header, ("authorization", "Bearer wrong")],
    ] {
        let answer = workers
            .send("v1/pre-reboot", &headers, workers.body.clone())
            .await;
        assert_eq!((answer.status, answer.kind.as_str()), (401, "unauthorized"));
    }
    let other_group = Zincati::new(&fixture.base(), "fcos-2", "default", None);
    let answer = other_group.pre_reboot().await;
    assert_eq!((answer.status, answer.kind.as_str()), (401, "unauthorized"));
    assert_eq!(fixture.written().await, (0, 0), "nothing was written");
    let answer = workers
        .send(
            "v1/pre-reboot",
            &[header, ("authorization", "Bearer s3cret")],
            workers.body.clone(),
        )
        .await;
    assert_eq!(answer.kind, "draining");
}

async fn unknown_paths_and_methods_get_json_errors(backend: Backend) {
    let Some(fixture) = start(backend).await else {
        return;
    };
    let client = fixture.client("fcos-1");
    let header = [("fleet-lock-protocol", "true")];
    let answer = client
        .send("v2/pre-reboot", &header, client.body.clone())
        .await;
    assert_eq!((answer.status, answer.kind.as_str()), (404, "not_found"));
    let response = reqwest::get(format!("{}v1/pre-reboot", fixture.base()))
        .await
        .expect("GET");
    assert_eq!(response.status().as_u16(), 405);
    let error: serde_json::Value = response.json().await.expect("JSON error");
    assert_eq!(error["kind"], "method_not_allowed");
}

async fn a_host_is_known_by_its_ipv4_address_on_a_dual_stack_listener(backend: Backend) {
    let ids = FileIds::parse("fcos-1 id-one 127.0.0.2\n").expect("ids");
    let options = Options {
        ids: Arc::new(ids),
        listen: "[::]:0".parse().expect("address"),
        ..Options::default()
    };
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    let from = |a: &str| Some(a.parse().expect("address"));
    let own = Zincati::new(&fixture.base(), "id-one", "default", from("127.0.0.2"));
    assert_eq!(own.pre_reboot().await.kind, "draining");
    let impostor = Zincati::new(&fixture.base(), "id-one", "default", from("127.0.0.3"));
    let answer = impostor.pre_reboot().await;
    assert_eq!(answer.kind, "foreign_id");
    assert!(answer.value.ends_with("not 127.0.0.3"), "{answer:?}");
}
