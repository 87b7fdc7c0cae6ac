//! rota's scheduler on Kubernetes (docs/design.md §7): one leader, elected on a Lease, grants
//! the slots. It follows the RotaNodes, the slot Leases and `rota-config` with kube-runtime's
//! reflectors, lets rota-core decide on what they show ([`rota_core::grants::decide`]: the
//! grants of `schedule`, the withdrawals of grants not taken up in time and of Leases not in
//! use), and carries each operation out by compare-and-swap, in the order the model checker
//! proved safe (`crates/rota-core/tests/scheduler_model`).
//!
//! - `leader`: the leader election;
//! - `fleet`: the reflectors, and the read of the fleet that rota-core decides on;
//! - `operations`: a grant and a withdrawal, carried out;
//! - `procedure_status`: the status of each Procedure, derived from the RotaNodes and written
//!   by the leader alone.
//!
//! Agents never take a slot: while no scheduler runs, windows under way go on to their end and
//! nothing new is granted.

mod fleet;
mod leader;
mod operations;
mod procedure_status;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use rota_core::grants::Operation;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;

pub use fleet::{Fleet, Read};
pub use leader::Election;

pub use rota_kube_api::slots::LEADER_LEASE;

/// What a scheduler serves, and its timing.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// rota's namespace: the slot Leases, `rota-config`, the leader Lease, and the label of
    /// the RotaNodes it schedules.
    pub namespace: String,
    /// This scheduler's name among the candidates (the Pod's).
    pub identity: String,
    /// How long a leader that stopped renewing keeps the lead: a failover grants again within
    /// it.
    pub lease_duration: Duration,
    /// How long a node's agent has to take a grant up before it is withdrawn.
    pub take_up: Duration,
    /// `reportingController` of the Events it records.
    pub event_reporter: String,
    /// Put before the name of every Procedure whose status it writes, as
    /// `KubeStoreConfig::name_prefix` is before the installation's objects: empty in production;
    /// tests sharing one cluster set their stores' own.
    pub name_prefix: String,
}

impl SchedulerConfig {
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> SchedulerConfig {
        SchedulerConfig {
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            take_up: Duration::from_secs(60),
            event_reporter: "rota-scheduler".into(),
            name_prefix: String::new(),
        }
    }
}

/// One round of a scheduler, on lists read now instead of its watches: what the store's tests
/// and the conformance suite run before each ask for a slot, so that grants are decided when
/// asked, as the SQL stores decide them. It takes the leader Lease as `rota-round` while
/// nobody else leads (agents that wait long look for a scheduler), and decides whether it got
/// it or not: rounds that run at once are schedulers that all think they lead, and the
/// Leases' compare-and-swap decides.
pub async fn round(client: Client, namespace: &str, take_up: Duration) -> Result<(), kube::Error> {
    // Agents that wait long look for a scheduler: a round stands for one while nobody leads.
    let election = Election {
        lease: LEADER_LEASE.into(),
        identity: "rota-round".into(),
        duration: Duration::from_secs(60),
        renew_every: Duration::from_secs(20),
    };
    election
        .try_lead(&Api::namespaced(client.clone(), namespace))
        .await?;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "rota-scheduler".into(),
            instance: None,
        },
    );
    let operations = operations::Operations::new(client.clone(), namespace, recorder);
    // A slot withdrawn is granted on the next read: read again until nothing goes back.
    for _ in 0..4 {
        let fleet = Fleet::read(client.clone(), namespace).await?;
        let (decided, read) = match fleet.decide(take_up) {
            Ok(decided) => decided,
            Err(e) => {
                warn!(error = %e, "rota-config does not read: nothing is granted until it does");
                return Ok(());
            }
        };
        let all = decided.iter().map(|op| operations.carry_out(&read, op));
        let done = futures::future::join_all(all).await;
        let withdrew = decided
            .iter()
            .zip(done)
            .any(|(op, done)| done && matches!(op, Operation::Withdraw { .. }));
        if !withdrew {
            break;
        }
    }
    Ok(())
}

/// Carries `operation` out on the objects of `read`, the read it was decided on; whether it
/// did (a compare-and-swap that lost does nothing).
pub async fn carry_out(
    client: Client,
    namespace: &str,
    read: &Read,
    operation: &Operation,
) -> bool {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "rota-scheduler".into(),
            instance: None,
        },
    );
    operations::Operations::new(client, namespace, recorder)
        .carry_out(read, operation)
        .await
}

/// Runs a scheduler until `cancel`: it competes for the lead, and while it leads, decides on
/// every change of what it follows (and once a second, for the take-up timeouts), and keeps
/// the Procedures' status (see `procedure_status`).
pub async fn run(client: Client, config: SchedulerConfig, cancel: CancellationToken) {
    let changed = Arc::new(Notify::new());
    let fleet = Arc::new(Fleet::follow(
        client.clone(),
        &config.namespace,
        changed.clone(),
    ));
    let election = Election {
        lease: LEADER_LEASE.into(),
        identity: config.identity.clone(),
        duration: config.lease_duration,
        renew_every: config.lease_duration / 3,
    };
    let (leading_tx, mut leading) = watch::channel(false);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    // The election runs beside the decisions and ends with them, even when this task is
    // aborted (a scheduler killed): a guard aborts it on drop.
    let elect = {
        let cancel = cancel.clone();
        Election::spawn(election, leases, leading_tx, cancel)
    };
    // The statuses are written beside the decisions, so that a slow write never delays a grant,
    // and end with them (a guard aborts them on drop).
    let statuses = Aborted(tokio::spawn(procedure_status::keep(
        client.clone(),
        &config.namespace,
        &config.name_prefix,
        fleet.clone(),
        leading.clone(),
        cancel.clone(),
    )));
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: config.event_reporter.clone(),
            instance: Some(config.identity.clone()),
        },
    );
    let operations = operations::Operations::new(client, &config.namespace, recorder);
    let tick = Duration::from_secs(1).min(config.take_up / 4);
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = leading.changed() => {}
            () = changed.notified() => {}
            () = tokio::time::sleep(tick) => {}
        }
        if !*leading.borrow() || !fleet.ready() {
            continue;
        }
        let (decided, read) = match fleet.decide(config.take_up) {
            Ok(decided) => decided,
            Err(e) => {
                warn!(error = %e, "rota-config does not read: nothing is granted until it does");
                continue;
            }
        };
        // The operations of one read touch each slot and node once: they go out at once, as a
        // window's handoff waits for them.
        if *leading.borrow() && !cancel.is_cancelled() {
            let all = decided.iter().map(|op| operations.carry_out(&read, op));
            futures::future::join_all(all).await;
        }
    }
    if let Err(e) = statuses.finish().await {
        warn!(error = %e, "the writer of the procedures' status ended abnormally");
    }
    drop(fleet);
    elect.finish().await;
}

/// A task aborted when dropped.
struct Aborted(tokio::task::JoinHandle<()>);

impl Aborted {
    /// Waits for the task's end.
    async fn finish(mut self) -> Result<(), tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl Drop for Aborted {
    fn drop(&mut self) {
        self.0.abort();
    }
}
