//! Which of the node's pods the drain evicts, which it waits for, and which it leaves alone: the
//! rules of `kubectl drain` (DaemonSet, mirror and finished pods stay; pods without a
//! controller or with emptyDir data are refused unless allowed), and Cluster API's
//! `WaitCompleted`: a pod marked wait-completed is not evicted; the drain waits until it
//! completes.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tracing::warn;

use crate::drain::DrainOptions;
use crate::error::RefusalReason;

/// Marks a static pod's mirror in the API server; the kubelet owns it, eviction cannot move it.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A pod's annotation that tells the drain how to treat it; its one value is
/// [`WAIT_COMPLETED`] (Cluster API's `cluster.x-k8s.io/drain` label, as an annotation).
pub const DRAIN_ANNOTATION: &str = "rota.dev/drain";

/// [`DRAIN_ANNOTATION`]'s value for a pod that is not evicted: the drain waits until it
/// completes (Cluster API's `WaitCompleted`).
pub const WAIT_COMPLETED: &str = "wait-completed";

/// What the drain does with one pod.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Left on the node: DaemonSet and mirror pods, finished pods.
    Leave,
    /// Already being deleted: only wait until it is gone.
    Wait,
    /// Wait-completed: not evicted; wait until it has completed (or is gone).
    WaitCompleted,
    Evict,
}

/// Whether the pod has run to its end (Succeeded or Failed): nothing of it runs any more.
pub(crate) fn is_finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether the drain is to wait for the pod to complete rather than evict it: it carries
/// [`DRAIN_ANNOTATION`]` = `[`WAIT_COMPLETED`], or matches the options' wait-completed
/// selector. `Err` for the annotation with any other value: a misspelt mark must not get the
/// pod evicted.
fn wait_completed(pod: &Pod, options: &DrainOptions) -> Result<bool, RefusalReason> {
    match pod.annotations().get(DRAIN_ANNOTATION).map(String::as_str) {
        Some(WAIT_COMPLETED) => return Ok(true),
        Some(other) => return Err(RefusalReason::DrainAnnotation(other.to_owned())),
        None => {}
    }
    Ok(options
        .wait_completed_selector
        .as_ref()
        .is_some_and(|selector| selector.matches(pod.labels())))
}

