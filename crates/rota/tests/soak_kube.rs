//! The fault-injection soak in Kubernetes mode (issue 29; the SQL half is `soak.rs`): a fleet of
//! real `rota agent` processes (`--store kube --node-actions kube`, `rota_e2e::fleet`) on kwok
//! nodes, each asked for one reboot, while a seeded schedule SIGKILLs agents at random moments
//! and at aimed ones (restarted with `ROTA_CRASH_AT`, see `crates/rota/tests/crash_points.rs`),
//! SIGKILLs either of the fleet's two `rota scheduler` processes (the leader or its standby,
//! back a few seconds later), and SIGKILLs the kube-apiserver or etcd and starts it again on
//! the same ports and data (`testenv/restart`). The control plane is the soak's own (`testenv/up`, stopped at the end
//! also on failure): the shared one serves other tests, which a crashed API server would break.
//! Each run has its own namespace and nodes.
//!
//! The monitor is independent of the agents' records: a watch of the Nodes from this test logs
//! each change of `spec.unschedulable` with its resourceVersion, and every reboot command logs
//! the cluster's resourceVersion of the moment (a consistent list) before the machine goes
//! down. Revisions put both on one time line (see [`check_monitor`]); from it the run checks
//! that never more than K nodes were out at once, a node being out from its cordon to its
//! uncordon and in any case while it reboots. While the API server is down nothing can be
//! seen: a change the watch only learns from a relist is placed where it gives rota the benefit
//! of the doubt. From the store and the Nodes: every node idle, uncordoned, released, its slot
//! Lease free, one `finished` in its history and one reboot of its machine.
//!
//! A short run is part of the test suite; `scripts/soak --store kube` runs many and prints
//! `runs, kills, store crashes, scheduler kills, violations` with each violation's seed.

mod kube_common;
mod soak_common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::watcher;
use rota_core::{HistoryEvent, Process};
use rota_e2e::control_plane::{Component, OwnControlPlane};
use rota_e2e::fleet::{Fleet, FleetOptions, SCHEDULERS, TAKE_UP};
use rota_e2e::testenv::{self, SCOPE_LABEL, Scope};
use rota_store::{HistoryFilter, StoreExt};
use rota_store_kube::KubeStore;
use soak_common::{CONCURRENCY, NODES, Outcome, POINTS, Tally, all_done};
use tokio::task::JoinHandle;

use kube_common::{ROTA, args, pods_on};

/// How long one run may take before it counts as stuck.
const RUN_LIMIT: Duration = Duration::from_secs(240);
/// The signal `std::process::abort` raises: an agent that stopped at its crash point.
const SIGABRT: i32 = 6;

/// One line of the monitor log.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    /// The watch saw `node` become (un)schedulable at a revision in `(after, by]`: exactly at
    /// `by` (`after == by - 1`) for a watch event, somewhere in between for a change it only
    /// learnt from a relist.
    Watch {
        after: u64,
        by: u64,
        node: String,
        cordoned: bool,
    },
    /// `node`'s reboot command ran while the cluster was at revision `at` (`None`: the API
    /// server did not answer).
    Reboot { at: Option<u64>, node: String },
}

fn parse_line(line: &str) -> Result<Option<Seen>, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |w: &str| {
        w.parse::<u64>()
            .map_err(|_| format!("{w:?} is not a revision"))
    };
    match words.as_slice() {
        ["watch", after, by, node, change @ ("cordon" | "uncordon")] => Ok(Some(Seen::Watch {
            after: number(after)?,
            by: number(by)?,
            node: (*node).to_owned(),
            cordoned: *change == "cordon",
        })),
        ["reboot", "unknown", node] => Ok(Some(Seen::Reboot {
            at: None,
            node: (*node).to_owned(),
        })),
        ["reboot", at, node] => Ok(Some(Seen::Reboot {
            at: Some(number(at)?),
            node: (*node).to_owned(),
        })),
        ["gap", ..] => Ok(None),
        _ => Err("malformed".to_owned()),
    }
}

