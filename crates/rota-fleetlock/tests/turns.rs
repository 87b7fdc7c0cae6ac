//! FleetLock hosts taking their turns through rota, on a real server on SQLite and on
//! PostgreSQL: the whole window, never a 2xx before the drain has ended, one slot shared, and
//! what happens when a host never comes back, gives up, or the server restarts.

mod common;

use std::time::Duration;

use common::{Backend, Fixture, Options, eventually};
use rota_core::{HistoryEvent, Process};
use rota_store::StoreExt;

on_every_store!(
    a_zincati_host_takes_its_turn_and_is_granted_only_once_drained,
    two_clients_with_one_slot_one_waits_until_the_others_steady_state,
    a_host_that_gives_its_lock_back_before_rebooting_ends_its_window,
    a_waiting_host_that_reports_steady_state_leaves_the_queue,
    a_host_that_never_comes_back_fails_closed_at_the_reboot_deadline,
    a_drained_host_that_never_takes_its_lock_is_returned_to_service,
    an_unhealthy_host_fails_closed_after_its_reboot,
    a_paused_fleet_grants_nothing,
    a_restarted_server_carries_on_the_windows_under_way,
    the_metrics_show_a_fleetlock_host_like_any_other_node,
    an_unlocked_host_is_returned_to_service,
    a_retried_host_is_granted_its_lock_again,
    a_spent_failure_budget_pauses_the_fleet_for_fleetlock_hosts_too,
    a_host_outside_its_hours_waits_with_its_place_at_their_start,
    a_waiting_host_that_stops_asking_leaves_the_queue,
    hosts_take_their_turns_in_the_order_they_first_asked,
);

const PAUSE: Duration = Duration::from_millis(100);

fn fleetlock() -> Process {
    Process::FleetLock
}

async fn a_zincati_host_takes_its_turn_and_is_granted_only_once_drained(backend: Backend) {
    let Some(fixture) = Fixture::start(backend, Options::default()).await else {
        return;
    };
    let host = fixture.client("fcos-1");
    // Zincati's start: give back whatever it held (nothing).
    assert!(host.steady_state().await.ok());
    // Its update is staged: it asks, and is refused while the drain runs.
    for _ in 0..5 {
        let answer = host.pre_reboot().await;
        assert_eq!(
            (answer.status, answer.kind.as_str()),
            (409, "draining"),
            "{answer:?}"
        );
        tokio::time::sleep(PAUSE).await;
    }
    assert!(fixture.log("fcos-1").is_empty(), "the drain has not ended");
    fixture.let_drain("fcos-1");
    let refusals = host.until_granted(300, PAUSE).await;
    assert!(
        refusals.iter().all(|a| a.kind == "draining"),
        "{refusals:?}"
    );
    assert_eq!(
        fixture.log("fcos-1"),
        ["drain"],
        "granted after the drain ended"
    );
    let record = fixture.record("fcos-1").await;
    assert_eq!(record.state.to_string(), "rebooting");
    assert_eq!(record.process, Some(fleetlock()));
    // It reboots; its Zincati starts and reports steady state.
    assert!(host.steady_state().await.ok());
    eventually("the window ends healthy", || async {
        fixture.record("fcos-1").await.state.to_string() == "idle"
    })
    .await;
    assert_eq!(fixture.log("fcos-1"), ["drain", "uncordon"]);
    let record = fixture.record("fcos-1").await;
    assert_eq!((record.slot, record.cordoned_by_rota), (None, false));
    assert_eq!(
        fixture.events("fcos-1").await,
        [
            (fleetlock(), HistoryEvent::Started),
            (fleetlock(), HistoryEvent::Finished)
        ]
    );
    // A second update later: a new window.
    assert_eq!(host.pre_reboot().await.kind, "draining");
}

