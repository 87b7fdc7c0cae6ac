//! Drain: cordon, evict through the Eviction API, wait until the evicted pods are gone (a
//! watch reports each deletion as it happens; a slow re-list is the safety net).
//!
//! All state lives in the API server (the cordon, the record of what is evicted, the
//! evictions, the pods' deletion), none in this process, so [`drain`] is idempotent and
//! cancel-safe: dropping its future at any await (the caller's timeout) leaves nothing to clean
//! up but the cordon, and calling it again carries on where the cluster is. It spawns no task that could outlive the future.

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
use tracing::{debug, info, warn};

use crate::error::{Error, Refusal, RefusalReason, Result};
use crate::health_gate::{self, Leaving};
use crate::node;
use crate::node_labels::NodeLabels;

/// Marks a static pod's mirror in the API server; the kubelet owns it, eviction cannot move it.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

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
        }
    }
}

/// What a drain in progress is waiting for: what an operator needs to know when it does not
/// finish. See [`drain_with_progress`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Pods (`namespace/name`) whose eviction is refused for now, with the API server's reason
    /// (a PodDisruptionBudget's message).
    pub refused: BTreeMap<String, String>,
    /// Pods (`namespace/name`) evicted or already terminating that still exist.
    pub terminating: Vec<String>,
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

/// What the drain does with one pod.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Left on the node: DaemonSet and mirror pods, finished pods.
    Leave,
    /// Already being deleted: only wait until it is gone.
    Wait,
    Evict,
}

/// The plan for one pod, or every reason it may not be evicted under `options`.
fn plan(pod: &Pod, options: &DrainOptions) -> std::result::Result<Plan, Vec<RefusalReason>> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Ok(Plan::Leave);
    }
    if pod.annotations().contains_key(MIRROR_ANNOTATION) {
        return Ok(Plan::Leave);
    }
    let controller = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    if controller.is_some_and(|c| c.kind == "DaemonSet") {
        return Ok(Plan::Leave);
    }
    if overdue(pod, options.skip_wait_for_delete) {
        return Ok(Plan::Leave);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(Plan::Wait);
    }
    let mut refusals = Vec::new();
    if controller.is_none() && !options.force {
        refusals.push(RefusalReason::Unmanaged);
    }
    let empty_dir = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.empty_dir.is_some()));
    if empty_dir && !options.delete_emptydir_data {
        refusals.push(RefusalReason::EmptyDir);
    }
    if refusals.is_empty() {
        Ok(Plan::Evict)
    } else {
        Err(refusals)
    }
}