/// Checks the monitor log: never more than `limit` nodes out at any revision. A node is out
/// from a cordon the watch saw (at the latest revision it may have happened) to the uncordon
/// after it (at the earliest), and from each reboot to the first uncordon that may have
/// followed it: a rebooting node is out of service whatever the watch saw (docs/design.md §4,
/// "cordoned or rebooting"). Returns each node's number of reboot commands.
fn check_monitor(
    text: &str,
    limit: usize,
    violations: &mut Vec<String>,
) -> BTreeMap<String, usize> {
    let mut lines = Vec::new();
    for (number, line) in text.lines().enumerate() {
        match parse_line(line) {
            Ok(Some(seen)) => lines.push(seen),
            Ok(None) => {}
            Err(e) => violations.push(format!("monitor line {} ({line:?}): {e}", number + 1)),
        }
    }
    let mut reboots = BTreeMap::<String, usize>::new();
    // (revision, starts, node): at one revision, what ends goes first.
    let mut points: Vec<(u64, bool, String)> = Vec::new();
    let mut opened = BTreeMap::<&str, u64>::new();
    for seen in &lines {
        match seen {
            Seen::Watch {
                by, node, cordoned, ..
            } if *cordoned => {
                opened.entry(node).or_insert(*by);
            }
            Seen::Watch { after, node, .. } => {
                if let Some(start) = opened.remove(node.as_str()) {
                    points.push((start, true, node.clone()));
                    points.push((after + 1, false, node.clone()));
                }
            }
            Seen::Reboot { at, node } => {
                *reboots.entry(node.clone()).or_default() += 1;
                let Some(at) = *at else { continue };
                let end = lines.iter().find_map(|later| match later {
                    Seen::Watch {
                        after,
                        by,
                        node: n,
                        cordoned: false,
                    } if n == node && *by >= at => Some(after + 1),
                    _ => None,
                });
                points.push((at, true, node.clone()));
                let end = end.map_or(u64::MAX, |end| end.max(at + 1));
                points.push((end, false, node.clone()));
            }
        }
    }
    for (node, start) in opened {
        points.push((start, true, node.to_owned()));
    }
    points.sort();
    let mut out = BTreeMap::<String, usize>::new();
    for (revision, starts, node) in points {
        if starts {
            *out.entry(node).or_default() += 1;
            if out.len() > limit {
                let nodes: BTreeSet<&String> = out.keys().collect();
                violations.push(format!(
                    "{} nodes out of service at once at revision {revision}: {nodes:?}",
                    out.len()
                ));
            }
        } else if let Some(count) = out.get_mut(&node) {
            *count -= 1;
            if *count == 0 {
                out.remove(&node);
            }
        }
    }
    reboots
}

/// Appends one line to the monitor log (one `write` on an `O_APPEND` file, so lines from the
/// watch and from the reboot commands never interleave).
fn append(monitor: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(monitor)
        .expect("open the monitor log");
    file.write_all(format!("{line}\n").as_bytes())
        .expect("write the monitor log");
}

fn revision(node: &Node) -> u64 {
    node.resource_version()
        .and_then(|v| v.parse().ok())
        .expect("a Node's resourceVersion is an etcd revision")
}

fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Watches the run's Nodes and logs each change of their `spec.unschedulable` to the monitor.
/// A watch event is exact; across an outage the watcher relists, and a change seen only in
/// the new list happened somewhere after the last version seen before it.
fn watch_nodes(scope: &Scope, monitor: PathBuf) -> JoinHandle<()> {
    let nodes: Api<Node> = Api::all(scope.client());
    let config = watcher::Config::default().labels(&format!("{SCOPE_LABEL}={}", scope.id()));
    tokio::spawn(async move {
        // Per node: cordoned, and the revision of the last version seen.
        let mut known = BTreeMap::<String, (bool, u64)>::new();
        let mut listing = BTreeMap::<String, (bool, u64)>::new();
        let mut stream = watcher(nodes, config).boxed();
        // Whether the last event was an error: an outage is logged once, not at every retry.
        let mut blind = false;
        while let Some(event) = stream.next().await {
            if event.is_ok() {
                blind = false;
            }
            match event {
                Err(e) => {
                    if !blind {
                        let error = e.to_string().replace('\n', " ");
                        append(&monitor, &format!("gap {error}"));
                    }
                    blind = true;
                    // The watcher tries again on the next poll, at once: not in a busy loop.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(watcher::Event::Init) => listing.clear(),
                Ok(watcher::Event::InitApply(node)) => {
                    listing.insert(node.name_any(), (cordoned(&node), revision(&node)));
                }
                Ok(watcher::Event::InitDone) => {
                    for (name, &(now, by)) in &listing {
                        let (before, after) = known.get(name).copied().unwrap_or((false, 0));
                        if now != before {
                            let change = if now { "cordon" } else { "uncordon" };
                            append(&monitor, &format!("watch {after} {by} {name} {change}"));
                        }
                    }
                    known = std::mem::take(&mut listing);
                }
                Ok(watcher::Event::Apply(node)) => {
                    let (now, by) = (cordoned(&node), revision(&node));
                    let before = known.get(&node.name_any()).is_some_and(|k| k.0);
                    if now != before {
                        let change = if now { "cordon" } else { "uncordon" };
                        let name = node.name_any();
                        append(&monitor, &format!("watch {} {by} {name} {change}", by - 1));
                    }
                    known.insert(node.name_any(), (now, by));
                }
                Ok(watcher::Event::Delete(node)) => {
                    known.remove(&node.name_any());
                }
            }
        }
    })
}

/// The reboot hook of every agent: logs the node and the cluster's revision of the moment (a
/// list's resourceVersion, read from etcd's current revision), or `unknown` when the API server
/// does not answer.
fn reboot_hook(kubectl: &Path, kubeconfig: &Path, monitor: &Path) -> String {
    format!(
        "rv=$('{kubectl}' --kubeconfig '{kubeconfig}' --request-timeout=2s get --raw \
         '/api/v1/nodes?limit=1' 2>/dev/null | grep -o '\"resourceVersion\":\"[0-9]*\"' \
         | head -n 1 | tr -dc 0-9); echo \"reboot ${{rv:-unknown}} $ROTA_NODE\" >> '{monitor}'",
        kubectl = kubectl.display(),
        kubeconfig = kubeconfig.display(),
        monitor = monitor.display(),
    )
}

/// The run's namespace and nodes, with a pod on each for the drains to evict (bare pods:
/// `--drain-force`). The setup is not under test: a request that a connection closed by the
/// last run's restarts fails is tried again, in a fresh namespace with fresh nodes.
async fn set_up(env: &testenv::TestEnv, seed: u64) -> (Scope, Vec<String>) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let scope = env
            .scope(&format!("soak-{seed}"))
            .await
            .expect("the run's namespace");
        let made = async {
            let nodes = scope.create_ready_nodes(NODES).await?;
            pods_on(&scope, "soaked", &nodes).await?;
            anyhow::Ok(nodes)
        }
        .await;
        match made {
            Ok(nodes) => return (scope, nodes),
            Err(e) if attempt < 3 => {
                eprintln!("soak kube seed {seed}: setting up again after: {e:#}");
                let _ = scope.cleanup().await;
            }
            Err(e) => panic!("setting up the run: {e:#}"),
        }
    }
}

/// A crash of the control plane in progress (`testenv/restart` blocks until it is healthy).
type Restart = JoinHandle<anyhow::Result<u32>>;

async fn finish_restart(restart: Restart, violations: &mut Vec<String>) {
    match restart.await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => violations.push(format!("restarting the control plane: {e:#}")),
        Err(e) => violations.push(format!("restarting the control plane: {e}")),
    }
}

