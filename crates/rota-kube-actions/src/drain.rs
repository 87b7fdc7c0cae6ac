//! Drain: cordon, evict through the Eviction API, wait until the evicted pods are gone and the
//! wait-completed ones have completed (a watch reports each change as it happens; a slow
//! re-list is the safety net).
//!
//! All state lives in the API server (the cordon, the record of what is evicted, the
//! evictions, the pods' deletion), none in this process, so [`drain`] is idempotent and
//! cancel-safe: dropping its future at any await (the caller's timeout) leaves nothing to clean
//! up but the cordon, and calling it again carries on where the cluster is. It spawns no task
//! that could outlive the future.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::Status;
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{Error, Refusal, Result};
use crate::health_gate::{self, Leaving};
use crate::node;
use crate::node_labels::NodeLabels;
use crate::selection::{Plan, is_finished, overdue, plan};
use crate::selector::Selector;

/// How long a drain waits, by default, for its wait-completed pods to complete: a CI job or a
/// batch step of the usual length (GitLab CI's default job timeout is one hour) finishes
/// within it, and the fleet's rollout, which waits for the slot this node holds, is held up
/// for no longer than that.
pub const WAIT_COMPLETED_TIMEOUT: Duration = Duration::from_secs(3600);

/// How a drain treats the node's pods. The defaults are the safe ones: pods that would lose
/// data or not come back are refused, not evicted.
#[derive(Clone, Debug)]
pub struct DrainOptions {
    /// How many evictions may be in progress (including their retries) at once; 0 counts as 1.
    pub concurrency: usize,
    /// Evict pods that have emptyDir volumes (their data is lost), like kubectl's
    /// `--delete-emptydir-data`.
    pub delete_emptydir_data: bool,
    /// Evict pods that no controller manages (nothing recreates them), like kubectl's `--force`.
    pub force: bool,
    /// Overrides the pods' termination grace period.
    pub grace_period: Option<Duration>,
    /// The first pause before retrying an eviction that a PodDisruptionBudget refused (429);
    /// it doubles with each refusal up to `retry_max`.
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// How often to list the node's pods while waiting for the evicted ones to go. A watch
    /// reports each deletion as it happens; the list catches what a broken watch missed.
    pub poll_interval: Duration,
    /// Labels set on the Node with the cordon, and with the uncordon of [`crate::KubeActions`].
    pub labels: NodeLabels,
    /// A pod still there this long after its deletion deadline (its `deletionTimestamp`, the
    /// end of its grace period) is not waited for, like kubectl's
    /// `--skip-wait-for-delete-timeout`: a pod held by a finalizer, or by a kubelet that cannot
    /// stop it, then no longer keeps the node from the reboot that may well free it. `None`
    /// waits for every pod.
    pub skip_wait_for_delete: Option<Duration>,
    /// A label selector (kured's `--drain-pod-selector`): only the node's pods that match it
    /// are evicted and waited for; the others stay. The API server evaluates it, so it must
    /// be one it accepts. `None`: every pod the rules above allow.
    pub pod_selector: Option<String>,
    /// The drain fails with [`Error::DrainTimeout`], naming what it still waits for, once its
    /// evictions and the wait for the evicted pods to go have taken this long (from the
    /// drain's start). The wait for wait-completed pods has its own bound,
    /// `wait_completed_timeout`. `None`: no bound but the caller's.
    pub timeout: Option<Duration>,
    /// Pods that match this selector are wait-completed (Cluster API's `WaitCompleted`), as
    /// are pods annotated [`crate::DRAIN_ANNOTATION`]` = `[`crate::WAIT_COMPLETED`]: they are
    /// not evicted; the drain waits until each has completed (phase Succeeded or Failed) or
    /// is gone. The cordon keeps new ones off the node.
    pub wait_completed_selector: Option<Selector>,
    /// The drain fails with [`Error::WaitCompletedTimeout`], naming the pods, if wait-completed
    /// pods still run this long after its start; they are not evicted then either.
    pub wait_completed_timeout: Duration,
}

impl Default for DrainOptions {
    fn default() -> DrainOptions {
        DrainOptions {
            concurrency: 5,
            delete_emptydir_data: false,
            force: false,
            grace_period: None,
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            labels: NodeLabels::default(),
            skip_wait_for_delete: None,
            pod_selector: None,
            timeout: None,
            wait_completed_selector: None,
            wait_completed_timeout: WAIT_COMPLETED_TIMEOUT,
        }
    }
}