/// Whether `pod` is still there more than `skip` after its deletion deadline.
fn overdue(pod: &Pod, skip: Option<Duration>) -> bool {
    let (Some(deadline), Some(skip)) = (&pod.metadata.deletion_timestamp, skip) else {
        return false;
    };
    let late = jiff::Timestamp::now().duration_since(deadline.0);
    let overdue = late.is_positive() && late.unsigned_abs() > skip;
    if overdue {
        warn!(
            pod = %pod_ref(pod),
            late = ?late.unsigned_abs(),
            "a pod is still terminating long after its grace period; not waiting for it"
        );
    }
    overdue
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
/// pod is gone. Returns at once with [`Error::Refused`], naming every offending pod, if a pod
/// may not be evicted under `options`; the node then stays cordoned.
///
/// A PodDisruptionBudget that never allows the eviction makes the drain wait forever: bound it
/// with `tokio::time::timeout`.
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
    progress.send_replace(Progress::default());
    let cordoned = node::cordon(client, node, &options.labels).await?;
    let mut evict = Vec::new();
    let mut wait = Vec::new();
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
    // evicted them, and the health gate waits for their workloads all the same.
    health_gate::record(client, node, &cordoned, &leaving).await?;
    info!(
        node,
        evicting = evict.len(),
        terminating = wait.len(),
        "draining"
    );
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
    wait.extend(evict);
    let waiting = Waiting {
        pods: wait,
        version,
        events,
    };
    wait_gone(client, node, waiting, options, progress).await?;
    info!(node, "drained");
    Ok(())
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

/// What the wait for evicted pods to go starts from: the pods, the version of the list they
/// came from, and a watch from that version (which sees every deletion since, also one made
/// before the watch started), if it could be started.
struct Waiting {
    pods: Vec<PodRef>,
    version: Option<String>,
    events: Option<PodEvents>,
}

/// Waits until none of the pods is on the node any more. A pod of the same name but another
/// UID (recreated by its StatefulSet) is a different pod and does not count.
///
/// The watch reports each deletion as it happens. The node's pods are listed again every
/// `poll_interval`, and the watch restarted from that list, in case the watch broke.
async fn wait_gone(
    client: &Client,
    node: &str,
    waiting: Waiting,
    options: &DrainOptions,
    progress: &watch::Sender<Progress>,
) -> Result<()> {
    let api = Api::<Pod>::all(client.clone());
    let Waiting {
        pods,
        mut version,
        mut events,
    } = waiting;
    let mut remaining: HashSet<PodRef> = pods.into_iter().collect();
    loop {
        let mut terminating: Vec<String> = remaining.iter().map(PodRef::to_string).collect();
        terminating.sort();
        progress.send_if_modified(|p| {
            let changed = p.terminating != terminating;
            p.terminating = terminating;
            changed
        });
        if remaining.is_empty() {
            return Ok(());
        }
        debug!(
            node,
            remaining = remaining.len(),
            "waiting for evicted pods to go"
        );
        let watched = async {
            let events = match events.take() {
                Some(events) => Some(events),
                None => watch_pods(&api, node, version.as_deref()).await,
            };
            until_deleted(events, &mut remaining).await;
        };
        if tokio::time::timeout(options.poll_interval, watched)
            .await
            .is_ok()
        {
            continue;
        }
        let (present, listed) = pods_on(client, node, options.pod_selector.as_deref()).await?;
        let present: HashSet<PodRef> = present
            .iter()
            .filter(|pod| {
                !(remaining.contains(&pod_ref(pod)) && overdue(pod, options.skip_wait_for_delete))
            })
            .map(pod_ref)
            .collect();
        remaining.retain(|pod| present.contains(pod));
        version = listed;
    }
}

/// Removes pods from `remaining` as `events` reports them deleted; returns when none is left.
/// Without a watch, or once it breaks, it never returns: the caller's next list takes over.
async fn until_deleted(events: Option<PodEvents>, remaining: &mut HashSet<PodRef>) {
    let Some(mut events) = events else {
        return std::future::pending().await;
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(WatchEvent::Deleted(pod)) => {
                remaining.remove(&pod_ref(&pod));
                if remaining.is_empty() {
                    return;
                }
            }
            Ok(WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Bookmark(_)) => {}
            Ok(WatchEvent::Error(e)) => {
                debug!(error = %e, "the watch of the node's pods ended");
                break;
            }
            Err(e) => {
                debug!(error = %e, "the watch of the node's pods broke");
                break;
            }
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PodSpec, PodStatus, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use std::collections::BTreeMap;

    fn owned_by(kind: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.owner_references = Some(vec![OwnerReference {
            kind: kind.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        pod
    }

    fn with_empty_dir(mut pod: Pod) -> Pod {
        pod.spec = Some(PodSpec {
            volumes: Some(vec![Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        });
        pod
    }

    fn flags(force: bool, delete_emptydir_data: bool) -> DrainOptions {
        DrainOptions {
            force,
            delete_emptydir_data,
            ..DrainOptions::default()
        }
    }

    #[test]
    fn plans_follow_kubectl_drain() {
        let safe = DrainOptions::default();
        assert_eq!(plan(&owned_by("ReplicaSet"), &safe), Ok(Plan::Evict));
        assert_eq!(plan(&owned_by("DaemonSet"), &safe), Ok(Plan::Leave));
        assert_eq!(
            plan(&with_empty_dir(owned_by("DaemonSet")), &safe),
            Ok(Plan::Leave)
        );

        let mut mirror = Pod::default();
        mirror.metadata.annotations =
            Some(BTreeMap::from([(MIRROR_ANNOTATION.into(), "x".into())]));
        assert_eq!(plan(&mirror, &safe), Ok(Plan::Leave));

        let finished = Pod {
            status: Some(PodStatus {
                phase: Some("Succeeded".into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert_eq!(plan(&finished, &safe), Ok(Plan::Leave));

        let mut terminating = Pod::default();
        terminating.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert_eq!(plan(&terminating, &safe), Ok(Plan::Wait));
    }

    #[test]
    fn a_pod_terminating_long_past_its_deadline_is_left_only_when_asked() {
        let terminating_since = |seconds_ago: i64| {
            let mut pod = owned_by("ReplicaSet");
            let deadline = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds_ago);
            pod.metadata.deletion_timestamp = Some(Time(deadline));
            pod
        };
        let skipping = DrainOptions {
            skip_wait_for_delete: Some(Duration::from_secs(30)),
            ..DrainOptions::default()
        };
        assert_eq!(plan(&terminating_since(60), &skipping), Ok(Plan::Leave));
        assert_eq!(plan(&terminating_since(10), &skipping), Ok(Plan::Wait));
        // Its grace period still running: the deadline is ahead.
        assert_eq!(plan(&terminating_since(-60), &skipping), Ok(Plan::Wait));
        assert_eq!(
            plan(&terminating_since(3600), &DrainOptions::default()),
            Ok(Plan::Wait)
        );
    }

    #[test]
    fn unsafe_pods_need_their_flag() {
        let bare = Pod::default();
        assert_eq!(
            plan(&bare, &flags(false, true)),
            Err(vec![RefusalReason::Unmanaged])
        );
        assert_eq!(plan(&bare, &flags(true, false)), Ok(Plan::Evict));

        let scratch = with_empty_dir(owned_by("StatefulSet"));
        assert_eq!(
            plan(&scratch, &flags(true, false)),
            Err(vec![RefusalReason::EmptyDir])
        );
        assert_eq!(plan(&scratch, &flags(false, true)), Ok(Plan::Evict));

        let bare_scratch = with_empty_dir(Pod::default());
        assert_eq!(
            plan(&bare_scratch, &DrainOptions::default()),
            Err(vec![RefusalReason::Unmanaged, RefusalReason::EmptyDir])
        );
        assert_eq!(
            plan(&bare_scratch, &flags(false, true)),
            Err(vec![RefusalReason::Unmanaged])
        );
        assert_eq!(plan(&bare_scratch, &flags(true, true)), Ok(Plan::Evict));
    }
}
