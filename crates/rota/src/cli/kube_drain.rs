//! The flags of a drain through the Kubernetes API, which `rota agent --node-actions kube` and
//! `rota fleetlock --store kube` share.

use std::time::Duration;

use clap::Args;
use rota_kube_actions::Selector;

use super::parse::{
    NodeLabelArg, duration, node_labels, positive_duration, taint_key, wait_completed_selector,
};

/// How a node is cordoned, drained and labelled through the Kubernetes API: its own by
/// `rota agent --node-actions kube`, a FleetLock host's by `rota fleetlock --store kube`.
#[derive(Debug, Clone, Args)]
pub struct KubeDrainArgs {
    /// Evictions in progress at once (default 5).
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100))]
    pub drain_concurrency: Option<usize>,
    /// Also evict pods no controller manages (nothing recreates them).
    #[arg(long)]
    pub drain_force: bool,
    /// Also evict pods with emptyDir volumes (their data is lost).
    #[arg(long)]
    pub drain_delete_emptydir_data: bool,
    /// Override the pods' termination grace period.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub drain_grace_period: Option<Duration>,
    /// A pod still terminating this long after its grace period ended is
    /// not waited for (kubectl drain's --skip-wait-for-delete-timeout; default: wait for every
    /// pod).
    ///
    /// The grace period counts from the pod's deletionTimestamp. A pod held by a finalizer, or by a
    /// kubelet that cannot stop it, then no longer keeps the node from the reboot that may free it;
    /// without it such a drain times out and backs off, again and again. The agent logs "a pod is
    /// still terminating long after its grace period; not waiting for it".
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub drain_skip_wait_for_delete_timeout: Option<Duration>,
    /// Only the node's pods matching this label selector are evicted and
    /// waited for (kured's --drain-pod-selector; default: every pod).
    ///
    /// Such as `app=web` or `tier in (web,batch)`. The others stay on the node through its
    /// maintenance. DaemonSet, mirror and finished pods are left alone as always; a matching pod
    /// without a controller, or with an emptyDir volume, still needs --drain-force or
    /// --drain-delete-emptydir-data. A malformed selector is refused at start.
    #[arg(long, value_name = "SELECTOR")]
    pub drain_pod_selector: Option<String>,
    /// The node's pods matching this label selector are wait-completed
    /// (Cluster API's WaitCompleted): not evicted; the drain waits until they have completed
    /// (default: none).
    ///
    /// Such as `app=ci-runner`, or `cluster.x-k8s.io/drain=wait-completed` for pods labelled as
    /// Cluster API has them. A pod annotated rota.dev/drain=wait-completed is wait-completed
    /// without it. Completed: its phase is Succeeded or Failed, or it is gone; the cordon keeps new
    /// ones off the node. They need neither --drain-force nor --drain-delete-emptydir-data, as they
    /// are not evicted; DaemonSet, mirror and finished pods are left alone as always, and with
    /// --drain-pod-selector only the pods it selects are the drain's. A malformed selector is
    /// refused at start.
    #[arg(long, value_name = "SELECTOR", value_parser = wait_completed_selector)]
    pub drain_wait_completed_selector: Option<Selector>,
    /// How long the drain waits for its wait-completed pods to complete
    /// (default 1h).
    ///
    /// It counts from the drain's start (after --drain-delay), apart from --drain-timeout, which
    /// bounds the evictions and the wait for the evicted pods to go. Once it passes with a
    /// wait-completed pod still running, the drain fails with the pods it waited for ("waiting for
    /// 1 pod to complete: ci/job-x") and does not evict them: rota uncordons the node, gives the
    /// slot back and backs off, as for any failed drain. The agent logs each change of what it
    /// waits for, in the same words.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub drain_wait_completed_timeout: Option<Duration>,
    /// A label set on the Node in rota's cordon, such as
    /// rota.dev/maintenance=true (kured's --pre-reboot-node-labels).
    ///
    /// Repeatable, or several separated by commas (a=b,c=d). It goes in the same write as the
    /// cordon, so that other systems (load balancers, monitoring) can tell the node is out. Keys
    /// and values are checked against Kubernetes' label rules at start.
    #[arg(long = "cordon-label", value_name = "KEY=VALUE", value_parser = node_labels)]
    pub cordon_labels: Vec<NodeLabelArg>,
    /// A label set on the Node in rota's uncordon (kured's
    /// --post-reboot-node-labels).
    ///
    /// Repeatable, or several separated by commas (a=b,c=d). It goes in the same write as the
    /// uncordon, which also removes the --cordon-label keys not given here. A node that stays
    /// cordoned (cordoned before rota touched it, or failed closed) keeps its cordon labels.
    #[arg(long = "uncordon-label", value_name = "KEY=VALUE", value_parser = node_labels)]
    pub uncordon_labels: Vec<NodeLabelArg>,
    /// While the node waits for maintenance (or is in its window) it
    /// carries the taint KEY:PreferNoSchedule (kured's --prefer-no-schedule-taint).
    ///
    /// From the moment the node has work (queued) until it is idle again, so that new pods, and the
    /// pods evicted from the nodes out now, prefer nodes that will not be drained soon and are not
    /// moved twice in one rollout. The Node's other taints are kept (the write is a
    /// compare-and-swap on the Node; an idle agent reads its Node once at start to clear a taint
    /// left behind). A mark that cannot be written is tried again on the agent's next pass.
    #[arg(long, value_name = "KEY", value_parser = taint_key)]
    pub prefer_no_schedule_taint: Option<String>,
    /// Rota records its reboots on the Node in annotations for other
    /// tools to read (kured's --annotate-nodes).
    ///
    /// rota.dev/reboot-in-progress (replaces kured's weave.works/kured-reboot-in-progress) is
    /// set when the reboot starts and removed once the node is back in service: verified
    /// healthy at the end of its window, or uncordoned by rota after an operator's `rota
    /// unlock`. rota.dev/last-reboot-started (replaces kured's
    /// weave.works/kured-most-recent-reboot-needed) is set with it and stays;
    /// rota.dev/last-reboot-finished (no kured counterpart) is set when the node is verified
    /// back after the reboot and stays. Each value is an RFC 3339 time in UTC, to the second;
    /// the reboot's start is the time rota recorded for it in its store.
    ///
    /// The reboot's start costs one write of the Node, right before the reboot and after the
    /// slot is proven; if it fails, the reboot waits and the agent tries again (the
    /// --reboot-timeout still counts). The end rides on the uncordon's write, or is one write
    /// of its own for a node that rota did not cordon (one cordoned beforehand, or a window
    /// that needed no drain). Windows without a reboot write nothing more.
    #[arg(long)]
    pub annotate_nodes: bool,
    /// Rota sets the node lifecycle conditions of KEP-5683 on the
    /// Node through its window (on by default; --node-conditions=false turns them off).
    ///
    /// MaintenancePlanned while the node is queued, until it is idle again; DrainInProgress
    /// while rota drains it, then Drained; MaintenanceInProgress from the cordon (or the
    /// drain) through the maintenance and the reboot until the node is back in service. Each
    /// is then set False again, with a reason (rota's reasons start with Rota), and stays
    /// listed; rota never clears a condition that another writer set. They are written
    /// whether or not the cluster's NodeLifecycleConditions feature gate is on, with a patch
    /// of the Node's status (RBAC: patch on nodes/status). A write that fails is logged and
    /// changes nothing else: the conditions are a report for other tools, like the Events.
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub node_conditions: bool,
    /// Also wait, before the slot goes back, until every
    /// PodDisruptionBudget in the cluster is satisfied again.
    ///
    /// Satisfied: currentHealthy at least desiredHealthy, with a current status.
    #[arg(long)]
    pub health_pdbs: bool,
}