/// What a drain in progress is waiting for: what an operator needs to know when it does not
/// finish. See [`drain_with_progress`]; its `Display` is the drain's account in the agent's
/// log and in the failure of a drain that timed out, such as "waiting for 1 pod to complete:
/// ci/job-x".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Pods (`namespace/name`) whose eviction is refused for now, with the API server's reason
    /// (a PodDisruptionBudget's message).
    pub refused: BTreeMap<String, String>,
    /// Pods (`namespace/name`) evicted or already terminating that still exist.
    pub terminating: Vec<String>,
    /// Wait-completed pods (`namespace/name`, sorted) that still run: the drain waits for
    /// them to complete, and does not evict them.
    pub waiting: Vec<String>,
}

/// "N pod(s)".
fn pods(n: usize) -> String {
    if n == 1 {
        "1 pod".to_owned()
    } else {
        format!("{n} pods")
    }
}

/// "waiting for 1 pod to complete: ci/job-x": the one wording of the wait for wait-completed
/// pods, in the log, the progress and the errors.
pub(crate) fn waiting_for(waiting: &[String]) -> String {
    format!(
        "waiting for {} to complete: {}",
        pods(waiting.len()),
        waiting.join(", ")
    )
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.refused.is_empty() {
            let refused: Vec<String> = self
                .refused
                .iter()
                .map(|(pod, reason)| format!("{pod} ({reason})"))
                .collect();
            parts.push(format!(
                "eviction refused for {}: {}",
                pods(refused.len()),
                refused.join(", ")
            ));
        }
        if !self.terminating.is_empty() {
            parts.push(format!(
                "waiting for {} to terminate: {}",
                pods(self.terminating.len()),
                self.terminating.join(", ")
            ));
        }
        if !self.waiting.is_empty() {
            parts.push(waiting_for(&self.waiting));
        }
        if parts.is_empty() {
            return f.write_str("waiting for nothing");
        }
        f.write_str(&parts.join("; "))
    }
}

/// One pod instance: a pod recreated under the same name (a StatefulSet's) has another UID.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PodRef {
    namespace: String,
    name: String,
    uid: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

fn pod_ref(pod: &Pod) -> PodRef {
    PodRef {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
    }
}

fn on_node(node: &str) -> String {
    format!("spec.nodeName={node}")
}

/// The pods on `node` that the drain concerns (those matching its pod selector, if any), and
/// the resourceVersion of the list (for a watch that starts there).
async fn pods_on(
    client: &Client,
    node: &str,
    selector: Option<&str>,
) -> Result<(Vec<Pod>, Option<String>)> {
    let mut params = ListParams::default().fields(&on_node(node));
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let list = Api::<Pod>::all(client.clone())
        .list(&params)
        .await
        .map_err(|e| Error::api("list", "pods", format!("on node {node}"), e))?;
    Ok((list.items, list.metadata.resource_version))
}

/// Cordons `node` and evicts its pods (see [`DrainOptions`]), then waits until every evicted
/// pod is gone and every wait-completed pod has completed. Returns at once with
/// [`Error::Refused`], naming every offending pod, if a pod may not be evicted under
/// `options`; the node then stays cordoned.
///
/// Without `options.timeout`, a PodDisruptionBudget that never allows the eviction makes the
/// drain wait forever: bound it with `tokio::time::timeout` too.
pub async fn drain(client: &Client, node: &str, options: &DrainOptions) -> Result<()> {
    drain_with_progress(client, node, options, &watch::Sender::default()).await
}