async fn two_clients_with_one_slot_one_waits_until_the_others_steady_state(backend: Backend) {
    let Some(fixture) = Fixture::start(backend, Options::default()).await else {
        return;
    };
    fixture.store.set_concurrency(1).await.expect("concurrency");
    let first = fixture.client("fcos-1");
    let second = fixture.client("fcos-2");
    assert_eq!(first.pre_reboot().await.kind, "draining");
    assert_eq!(second.pre_reboot().await.kind, "waiting_for_slot");
    fixture.let_drain("fcos-1");
    fixture.let_drain("fcos-2");
    first.until_granted(300, PAUSE).await;
    for _ in 0..5 {
        let answer = second.pre_reboot().await;
        assert_eq!(answer.kind, "waiting_for_slot", "{answer:?}");
        tokio::time::sleep(PAUSE).await;
    }
    assert!(
        fixture.log("fcos-2").is_empty(),
        "the second is not drained"
    );
    assert!(first.steady_state().await.ok());
    let refusals = second.until_granted(300, PAUSE).await;
    assert!(
        refusals
            .iter()
            .all(|a| a.kind == "waiting_for_slot" || a.kind == "draining"),
        "{refusals:?}"
    );
    let first_done = fixture.record("fcos-1").await;
    assert_eq!(
        first_done.state.to_string(),
        "idle",
        "slot handed on only once healthy"
    );
    assert_eq!(fixture.log("fcos-1"), ["drain", "uncordon"]);
}

async fn a_host_that_gives_its_lock_back_before_rebooting_ends_its_window(backend: Backend) {
    let Some(fixture) = Fixture::start(backend, Options::default()).await else {
        return;
    };
    let host = fixture.client("fcos-1");
    assert_eq!(host.pre_reboot().await.kind, "draining");
    // Zincati restarts (its update was dropped) and gives back what it holds: the drain
    // stops, and the node goes back into service.
    assert!(host.steady_state().await.ok());
    let record = fixture.record("fcos-1").await;
    assert_eq!(
        (record.state.to_string(), record.slot),
        ("idle".to_owned(), None)
    );
    assert_eq!(fixture.log("fcos-1"), ["uncordon"]);
    assert_eq!(
        fixture.events("fcos-1").await,
        [
            (fleetlock(), HistoryEvent::Started),
            (fleetlock(), HistoryEvent::Canceled)
        ]
    );
}

async fn a_waiting_host_that_reports_steady_state_leaves_the_queue(backend: Backend) {
    let Some(fixture) = Fixture::start(backend, Options::default()).await else {
        return;
    };
    fixture.client("fcos-1").pre_reboot().await;
    let waiting = fixture.client("fcos-2");
    assert_eq!(waiting.pre_reboot().await.kind, "waiting_for_slot");
    assert_eq!(fixture.record("fcos-2").await.state.to_string(), "queued");
    assert!(waiting.steady_state().await.ok());
    let record = fixture.record("fcos-2").await;
    assert_eq!(record.state.to_string(), "idle");
    let open = fixture
        .store
        .open_requests(&record.node)
        .await
        .expect("requests");
    assert!(open.is_empty(), "{open:?}");
}

async fn a_host_that_never_comes_back_fails_closed_at_the_reboot_deadline(backend: Backend) {
    let options = Options::with(|c| c.reboot_timeout = Duration::from_secs(1));
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    let host = fixture.client("fcos-1");
    host.pre_reboot().await;
    fixture.let_drain("fcos-1");
    host.until_granted(300, PAUSE).await;
    eventually("the reboot deadline fails the window", || async {
        fixture.record("fcos-1").await.state.to_string() == "failed"
    })
    .await;
    let record = fixture.record("fcos-1").await;
    assert!(record.slot.is_some(), "fail closed: the slot is kept");
    assert!(
        record.cordoned_by_rota,
        "fail closed: the node stays out of service"
    );
    assert_eq!(fixture.log("fcos-1"), ["drain"], "never uncordoned");
    assert!(
        record
            .last_result
            .as_deref()
            .is_some_and(|r| r.contains("did not come back")),
        "{record:?}"
    );
    assert_eq!(host.pre_reboot().await.kind, "failed");
}

