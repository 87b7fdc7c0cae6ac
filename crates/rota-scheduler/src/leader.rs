//! Leader election on a Lease, as client-go's `leaderelection` does it: the leader renews the
//! Lease `rota-scheduler` every [`Election::renew_every`]; another candidate takes it once its
//! `renewTime` is older than its `leaseDurationSeconds`. Every write is a compare-and-swap on
//! the Lease's `resourceVersion`. (kube-runtime has no leader election.)
//!
//! Leading is never what keeps two schedulers from granting a slot twice: the slot Leases'
//! compare-and-swap is. A deposed leader that has not noticed yet can only lose its races.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use rota_kube_client::is_conflict;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Who may lead, and on which Lease.
#[derive(Clone, Debug)]
pub struct Election {
    pub lease: String,
    /// This candidate's name (the Pod's).
    pub identity: String,
    /// How long a leader that stopped renewing keeps the lead.
    pub duration: Duration,
    /// How often the leader renews, and a candidate tries.
    pub renew_every: Duration,
}

/// A running election, aborted when dropped.
pub struct Running(Option<tokio::task::JoinHandle<()>>);

impl Running {
    /// Waits for the election to end (after its cancellation), giving the lead up.
    pub async fn finish(mut self) {
        if let Some(task) = self.0.take()
            && let Err(e) = task.await
        {
            warn!(error = %e, "the leader election ended abnormally");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl Election {
    /// Runs the election in a task of its own (see [`Election::run`]).
    pub fn spawn(
        self,
        api: Api<Lease>,
        leading: watch::Sender<bool>,
        cancel: CancellationToken,
    ) -> Running {
        Running(Some(tokio::spawn(async move {
            self.run(api, leading, cancel).await;
        })))
    }

    /// Tries to take or renew the lead every `renew_every` until `cancel`, telling `leading`
    /// whether it holds. A leader that could not renew for `duration` stops leading (another
    /// may have taken over), before the others may take it: they wait the whole `duration`
    /// from the last renewal they saw.
    pub async fn run(
        &self,
        api: Api<Lease>,
        leading: watch::Sender<bool>,
        cancel: CancellationToken,
    ) {
        let mut renewed_at = tokio::time::Instant::now();
        loop {
            match self.try_lead(&api).await {
                Ok(true) => {
                    renewed_at = tokio::time::Instant::now();
                    if !*leading.borrow() {
                        info!(identity = %self.identity, "leading");
                    }
                    leading.send_replace(true);
                }
                Ok(false) => {
                    if *leading.borrow() {
                        info!(identity = %self.identity, "no longer leading");
                    }
                    leading.send_replace(false);
                }
                Err(e) => {
                    warn!(error = %e, "could not read or write the leader Lease");
                    // Stop before anyone may take over: they count from the last renewal.
                    if renewed_at.elapsed() >= self.duration.mul_f32(0.8) {
                        leading.send_replace(false);
                    }
                }
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(self.renew_every) => {}
            }
        }
        if *leading.borrow() {
            self.step_down(&api).await;
        }
        leading.send_replace(false);
    }

    /// One attempt: `true` when this candidate holds the Lease after it.
    pub(crate) async fn try_lead(&self, api: &Api<Lease>) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let current = api.get_opt(&self.lease).await?;
        let spec = current
            .as_ref()
            .and_then(|l| l.spec.clone())
            .unwrap_or_default();
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let ours = holder == Some(self.identity.as_str());
        let expired = spec.renew_time.as_ref().is_none_or(|renewed| {
            let duration = spec.lease_duration_seconds.map_or(self.duration, |s| {
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
            });
            let since = now.duration_since(renewed.0);
            since.as_secs_f64() > duration.as_secs_f64()
        });
        if !(ours || holder.is_none() || expired) {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.lease.clone()),
                resource_version: current
                    .as_ref()
                    .and_then(|l| l.metadata.resource_version.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: i32::try_from(self.duration.as_secs()).ok(),
                acquire_time: if ours {
                    spec.acquire_time.clone()
                } else {
                    Some(MicroTime(now))
                },
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(if ours { transitions } else { transitions + 1 }),
                ..LeaseSpec::default()
            }),
        };
        let written = match current {
            Some(_) => {
                api.replace(&self.lease, &PostParams::default(), &lease)
                    .await
            }
            None => api.create(&PostParams::default(), &lease).await,
        };
        match written {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lead up at shutdown, so that a standby takes over at once.
    async fn step_down(&self, api: &Api<Lease>) {
        let Ok(Some(mut lease)) = api.get_opt(&self.lease).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        if let Err(e) = api
            .replace(&self.lease, &PostParams::default(), &lease)
            .await
        {
            warn!(error = %e, "could not give the leader Lease up; a standby takes over once it expires");
        }
    }
}