/// [`drain`], publishing what it waits for in `progress` as it goes.
pub async fn drain_with_progress(
    client: &Client,
    node: &str,
    options: &DrainOptions,
    progress: &watch::Sender<Progress>,
) -> Result<()> {
    let started = Instant::now();
    progress.send_replace(Progress::default());
    let cordoned = node::cordon(client, node, &options.labels).await?;
    let mut evict = Vec::new();
    let mut wait = Vec::new();
    let mut completing = Vec::new();
    let mut refusals = Vec::new();
    let mut leaving = Vec::new();
    let (pods, version) = pods_on(client, node, options.pod_selector.as_deref()).await?;
    for pod in pods {
        let pod_ref = pod_ref(&pod);
        let planned = plan(&pod, options);
        if matches!(planned, Ok(Plan::Wait | Plan::Evict)) {
            leaving.push(Leaving::of(&pod));
        }
        match planned {
            Ok(Plan::Leave) => debug!(node, pod = %pod_ref, "leaving the pod on the node"),
            Ok(Plan::Wait) => wait.push(pod_ref),
            Ok(Plan::WaitCompleted) => completing.push(pod_ref),
            Ok(Plan::Evict) => evict.push(pod_ref),
            Err(reasons) => refusals.extend(reasons.into_iter().map(|reason| Refusal {
                pod: pod_ref.to_string(),
                reason,
            })),
        }
    }
    if !refusals.is_empty() {
        return Err(Error::Refused {
            node: node.to_owned(),
            refusals,
        });
    }
    // Pods already terminating count too: an interrupted drain of this window may have
    // evicted them, and the health gate waits for their workloads all the same. The
    // wait-completed ones leave nothing to restore: they run to their end.
    health_gate::record(client, node, &cordoned, &leaving).await?;
    info!(
        node,
        evicting = evict.len(),
        terminating = wait.len(),
        wait_completed = completing.len(),
        "draining"
    );
    let evicted = evict_and_wait_gone(
        client,
        node,
        evict,
        wait,
        version.clone(),
        options,
        progress,
    );
    let evicted = async {
        let Some(timeout) = options.timeout else {
            return evicted.await;
        };
        match tokio::time::timeout_at(started + timeout, evicted).await {
            Ok(evicted) => evicted,
            Err(_) => Err(Error::DrainTimeout {
                node: node.to_owned(),
                timeout,
                progress: progress.borrow().clone(),
            }),
        }
    };
    let completed = wait_for(
        client,
        node,
        Until::Completed {
            deadline: started + options.wait_completed_timeout,
        },
        Watched {
            pods: completing,
            version,
            events: None,
        },
        options,
        progress,
    );
    tokio::try_join!(evicted, completed)?;
    info!(node, "drained");
    Ok(())
}

/// Evicts the pods of `evict`, then waits until they, and those of `terminating`, are gone.
async fn evict_and_wait_gone(
    client: &Client,
    node: &str,
    evict: Vec<PodRef>,
    terminating: Vec<PodRef>,
    version: Option<String>,
    options: &DrainOptions,
    progress: &watch::Sender<Progress>,
) -> Result<()> {
    // Owned pods in the stream: futures borrowing from a closure argument trip the compiler's
    // higher-ranked `Send` check when this future is boxed by `async_trait`.
    let evictions = stream::iter(evict.clone())
        .map(|pod| async move { evict_pod(client, &pod, options, progress).await })
        .buffer_unordered(options.concurrency.max(1))
        .try_collect::<()>();
    // The watch for the pods' deletion starts while they are being evicted: it reports every
    // deletion after the list anyway, and is then ready when the evictions are done.
    let api = Api::<Pod>::all(client.clone());
    let (evicted, events) = tokio::join!(evictions, watch_pods(&api, node, version.as_deref()));
    evicted?;
    let mut pods = terminating;
    pods.extend(evict);
    let watched = Watched {
        pods,
        version,
        events,
    };
    wait_for(client, node, Until::Gone, watched, options, progress).await
}

fn eviction(pod: &PodRef, options: &DrainOptions) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            // Evict exactly the pod that was listed, never a namesake created since.
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                ..Preconditions::default()
            }),
            grace_period_seconds: options
                .grace_period
                .map(|g| i64::try_from(g.as_secs()).unwrap_or(i64::MAX)),
            ..DeleteOptions::default()
        }),
    }
}