async fn soak_run(plane: &Arc<OwnControlPlane>, kubectl: &Path, seed: u64) -> Outcome {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut outcome = Outcome::default();
    let env = plane.env();
    let (scope, nodes) = set_up(env, seed).await;
    let dir = tempfile::tempdir().expect("the run's directory");
    let monitor = dir.path().join("monitor.log");
    let options = FleetOptions {
        binary: ROTA.into(),
        args: args(&[
            "--concurrency",
            &CONCURRENCY.to_string(),
            "--drain-force",
            "--health-interval",
            "200ms",
        ]),
        reboot_hook: Some(reboot_hook(kubectl, env.kubeconfig(), &monitor)),
    };
    let fleet = Fleet::new(env, &scope, &nodes, options, &BTreeMap::new())
        .await
        .expect("prepare the fleet");
    let watch = watch_nodes(&scope, monitor.clone());
    let store: KubeStore = fleet.store().await.expect("the fleet's store");
    fleet.start_all().expect("start the agents");
    for node in &nodes {
        fleet.request_reboot(node).expect("ask for a reboot");
    }

    // Per node: the boot on which its agent was armed with a crash point, if it still is.
    let mut armed: BTreeMap<&str, u32> = BTreeMap::new();
    let began = Instant::now();
    let mut next_fault = Instant::now() + Duration::from_millis(rng.u64(0..500));
    // Every run meets a crash of the control plane: the first fault is one.
    let mut crash_next = true;
    let mut restart: Option<Restart> = None;
    // A scheduler SIGKILLed, and when it comes back (as its Deployment restarts it).
    let mut scheduler_down: Option<(&str, Instant)> = None;
    let mut records = Vec::new();
    while began.elapsed() < RUN_LIMIT {
        for node in &nodes {
            // An agent that aborted at its crash point comes back, as a supervisor restarts it;
            // one that exits otherwise is a finding (it does not exit on a store outage).
            let Some(status) = fleet.exit_status(node).expect("the agent's status") else {
                continue;
            };
            let boot = fleet.boots(node).expect("the boots");
            let at_its_point = armed.remove(node.as_str()) == Some(boot);
            if !(at_its_point && status.signal() == Some(SIGABRT)) {
                outcome
                    .violations
                    .push(format!("the agent of {node} exited by itself: {status}"));
            }
            fleet.start(node).expect("restart the agent");
        }
        if let Some((name, back)) = scheduler_down
            && Instant::now() >= back
        {
            fleet.start_scheduler(name).expect("restart the scheduler");
            scheduler_down = None;
        }
        if restart.as_ref().is_some_and(JoinHandle::is_finished)
            && let Some(done) = restart.take()
        {
            finish_restart(done, &mut outcome.violations).await;
        }
        // The API server restarting: look again at the next round.
        if let Ok(now) = store.nodes().await {
            records = now;
        }
        let rebooted = nodes
            .iter()
            .all(|n| fleet.boots(n).is_ok_and(|boots| boots >= 2));
        if restart.is_none() && all_done(&records) && rebooted {
            break;
        }
        if Instant::now() >= next_fault {
            next_fault = Instant::now() + Duration::from_millis(rng.u64(100..1000));
            if restart.is_none() && (crash_next || rng.u32(0..5) == 0) {
                crash_next = false;
                let component = if rng.bool() {
                    Component::KubeApiserver
                } else {
                    Component::Etcd
                };
                let plane = plane.clone();
                restart = Some(tokio::task::spawn_blocking(move || {
                    plane.restart(component)
                }));
                outcome.store_crashes += 1;
            } else if scheduler_down.is_none() && rng.u32(0..4) == 0 {
                // Either of the two, the leader or its standby; back within a few seconds,
                // or (if it led) after the other took over.
                let name = SCHEDULERS[rng.usize(0..SCHEDULERS.len())];
                fleet.kill_scheduler(name).expect("kill a scheduler");
                let back = Instant::now() + Duration::from_millis(rng.u64(0..8000));
                scheduler_down = Some((name, back));
                outcome.scheduler_kills += 1;
            } else {
                let node = &nodes[rng.usize(0..NODES)];
                let point = (rng.u32(0..3) == 0).then(|| POINTS[rng.usize(0..POINTS.len())]);
                let env: Vec<(&str, &str)> =
                    point.map(|p| ("ROTA_CRASH_AT", p)).into_iter().collect();
                if fleet.start_with_env(node, &env).expect("restart the agent") {
                    outcome.kills += 1;
                }
                armed.remove(node.as_str());
                if point.is_some() {
                    armed.insert(node, fleet.boots(node).expect("the boots"));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(restart) = restart.take() {
        finish_restart(restart, &mut outcome.violations).await;
    }
    if let Some((name, _)) = scheduler_down {
        fleet.start_scheduler(name).expect("restart the scheduler");
    }
    let violations = &mut outcome.violations;
    if !all_done(&records) {
        violations.push(format!(
            "not every node finished within {}s: {records:?}",
            RUN_LIMIT.as_secs()
        ));
    }
    check_the_end(&fleet, &store, &scope, &nodes, violations).await;
    // The watch reports the last uncordons a moment after they happen.
    let uncordons = |text: &str| text.lines().filter(|l| l.ends_with(" uncordon")).count();
    let _ = testenv::wait_for(
        "the watch to see the uncordons",
        Duration::from_secs(20),
        || {
            let text = std::fs::read_to_string(&monitor).unwrap_or_default();
            std::future::ready(Ok((uncordons(&text) >= NODES).then_some(())))
        },
    )
    .await;
    watch.abort();
    let text = std::fs::read_to_string(&monitor).unwrap_or_default();
    let reboots = check_monitor(&text, CONCURRENCY, violations);
    for node in &nodes {
        if reboots.get(node.as_str()).is_none_or(|&count| count == 0) {
            violations.push(format!("{node}'s reboot command never ran"));
        }
    }
    violations.extend(fleet.supervisor_errors());
    if !violations.is_empty() {
        eprintln!(
            "soak kube seed {seed}: monitor log:\n{text}\n{}",
            fleet.logs(30)
        );
    }
    fleet.shutdown().await.expect("stop the agents");
    scope.cleanup().await.expect("remove the run's objects");
    outcome
}

/// What every node must be once the run is over: rebooted once, one `finished`, uncordoned,
/// and no slot Lease held; and no agent may be left running after the fleet stops them.
async fn check_the_end(
    fleet: &Fleet,
    store: &KubeStore,
    scope: &Scope,
    nodes: &[String],
    violations: &mut Vec<String>,
) {
    for node in nodes {
        let boots = fleet.boots(node).expect("the boots");
        if boots != 2 {
            violations.push(format!("{node} rebooted {} times", boots - 1));
        }
        let finished = store
            .history(&HistoryFilter {
                node: Some(Fleet::node_name(node).expect("a node name")),
                process: Some(Process::Reboot),
                event: Some(HistoryEvent::Finished),
                ..HistoryFilter::default()
            })
            .await
            .expect("history")
            .len();
        if finished != 1 {
            violations.push(format!("{node} has {finished} finished reboots in history"));
        }
        let unschedulable = scope
            .nodes()
            .get(node)
            .await
            .map(|n| cordoned(&n))
            .expect("the Node");
        if unschedulable {
            violations.push(format!("{node} was left unschedulable"));
        }
        fleet.kill(node).expect("stop the agent");
        if fleet.is_running(node).expect("the agent's status") {
            violations.push(format!("the agent of {node} still runs"));
        }
    }
    // An agent killed between writing idle and giving its Lease back leaves the Lease to the
    // scheduler, which takes it back a few seconds later (`grants::RELEASE_GRACE`).
    let deadline = Instant::now() + TAKE_UP + Duration::from_secs(20);
    let mut holders = store.slot_holders().await.expect("the slot Leases");
    while !holders.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        holders = store.slot_holders().await.expect("the slot Leases");
    }
    if !holders.is_empty() {
        violations.push(format!("slot Leases still held: {holders:?}"));
    }
}

/// Runs `runs` seeded runs from `first_seed` on a control plane of the soak's own; prints one
/// line per run and a summary. `None` when the tests that need a control plane are skipped.
async fn soak(first_seed: u64, runs: u64) -> Option<Vec<(u64, String)>> {
    let plane = OwnControlPlane::start().expect("a control plane of the soak's own")?;
    let plane = Arc::new(plane);
    let kubectl = testenv::tool("kubectl").expect("kubectl from testenv/build");
    let mut tally = Tally::default();
    for seed in first_seed..first_seed + runs {
        let began = Instant::now();
        let outcome = soak_run(&plane, &kubectl, seed).await;
        tally.add("Kube", seed, outcome, began.elapsed());
    }
    Some(tally.finish())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_on_kubernetes_with_control_plane_crashes_finds_no_violation() {
    if let Some(violations) = soak(1, 2).await {
        assert_eq!(violations, []);
    }
}

/// `scripts/soak --store kube`: `ROTA_SOAK_RUNS` and `ROTA_SOAK_FIRST_SEED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run through scripts/soak --store kube"]
async fn soak_from_the_environment() {
    let (first, runs) = soak_common::seeds_from_the_environment();
    if let Some(violations) = soak(first, runs).await {
        assert_eq!(violations, []);
    }
}

/// The monitor's time line on logs made by hand: what it must let through and what it must
/// find.
mod monitor {
    use super::check_monitor;

    fn check(text: &str) -> (Vec<String>, Vec<(String, usize)>) {
        let mut violations = Vec::new();
        let reboots = check_monitor(text, 2, &mut violations);
        (violations, reboots.into_iter().collect())
    }

    #[test]
    fn two_nodes_out_at_once_is_allowed_and_three_are_not() {
        let two = "watch 9 10 a cordon\nwatch 10 11 b cordon\nwatch 19 20 a uncordon\n\
                   watch 20 21 c cordon\nwatch 29 30 b uncordon\nwatch 30 31 c uncordon\n";
        assert_eq!(check(two).0, Vec::<String>::new());
        let three = "watch 9 10 a cordon\nwatch 10 11 b cordon\nwatch 11 12 c cordon\n\
                     watch 19 20 a uncordon\nwatch 20 21 b uncordon\nwatch 21 22 c uncordon\n";
        let (violations, _) = check(three);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("at revision 12"), "{violations:?}");
    }

    #[test]
    fn a_reboot_the_watch_did_not_see_cordoned_counts_as_out() {
        // c's cordon fell into an outage and its uncordon was learnt from a relist, but it
        // rebooted at revision 15, while a and b were out.
        let text = "watch 9 10 a cordon\nwatch 10 11 b cordon\nreboot 15 c\nreboot unknown a\n\
                    watch 11 40 c uncordon\nwatch 29 30 a uncordon\nwatch 30 31 b uncordon\n";
        let (violations, reboots) = check(text);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("at revision 15"), "{violations:?}");
        assert_eq!(reboots, [("a".into(), 1), ("c".into(), 1)]);
    }

    #[test]
    fn a_watch_that_lags_behind_a_reboot_is_no_violation() {
        // a's uncordon (revision 20) reached the log after c's reboot at revision 25: the
        // revisions, not the order of the lines, say what came first.
        let text = "watch 9 10 a cordon\nwatch 10 11 b cordon\nreboot 25 c\n\
                    watch 19 20 a uncordon\nwatch 21 22 c cordon\nwatch 29 30 c uncordon\n\
                    watch 30 31 b uncordon\n";
        assert_eq!(check(text).0, Vec::<String>::new());
    }

    #[test]
    fn an_uncordon_learnt_from_a_relist_gets_the_benefit_of_the_doubt() {
        // a was uncordoned somewhere in (12, 40]: as early as 13, before c's cordon at 14.
        let text = "watch 9 10 a cordon\nwatch 10 11 b cordon\nwatch 13 14 c cordon\n\
                    watch 12 40 a uncordon\nwatch 40 41 b uncordon\nwatch 41 42 c uncordon\n";
        assert_eq!(check(text).0, Vec::<String>::new());
    }

    #[test]
    fn a_malformed_line_is_reported() {
        let (violations, _) = check("watch x 10 a cordon\n");
        assert_eq!(violations.len(), 1, "{violations:?}");
    }
}