/// The plan for one pod, or every reason it may not be evicted under `options`.
pub(crate) fn plan(pod: &Pod, options: &DrainOptions) -> Result<Plan, Vec<RefusalReason>> {
    if is_finished(pod) {
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
    match wait_completed(pod, options) {
        // Not evicted: neither its lack of a controller nor its emptyDir data is at stake.
        Ok(true) => return Ok(Plan::WaitCompleted),
        Ok(false) => {}
        Err(reason) => refusals.push(reason),
    }
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
pub(crate) fn overdue(pod: &Pod, skip: Option<Duration>) -> bool {
    let (Some(deadline), Some(skip)) = (&pod.metadata.deletion_timestamp, skip) else {
        return false;
    };
    let late = jiff::Timestamp::now().duration_since(deadline.0);
    let overdue = late.is_positive() && late.unsigned_abs() > skip;
    if overdue {
        warn!(
            pod = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
            late = ?late.unsigned_abs(),
            "a pod is still terminating long after its grace period; not waiting for it"
        );
    }
    overdue
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Selector;
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

    fn annotated(mut pod: Pod, key: &str, value: &str) -> Pod {
        pod.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        pod
    }

    fn labelled(mut pod: Pod, key: &str, value: &str) -> Pod {
        pod.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        pod
    }

    fn in_phase(mut pod: Pod, phase: &str) -> Pod {
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        });
        pod
    }

    fn terminating(mut pod: Pod) -> Pod {
        pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        pod
    }

    fn flags(force: bool, delete_emptydir_data: bool) -> DrainOptions {
        DrainOptions {
            force,
            delete_emptydir_data,
            ..DrainOptions::default()
        }
    }

    fn waiting_for(selector: &str) -> DrainOptions {
        DrainOptions {
            wait_completed_selector: Some(Selector::parse(selector).expect("a selector")),
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
        let mirror = annotated(Pod::default(), MIRROR_ANNOTATION, "x");
        assert_eq!(plan(&mirror, &safe), Ok(Plan::Leave));
        assert_eq!(
            plan(&in_phase(Pod::default(), "Succeeded"), &safe),
            Ok(Plan::Leave)
        );
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

    /// The annotation, or the selector, makes a running pod one the drain waits for instead
    /// of evicting it; nothing else changes.
    #[test]
    fn wait_completed_pods_are_waited_for_not_evicted() {
        let safe = DrainOptions::default();
        let job = owned_by("Job");
        assert_eq!(plan(&job, &safe), Ok(Plan::Evict));
        let marked = annotated(job.clone(), DRAIN_ANNOTATION, WAIT_COMPLETED);
        assert_eq!(plan(&marked, &safe), Ok(Plan::WaitCompleted));

        let runner = labelled(job.clone(), "app", "ci-runner");
        assert_eq!(plan(&runner, &safe), Ok(Plan::Evict), "no selector");
        assert_eq!(
            plan(&runner, &waiting_for("app=ci-runner")),
            Ok(Plan::WaitCompleted)
        );
        assert_eq!(
            plan(&runner, &waiting_for("app in (build,test)")),
            Ok(Plan::Evict),
            "another selector"
        );
        // Cluster API's label, through the selector.
        let capi = labelled(job, "cluster.x-k8s.io/drain", WAIT_COMPLETED);
        assert_eq!(
            plan(&capi, &waiting_for("cluster.x-k8s.io/drain=wait-completed")),
            Ok(Plan::WaitCompleted)
        );
    }

    /// A pod that is not evicted needs no flag that allows its eviction: a bare CI runner with
    /// a scratch emptyDir is waited for under the safe defaults.
    #[test]
    fn a_wait_completed_pod_is_not_refused_for_what_eviction_would_cost() {
        let bare_scratch = annotated(
            with_empty_dir(Pod::default()),
            DRAIN_ANNOTATION,
            WAIT_COMPLETED,
        );
        assert_eq!(
            plan(&bare_scratch, &DrainOptions::default()),
            Ok(Plan::WaitCompleted)
        );
    }

    /// What has finished, is being deleted, or is the node's own (DaemonSet, mirror) keeps its
    /// plan: wait-completed adds nothing to wait for there.
    #[test]
    fn the_rules_before_wait_completed_still_come_first() {
        let options = waiting_for("app=ci-runner");
        let mark = |pod: Pod| {
            labelled(
                annotated(pod, DRAIN_ANNOTATION, WAIT_COMPLETED),
                "app",
                "ci-runner",
            )
        };
        for phase in ["Succeeded", "Failed"] {
            assert_eq!(
                plan(&mark(in_phase(owned_by("Job"), phase)), &options),
                Ok(Plan::Leave),
                "{phase}"
            );
        }
        assert_eq!(
            plan(&mark(in_phase(owned_by("Job"), "Running")), &options),
            Ok(Plan::WaitCompleted)
        );
        assert_eq!(
            plan(&mark(owned_by("DaemonSet")), &options),
            Ok(Plan::Leave)
        );
        assert_eq!(
            plan(
                &mark(annotated(Pod::default(), MIRROR_ANNOTATION, "x")),
                &options
            ),
            Ok(Plan::Leave)
        );
        assert_eq!(
            plan(&mark(terminating(owned_by("Job"))), &options),
            Ok(Plan::Wait)
        );
    }

    /// A misspelt mark refuses the drain, naming the value: evicting the pod would be what the
    /// mark was there to prevent.
    #[test]
    fn an_unknown_drain_annotation_is_refused_not_evicted() {
        let typo = annotated(owned_by("Job"), DRAIN_ANNOTATION, "wait-complete");
        assert_eq!(
            plan(&typo, &DrainOptions::default()),
            Err(vec![RefusalReason::DrainAnnotation("wait-complete".into())])
        );
        let bare_typo = annotated(Pod::default(), DRAIN_ANNOTATION, "skip");
        assert_eq!(
            plan(&bare_typo, &DrainOptions::default()),
            Err(vec![
                RefusalReason::DrainAnnotation("skip".into()),
                RefusalReason::Unmanaged
            ])
        );
        // Even when the selector matches: the annotation says something else.
        let matched = labelled(typo, "app", "ci-runner");
        assert_eq!(
            plan(&matched, &waiting_for("app=ci-runner")),
            Err(vec![RefusalReason::DrainAnnotation("wait-complete".into())])
        );
    }
}