async fn a_drained_host_that_never_takes_its_lock_is_returned_to_service(backend: Backend) {
    let options = Options::with(|c| c.lock_wait = Duration::from_secs(1));
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    fixture.let_drain("fcos-1");
    fixture.client("fcos-1").pre_reboot().await;
    eventually("the window ends once --lock-wait has passed", || async {
        fixture.record("fcos-1").await.state.to_string() == "idle"
    })
    .await;
    assert_eq!(fixture.log("fcos-1"), ["drain", "uncordon"]);
    let events = fixture.events("fcos-1").await;
    assert_eq!(
        events.last(),
        Some(&(fleetlock(), HistoryEvent::Canceled)),
        "{events:?}"
    );
}

async fn an_unhealthy_host_fails_closed_after_its_reboot(backend: Backend) {
    let options = Options::with(|c| c.verify_timeout = Duration::from_secs(1));
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    std::fs::write(fixture.dir.join("fcos-1.unhealthy"), "").expect("unhealthy");
    let host = fixture.client("fcos-1");
    fixture.let_drain("fcos-1");
    host.until_granted(300, PAUSE).await;
    assert!(host.steady_state().await.ok());
    eventually("verification fails the window", || async {
        fixture.record("fcos-1").await.state.to_string() == "failed"
    })
    .await;
    let record = fixture.record("fcos-1").await;
    assert!(
        record.slot.is_some() && record.cordoned_by_rota,
        "{record:?}"
    );
    assert_eq!(fixture.log("fcos-1"), ["drain"], "never uncordoned");
    let events = fixture.events("fcos-1").await;
    assert_eq!(events.last(), Some(&(fleetlock(), HistoryEvent::Failed)));
}

async fn a_paused_fleet_grants_nothing(backend: Backend) {
    let Some(fixture) = Fixture::start(backend, Options::default()).await else {
        return;
    };
    fixture
        .store
        .pause("kernel regression")
        .await
        .expect("pause");
    let host = fixture.client("fcos-1");
    fixture.let_drain("fcos-1");
    for _ in 0..3 {
        let answer = host.pre_reboot().await;
        assert_eq!(
            (answer.status, answer.kind.as_str()),
            (409, "paused"),
            "{answer:?}"
        );
    }
    assert!(fixture.log("fcos-1").is_empty(), "nothing drained");
    fixture.store.resume().await.expect("resume");
    host.until_granted(300, PAUSE).await;
}

async fn a_restarted_server_carries_on_the_windows_under_way(backend: Backend) {
    let Some(fixture) = Fixture::start(backend, Options::default()).await else {
        return;
    };
    let host = fixture.client("fcos-1");
    assert_eq!(host.pre_reboot().await.kind, "draining");
    let fixture = fixture.restart().await;
    let host = fixture.client("fcos-1");
    fixture.let_drain("fcos-1");
    host.until_granted(300, PAUSE).await;
    let fixture = fixture.restart().await;
    let host = fixture.client("fcos-1");
    assert!(
        host.pre_reboot().await.ok(),
        "still granted on the same boot"
    );
    assert!(host.steady_state().await.ok());
    eventually("the window ends healthy", || async {
        fixture.record("fcos-1").await.state.to_string() == "idle"
    })
    .await;
    assert_eq!(
        fixture.events("fcos-1").await,
        [
            (fleetlock(), HistoryEvent::Started),
            (fleetlock(), HistoryEvent::Finished)
        ]
    );
}