/// Asks for the pod's eviction until the API server accepts it or the pod is gone.
async fn evict_pod(
    client: &Client,
    pod: &PodRef,
    options: &DrainOptions,
    progress: &watch::Sender<Progress>,
) -> Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
    let body = eviction(pod, options);
    let mut pause = options.retry_initial;
    let mut refusals = 0u32;
    loop {
        let answer = api
            .create_subresource::<Eviction, Status>(
                "eviction",
                &pod.name,
                &PostParams::default(),
                &body,
            )
            .await;
        if !matches!(&answer, Err(kube::Error::Api(status)) if status.code == 429) {
            progress.send_if_modified(|p| p.refused.remove(&pod.to_string()).is_some());
        }
        match answer {
            Ok(_) => {
                info!(pod = %pod, "evicted");
                return Ok(());
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                debug!(pod = %pod, "already gone");
                return Ok(());
            }
            // The UID precondition failed (the pod was replaced: ours is gone), or the API
            // server lost a race updating the budget; only the pod's current UID tells which.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let current = api
                    .get_opt(&pod.name)
                    .await
                    .map_err(|e| Error::api("get", "pods", pod.to_string(), e))?;
                if current.is_none_or(|p| p.uid().as_deref() != Some(pod.uid.as_str())) {
                    debug!(pod = %pod, "replaced by a new pod of the same name");
                    return Ok(());
                }
            }
            // A PodDisruptionBudget does not allow the disruption now; it may later.
            Err(kube::Error::Api(status)) if status.code == 429 => {
                refusals = refusals.saturating_add(1);
                let reason = refusal_reason(&status);
                progress.send_modify(|p| {
                    p.refused.insert(pod.to_string(), reason.clone());
                });
                if refusals == 1 {
                    warn!(pod = %pod, reason, "eviction refused; retrying");
                } else {
                    debug!(pod = %pod, refusals, reason, "eviction refused");
                }
            }
            Err(e) => return Err(Error::api("create", "pods/eviction", pod.to_string(), e)),
        }
        tokio::time::sleep(pause).await;
        pause = pause.saturating_mul(2).min(options.retry_max);
    }
}

/// The API server's message, and its causes: which budget refused, and how many pods it needs.
fn refusal_reason(status: &Status) -> String {
    let mut reason = status.message.clone();
    for cause in status.details.iter().flat_map(|d| &d.causes) {
        if !cause.message.is_empty() {
            reason.push_str(": ");
            reason.push_str(&cause.message);
        }
    }
    reason
}

type PodEvents = BoxStream<'static, kube::Result<WatchEvent<Pod>>>;

/// A watch of `node`'s pods from `version` on, if it can be started. It sees every change
/// since, also one made before the watch started.
async fn watch_pods(api: &Api<Pod>, node: &str, version: Option<&str>) -> Option<PodEvents> {
    let params = WatchParams::default().fields(&on_node(node));
    match api.watch(&params, version?).await {
        Ok(events) => Some(events.boxed()),
        Err(e) => {
            debug!(node, error = %e, "cannot watch the node's pods; listing them instead");
            None
        }
    }
}

/// What a wait for pods starts from: the pods, the version of the list they came from, and a
/// watch from that version (which sees every change since, also one made before the watch
/// started), if one was started already.
struct Watched {
    pods: Vec<PodRef>,
    version: Option<String>,
    events: Option<PodEvents>,
}

/// What a wait for pods waits for.
#[derive(Clone, Copy, Debug)]
enum Until {
    /// Every pod is gone (evicted or terminating ones); published as `terminating`.
    Gone,
    /// Every pod has completed (phase Succeeded or Failed) or is gone (wait-completed ones);
    /// published as `waiting`. Still running at `deadline`: [`Error::WaitCompletedTimeout`].
    Completed { deadline: Instant },
}

impl Until {
    /// Whether this instance of the pod no longer holds the drain back.
    fn done(self, pod: &Pod) -> bool {
        matches!(self, Until::Completed { .. }) && is_finished(pod)
    }

    fn publish(self, progress: &watch::Sender<Progress>, node: &str, pods: Vec<String>) {
        progress.send_if_modified(|p| {
            let field = match self {
                Until::Gone => &mut p.terminating,
                Until::Completed { .. } => &mut p.waiting,
            };
            if *field == pods {
                return false;
            }
            if matches!(self, Until::Completed { .. }) && !pods.is_empty() {
                info!(node, "{}", waiting_for(&pods));
            }
            *field = pods;
            true
        });
    }
}

