//! The notifier against real HTTP servers on 127.0.0.1: one that accepts, one that answers
//! 500, one that never answers, and a port nobody listens on.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::routing::post;
use rota_core::{NodeName, Process};
use rota_notify::{
    Counters, Event, EventKind, Notifier, NotifierConfig, NotifyError, Template, Webhook,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy)]
enum Behaviour {
    Accept,
    Fail,
    Hang,
}

/// What a test server received: each request's path and JSON body.
#[derive(Default)]
struct Received(Mutex<Vec<(String, Value)>>);

impl Received {
    fn all(&self) -> Vec<(String, Value)> {
        self.0.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A webhook server on an ephemeral loopback port; it lives as long as the test's runtime.
async fn server(behaviour: Behaviour) -> (SocketAddr, Arc<Received>) {
    let received = Arc::new(Received::default());
    let handler = move |State(received): State<Arc<Received>>,
                        uri: Uri,
                        Json(body): Json<Value>| async move {
        received
            .0
            .lock()
            .unwrap()
            .push((uri.path().to_owned(), body));
        match behaviour {
            Behaviour::Accept => StatusCode::NO_CONTENT,
            Behaviour::Fail => StatusCode::INTERNAL_SERVER_ERROR,
            Behaviour::Hang => std::future::pending().await,
        }
    };
    let app = axum::Router::new()
        .route("/{*path}", post(handler))
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

fn event(kind: EventKind, node: &str) -> Event {
    Event {
        kind,
        node: NodeName::new(node).unwrap(),
        process: Process::Reboot,
        cause: (kind == EventKind::Failed).then(|| "node not Ready after 10m".to_owned()),
        slot: Some(1),
        at: "2026-11-29T10:00:00Z".parse().unwrap(),
    }
}

fn counts(counters: &Counters) -> (u64, u64, u64) {
    (
        counters.sent.load(Ordering::Relaxed),
        counters.failed.load(Ordering::Relaxed),
        counters.dropped.load(Ordering::Relaxed),
    )
}

/// Waits until `done` holds, for at most ten seconds.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn json_and_slack_webhooks_receive_their_payloads() {
    let (addr, received) = server(Behaviour::Accept).await;
    let mut config = NotifierConfig::new(vec![
        Webhook::json(&format!("http://{addr}/json")).unwrap(),
        Webhook::slack(&format!("http://{addr}/services/T0/B0/secret")).unwrap(),
    ]);
    config.templates.set(
        EventKind::Failed,
        ":x: {node} {event} {process} in slot {slot} at {at}: {cause}"
            .parse::<Template>()
            .unwrap(),
    );
    let (notifier, task) = Notifier::start(config, CancellationToken::new()).unwrap();
    let counters = notifier.counters();

    notifier.notify(event(EventKind::DrainStarted, "node-a"));
    notifier.notify(event(EventKind::Failed, "node-b"));
    drop(notifier);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(counts(&counters), (4, 0, 0));
    // Events go out one after another, so each webhook saw them in order.
    let mut all = received.all();
    all.sort_by(|(a, _), (b, _)| a.cmp(b));
    assert_eq!(
        all,
        vec![
            (
                "/json".to_owned(),
                json!({
                    "event": "drain-started",
                    "node": "node-a",
                    "process": "reboot",
                    "cause": null,
                    "slot": 1,
                    "at": "2026-11-29T10:00:00Z",
                    "message": "rota: draining node-a for reboot (slot 1)",
                })
            ),
            (
                "/json".to_owned(),
                json!({
                    "event": "failed",
                    "node": "node-b",
                    "process": "reboot",
                    "cause": "node not Ready after 10m",
                    "slot": 1,
                    "at": "2026-11-29T10:00:00Z",
                    "message": ":x: node-b failed reboot in slot 1 at 2026-11-29T10:00:00Z: \
                                node not Ready after 10m",
                })
            ),
            (
                "/services/T0/B0/secret".to_owned(),
                json!({ "text": "rota: draining node-a for reboot (slot 1)" })
            ),
            (
                "/services/T0/B0/secret".to_owned(),
                json!({ "text": ":x: node-b failed reboot in slot 1 at 2026-11-29T10:00:00Z: node not Ready after 10m" })
            ),
        ]
    );
}

#[tokio::test]
async fn failing_webhooks_are_counted_and_the_others_still_get_the_event() {
    let (good, good_received) = server(Behaviour::Accept).await;
    let (bad, bad_received) = server(Behaviour::Fail).await;
    let nobody = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let config = NotifierConfig::new(vec![
        Webhook::json(&format!("http://{bad}/hook")).unwrap(),
        Webhook::json(&format!("http://{nobody}/hook")).unwrap(),
        Webhook::slack(&format!("http://{good}/hook")).unwrap(),
    ]);
    let (notifier, _task) = Notifier::start(config, CancellationToken::new()).unwrap();
    let counters = notifier.counters();

    notifier.notify(event(EventKind::Finished, "node-a"));
    eventually("one sent and two failed", || counts(&counters) == (1, 2, 0)).await;
    assert_eq!(bad_received.count(), 1);
    assert_eq!(good_received.count(), 1);
}

#[tokio::test]
async fn a_hanging_webhook_times_out_and_notify_never_waits() {
    let (addr, received) = server(Behaviour::Hang).await;
    let mut config = NotifierConfig::new(vec![Webhook::json(&format!("http://{addr}/h")).unwrap()]);
    config.queue = 1;
    config.timeout = Duration::from_millis(300);
    let (notifier, _task) = Notifier::start(config, CancellationToken::new()).unwrap();
    let counters = notifier.counters();

    notifier.notify(event(EventKind::DrainStarted, "node-a"));
    eventually("the first request to arrive", || received.count() == 1).await;
    // One event in flight, one fits the queue, three are dropped: none of it waits.
    let begun = Instant::now();
    for node in ["node-b", "node-c", "node-d", "node-e"] {
        notifier.notify(event(EventKind::Reboot, node));
    }
    assert!(begun.elapsed() < Duration::from_secs(1), "notify waited");
    assert_eq!(counts(&counters), (0, 0, 3));

    eventually("both deliveries to time out", || {
        counts(&counters) == (0, 2, 3)
    })
    .await;
    let nodes: Vec<Value> = received
        .all()
        .into_iter()
        .map(|(_, b)| b["node"].clone())
        .collect();
    assert_eq!(nodes, vec![json!("node-a"), json!("node-b")]);
}

#[tokio::test]
async fn cancel_stops_a_hanging_delivery_at_once_and_drops_the_rest() {
    let (addr, received) = server(Behaviour::Hang).await;
    let mut config =
        NotifierConfig::new(vec![Webhook::slack(&format!("http://{addr}/h")).unwrap()]);
    config.timeout = Duration::from_secs(600);
    let cancel = CancellationToken::new();
    let (notifier, task) = Notifier::start(config, cancel.clone()).unwrap();
    let counters = notifier.counters();

    for node in ["node-a", "node-b", "node-c"] {
        notifier.notify(event(EventKind::Reboot, node));
    }
    eventually("the first request to arrive", || received.count() == 1).await;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(counts(&counters), (0, 0, 3));

    notifier.notify(event(EventKind::Finished, "node-a"));
    assert_eq!(
        counts(&counters),
        (0, 0, 4),
        "a stopped notifier drops and counts"
    );
}

#[tokio::test]
async fn bad_configuration_is_refused_at_start() {
    let mut config = NotifierConfig::new(Vec::new());
    config.queue = 0;
    let err = Notifier::start(config, CancellationToken::new()).unwrap_err();
    assert!(matches!(err, NotifyError::QueueSize));
    assert_eq!(
        err.to_string(),
        "invalid notification queue size 0; expected at least 1"
    );
}