async fn the_metrics_show_a_fleetlock_host_like_any_other_node(backend: Backend) {
    let Some(fixture) = Fixture::start(backend, Options::default()).await else {
        return;
    };
    let host = fixture.client("fcos-1");
    assert_eq!(host.pre_reboot().await.kind, "draining");
    let text = fixture.metrics.encode().expect("encode");
    for line in [
        "rota_node_state{node=\"fcos-1\",state=\"draining\"} 1",
        "rota_node_state{node=\"fcos-1\",state=\"idle\"} 0",
        "rota_slot_held{node=\"fcos-1\"} 1",
        "rota_group{node=\"fcos-1\",group=\"default\"} 1",
        "rota_fleetlock_answers_total{endpoint=\"pre-reboot\",kind=\"draining\"} 1",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    fixture.let_drain("fcos-1");
    host.until_granted(300, PAUSE).await;
    assert!(host.steady_state().await.ok());
    eventually("the window ends healthy", || async {
        fixture.record("fcos-1").await.state.to_string() == "idle"
    })
    .await;
    let text = fixture.metrics.encode().expect("encode");
    for line in [
        "rota_node_state{node=\"fcos-1\",state=\"idle\"} 1",
        "rota_slot_held{node=\"fcos-1\"} 0",
        "rota_work_results_total{node=\"fcos-1\",process=\"fleetlock\",outcome=\"finished\"} 1",
        "rota_fleetlock_answers_total{endpoint=\"pre-reboot\",kind=\"granted\"} 1",
        "rota_fleetlock_answers_total{endpoint=\"steady-state\",kind=\"granted\"} 1",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}

/// A host whose window failed at the reboot deadline (1 s), the slot kept.
async fn failed(backend: Backend) -> Option<Fixture> {
    let options = Options::with(|c| c.reboot_timeout = Duration::from_secs(1));
    let fixture = Fixture::start(backend, options).await?;
    let host = fixture.client("fcos-1");
    fixture.let_drain("fcos-1");
    host.until_granted(300, PAUSE).await;
    eventually("the reboot deadline fails the window", || async {
        fixture.record("fcos-1").await.state.to_string() == "failed"
    })
    .await;
    Some(fixture)
}

async fn an_unlocked_host_is_returned_to_service(backend: Backend) {
    let Some(fixture) = failed(backend).await else {
        return;
    };
    let node = fixture.record("fcos-1").await.node;
    fixture
        .store
        .unlock(&node, "looked at it: fine")
        .await
        .expect("unlock");
    eventually("the unlocked node is uncordoned", || async {
        !fixture.record("fcos-1").await.cordoned_by_rota
    })
    .await;
    assert_eq!(fixture.log("fcos-1"), ["drain", "uncordon"]);
    let record = fixture.record("fcos-1").await;
    assert_eq!(
        (record.state.to_string(), record.slot),
        ("idle".to_owned(), None)
    );
    let text = fixture.metrics.encode().expect("encode");
    for line in [
        "rota_node_state{node=\"fcos-1\",state=\"idle\"} 1",
        "rota_node_state{node=\"fcos-1\",state=\"failed\"} 0",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}

async fn a_retried_host_is_granted_its_lock_again(backend: Backend) {
    let Some(fixture) = failed(backend).await else {
        return;
    };
    let node = fixture.record("fcos-1").await.node;
    fixture.store.retry(&node).await.expect("retry");
    let host = fixture.client("fcos-1");
    assert!(host.pre_reboot().await.ok(), "drained and holding its slot");
    assert!(host.steady_state().await.ok());
    eventually("the retried window ends healthy", || async {
        fixture.record("fcos-1").await.state.to_string() == "idle"
    })
    .await;
    assert_eq!(fixture.log("fcos-1"), ["drain", "uncordon"]);
}

async fn a_spent_failure_budget_pauses_the_fleet_for_fleetlock_hosts_too(backend: Backend) {
    let Some(fixture) = failed(backend).await else {
        return;
    };
    fixture.store.set_concurrency(2).await.expect("concurrency");
    let rollout = rota_core::Rollout {
        batches: rota_core::Batches::default(),
        failure_budget: Some(rota_core::FailureBudget::Nodes(
            std::num::NonZeroU32::new(1).expect("one"),
        )),
    };
    fixture
        .store
        .set(rota_store::Setting::Rollout(rollout))
        .await
        .expect("rollout");
    let next = fixture.client("fcos-2");
    fixture.let_drain("fcos-2");
    let answer = next.pre_reboot().await;
    assert_eq!(
        (answer.status, answer.kind.as_str()),
        (409, "paused"),
        "{answer:?}"
    );
    assert!(
        answer.value.contains("failure budget exhausted"),
        "{answer:?}"
    );
    let pause = fixture.store.paused().await.expect("read").expect("paused");
    assert!(pause.reason.contains("fcos-1"), "{pause:?}");
    assert!(fixture.log("fcos-2").is_empty(), "nothing drained");
}

async fn a_host_outside_its_hours_waits_with_its_place_at_their_start(backend: Backend) {
    let now = rota_store::now_millis();
    // Hours that do not hold now, whatever the day.
    let hours = ["sat 02:00-03:00 UTC", "wed 02:00-03:00 UTC"]
        .iter()
        .map(|text| {
            rota_core::MaintenanceHours::new(vec![text.parse().expect("hours")]).expect("hours")
        })
        .find(|hours| !hours.contains_millis(now))
        .expect("hours outside now");
    let starts = hours.next_start_millis(now).expect("a next start");
    let options = Options::with(|c| c.hours = Some(hours));
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    fixture.let_drain("fcos-1");
    let host = fixture.client("fcos-1");
    for _ in 0..3 {
        let answer = host.pre_reboot().await;
        assert_eq!(
            (answer.status, answer.kind.as_str()),
            (409, "outside_hours"),
            "{answer:?}"
        );
    }
    let record = fixture.record("fcos-1").await;
    assert_eq!(record.state.to_string(), "queued");
    assert_eq!(
        record.queued_at,
        Some(starts),
        "its place is the hours' start"
    );
    assert!(fixture.log("fcos-1").is_empty(), "nothing drained");
}

async fn a_waiting_host_that_stops_asking_leaves_the_queue(backend: Backend) {
    let options = Options::with(|c| c.client_ttl = Duration::from_secs(2));
    let Some(fixture) = Fixture::start(backend, options).await else {
        return;
    };
    // The first holds the slot through a drain that outlasts its session's TTL.
    let first = fixture.client("fcos-1");
    assert_eq!(first.pre_reboot().await.kind, "draining");
    let gone = fixture.client("fcos-2");
    assert_eq!(gone.pre_reboot().await.kind, "waiting_for_slot");
    eventually("the host that stopped asking leaves the queue", || async {
        fixture.record("fcos-2").await.state.to_string() == "idle"
    })
    .await;
    let record = fixture.record("fcos-2").await;
    let open = fixture
        .store
        .open_requests(&record.node)
        .await
        .expect("requests");
    assert!(open.is_empty(), "{open:?}");
    // The first's window went on: its drain ends, and it takes its lock.
    fixture.let_drain("fcos-1");
    first.until_granted(300, PAUSE).await;
}

async fn hosts_take_their_turns_in_the_order_they_first_asked(backend: Backend) {
    let Some(fixture) = Fixture::start(backend, Options::default()).await else {
        return;
    };
    let names = ["fcos-1", "fcos-2", "fcos-3", "fcos-4", "fcos-5"];
    for name in names {
        fixture.let_drain(name);
    }
    // The first takes the slot; the others queue behind it, each asking once.
    let hosts: Vec<_> = names.iter().map(|name| fixture.client(name)).collect();
    for (n, host) in hosts.iter().enumerate() {
        let answer = host.pre_reboot().await;
        let expected = if n == 0 {
            "draining"
        } else {
            "waiting_for_slot"
        };
        assert_eq!(answer.kind, expected, "{}: {answer:?}", names[n]);
    }
    for (n, host) in hosts.iter().enumerate() {
        host.until_granted(300, PAUSE).await;
        for (later, other) in hosts.iter().enumerate().skip(n + 1) {
            let answer = other.pre_reboot().await;
            assert_eq!(
                answer.kind, "waiting_for_slot",
                "{} while {} holds the slot",
                names[later], names[n]
            );
        }
        assert!(host.steady_state().await.ok());
        eventually("the window ends", || async {
            fixture.record(names[n]).await.state.to_string() == "idle"
        })
        .await;
    }
}