/// Waits until none of the pods holds the drain back any more (see [`Until`]). A pod of the
/// same name but another UID (recreated by its StatefulSet) is a different pod and does not
/// count.
///
/// The watch reports each change as it happens. The node's pods are listed again every
/// `poll_interval`, and the watch restarted from that list, in case the watch broke.
async fn wait_for(
    client: &Client,
    node: &str,
    until: Until,
    watched: Watched,
    options: &DrainOptions,
    progress: &watch::Sender<Progress>,
) -> Result<()> {
    let api = Api::<Pod>::all(client.clone());
    let Watched {
        pods,
        mut version,
        mut events,
    } = watched;
    let mut remaining: HashSet<PodRef> = pods.into_iter().collect();
    loop {
        let mut left: Vec<String> = remaining.iter().map(PodRef::to_string).collect();
        left.sort();
        until.publish(progress, node, left.clone());
        if remaining.is_empty() {
            return Ok(());
        }
        let mut next = Instant::now() + options.poll_interval;
        if let Until::Completed { deadline } = until {
            if Instant::now() >= deadline {
                return Err(Error::WaitCompletedTimeout {
                    node: node.to_owned(),
                    timeout: options.wait_completed_timeout,
                    pods: left,
                });
            }
            next = next.min(deadline);
        }
        debug!(
            node,
            remaining = remaining.len(),
            ?until,
            "waiting for pods"
        );
        let watched = async {
            let events = match events.take() {
                Some(events) => Some(events),
                None => watch_pods(&api, node, version.as_deref()).await,
            };
            until_done(events, until, &mut remaining).await;
        };
        if tokio::time::timeout_at(next, watched).await.is_ok() {
            continue;
        }
        let (present, listed) = pods_on(client, node, options.pod_selector.as_deref()).await?;
        let present: HashSet<PodRef> = present
            .iter()
            .filter(|pod| {
                let pod_ref = pod_ref(pod);
                !(remaining.contains(&pod_ref)
                    && (until.done(pod) || overdue(pod, options.skip_wait_for_delete)))
            })
            .map(pod_ref)
            .collect();
        remaining.retain(|pod| present.contains(pod));
        version = listed;
    }
}

/// Removes pods from `remaining` as `events` reports them deleted (or, waiting for them to
/// complete, finished); returns when none is left. Without a watch, or once it breaks, it
/// never returns: the caller's next list takes over.
async fn until_done(events: Option<PodEvents>, until: Until, remaining: &mut HashSet<PodRef>) {
    let Some(mut events) = events else {
        return std::future::pending().await;
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(WatchEvent::Deleted(pod)) => {
                remaining.remove(&pod_ref(&pod));
            }
            Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => {
                if until.done(&pod) {
                    remaining.remove(&pod_ref(&pod));
                }
            }
            Ok(WatchEvent::Bookmark(_)) => {}
            Ok(WatchEvent::Error(e)) => {
                debug!(error = %e, "the watch of the node's pods ended");
                break;
            }
            Err(e) => {
                debug!(error = %e, "the watch of the node's pods broke");
                break;
            }
        }
        if remaining.is_empty() {
            return;
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wording an operator reads in the log and in a failed drain's cause.
    #[test]
    fn progress_says_what_the_drain_waits_for() {
        assert_eq!(Progress::default().to_string(), "waiting for nothing");
        let waiting = Progress {
            waiting: vec!["ci/job-x".into()],
            ..Progress::default()
        };
        assert_eq!(
            waiting.to_string(),
            "waiting for 1 pod to complete: ci/job-x"
        );
        let all = Progress {
            refused: BTreeMap::from([("web/web-0".into(), "budget web needs 2".into())]),
            terminating: vec!["db/db-0".into(), "db/db-1".into()],
            waiting: vec!["ci/job-x".into(), "ci/job-y".into()],
        };
        assert_eq!(
            all.to_string(),
            "eviction refused for 1 pod: web/web-0 (budget web needs 2); waiting for 2 pods to \
             terminate: db/db-0, db/db-1; waiting for 2 pods to complete: ci/job-x, ci/job-y"
        );
    }

    #[test]
    fn timeouts_name_the_pods_and_the_bound() {
        let timed_out = Error::WaitCompletedTimeout {
            node: "gpu-1".into(),
            timeout: Duration::from_secs(3600),
            pods: vec!["ci/job-x".into()],
        };
        assert_eq!(
            timed_out.to_string(),
            "node gpu-1: the wait-completed timeout of 1h passed, still waiting for 1 pod to \
             complete: ci/job-x; not evicting it"
        );
        let held = Error::DrainTimeout {
            node: "gpu-1".into(),
            timeout: Duration::from_secs(630),
            progress: Progress {
                terminating: vec!["db/db-0".into()],
                ..Progress::default()
            },
        };
        assert_eq!(
            held.to_string(),
            "node gpu-1 did not drain within the drain timeout of 10m 30s: waiting for 1 pod \
             to terminate: db/db-0"
        );
    }
}
