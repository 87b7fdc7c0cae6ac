//! Procedures in-process on a real SQLite store: submitted as `rota mop submit` stores them,
//! run by the agent by the priority rule inside one window. Each script appends `start NAME`
//! and `end NAME` to a log, and some wait for a file before they end, so that a test can hold
//! one running while another arrives.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::host::{Host, RunningAgent};
use rota_core::{HistoryEvent, NodeName, NodeState, Priority, ProcedureSpec, Process};
use rota_e2e::host::PATIENCE;
use rota_store::{HistoryFilter, StoreExt};

impl Host {
    fn script_log(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("scripts.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A script that logs its start, waits for `release-NAME` if `hold`, and logs its end.
    fn script(&self, name: &str, hold: bool) -> String {
        let log = self.path("scripts.log");
        let release = self.path(&format!("release-{name}"));
        let wait = if hold {
            format!(
                "while [ ! -e {} ]; do sleep 0.02; done\n",
                release.display()
            )
        } else {
            String::new()
        };
        format!(
            "echo start {name} >> {log}\n{wait}echo end {name} >> {log}\n",
            log = log.display()
        )
    }

    fn release(&self, name: &str) {
        std::fs::write(self.path(&format!("release-{name}")), b"").expect("release");
    }

    /// Submits procedure `name` running `script` with priority `priority`, as changed by
    /// `configure`.
    async fn submitted(
        &self,
        name: &str,
        script: &str,
        priority: u8,
        configure: impl FnOnce(&mut ProcedureSpec),
    ) {
        let mut spec = ProcedureSpec::new(name, script);
        spec.priority = Priority::new(priority).expect("a priority");
        configure(&mut spec);
        self.submit(&spec).await;
    }

    /// Submits procedure `name` at `priority`, with a script that holds until released, and
    /// waits until it starts.
    async fn start_held(&self, name: &str, priority: u8) {
        self.submitted(name, &self.script(name, true), priority, |_| {})
            .await;
        self.wait_log(&format!("start {name}")).await;
    }

    /// Submits `long`, a script that holds until released, starts an agent, and stops it once
    /// the script has started.
    async fn stop_the_agent_while_long_runs(&self) {
        self.submitted("long", &self.script("long", true), DEFAULT, |_| {})
            .await;
        let agent = self.procedure_agent().await;
        self.wait_log("start long").await;
        agent.stop().await.expect("the agent stops cleanly");
    }

    async fn wait_log(&self, line: &str) {
        self.wait_until(line, || self.script_log().iter().any(|l| l == line))
            .await;
    }

    async fn events(&self, process: &str, event: HistoryEvent) -> Vec<Option<String>> {
        self.store()
            .history(&HistoryFilter {
                process: Some(process.parse().expect("process")),
                event: Some(event),
                ..HistoryFilter::default()
            })
            .await
            .expect("history")
            .into_iter()
            .map(|e| e.cause)
            .collect()
    }

    /// Waits until a window has closed: idle, the slot released, and a result recorded. A
    /// node is idle without a slot before its agent has taken up anything too; without the
    /// result, a test whose agent starts after the submission could look before the window.
    async fn idle_after_window(&self) {
        self.wait_for("idle with its slot released after a window", |r| {
            r.state == NodeState::Idle && r.slot.is_none() && r.last_result.is_some()
        })
        .await;
    }

    /// An agent that looks for procedures often.
    async fn procedure_agent(&self) -> RunningAgent {
        self.agent_with(|c| c.procedure_poll = Duration::from_millis(100))
            .await
    }
}

/// The priority a submission without `--priority` has.
const DEFAULT: u8 = 99;

fn position(log: &[String], line: &str) -> usize {
    log.iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("{line} is not in {log:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_more_important_procedure_starts_at_once_beside_a_running_one() {
    let host = Host::new().await;
    let _agent = host.procedure_agent().await;
    host.start_held("low", 99).await;
    host.start_held("urgent", 0).await;
    assert!(
        !host.script_log().contains(&"end low".to_string()),
        "00 started while 99 still runs: {:?}",
        host.script_log()
    );
    host.release("urgent");
    host.release("low");
    host.idle_after_window().await;
    assert_eq!(host.count("drain"), 1, "both ran in one window");
    assert_eq!(host.count("uncordon"), 1);
}

/// `exclusive`: a more important procedure that must not overlap waits for the running one
/// (where the plain rule starts it at once), and while it runs, nothing starts beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_procedure_never_runs_beside_another() {
    let host = Host::new().await;
    let _agent = host.procedure_agent().await;
    host.start_held("low", 99).await;
    host.submitted("alone", &host.script("alone", true), 0, |spec| {
        spec.exclusive = true;
    })
    .await;
    // Long enough for the agent to look at the queue several times (--procedure-poll 100ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(host.script_log(), ["start low"], "alone started beside low");
    host.release("low");
    host.wait_log("start alone").await;
    host.submitted("after", &host.script("after", false), 0, |_| {})
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        host.script_log(),
        ["start low", "end low", "start alone"],
        "after started beside alone"
    );
    host.release("alone");
    host.idle_after_window().await;
    assert_eq!(
        host.script_log(),
        [
            "start low",
            "end low",
            "start alone",
            "end alone",
            "start after",
            "end after"
        ]
    );
    assert_eq!(host.count("drain"), 1, "all three ran in one window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_less_important_procedure_waits_for_a_running_one() {
    let host = Host::new().await;
    let _agent = host.procedure_agent().await;
    host.start_held("urgent", 0).await;
    host.submitted("low", &host.script("low", false), 99, |_| {})
        .await;
    let store = host.store();
    let low = Process::mop("low").expect("process");
    let start = Instant::now();
    while !store
        .open_requests(&host.node)
        .await
        .expect("requests")
        .iter()
        .any(|r| r.process == low && r.state == rota_store::RequestState::Active)
    {
        assert!(start.elapsed() < PATIENCE, "low never joined the window");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !host.script_log().contains(&"start low".to_string()),
        "99 must wait while 00 runs: {:?}",
        host.script_log()
    );
    host.release("urgent");
    host.idle_after_window().await;
    let log = host.script_log();
    assert!(
        position(&log, "end urgent") < position(&log, "start low"),
        "{log:?}"
    );
    assert_eq!(host.count("drain"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_priorities_run_one_after_another_in_arrival_order() {
    let host = Host::new().await;
    for name in ["first", "second", "third"] {
        host.submitted(name, &host.script(name, false), 50, |_| {})
            .await;
    }
    let _agent = host.procedure_agent().await;
    host.idle_after_window().await;
    host.wait_until("all three ran", || host.script_log().len() == 6)
        .await;
    assert_eq!(
        host.script_log(),
        [
            "start first",
            "end first",
            "start second",
            "end second",
            "start third",
            "end third"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_procedures_and_a_reboot_request_drain_once_and_reboot_once() {
    let host = Host::new().await;
    host.submitted("a", &host.script("a", false), 10, |_| {})
        .await;
    host.submitted("b", &host.script("b", false), 20, |s| s.reboot = true)
        .await;
    host.submitted("c", &host.script("c", false), 30, |_| {})
        .await;
    std::fs::write(host.root("run/reboot-needed"), b"").expect("sentinel");
    let agent = host.procedure_agent().await;
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    assert_eq!(
        host.script_log(),
        ["start a", "end a", "start b", "end b", "start c", "end c"],
        "every procedure ran before the reboot"
    );
    agent.stop().await.expect("the agent stops cleanly");
    host.reboot_host("boot-2");
    let _agent = host.procedure_agent().await;
    host.idle_after_window().await;
    assert_eq!(host.count("drain"), 1, "one drain served all the work");
    assert_eq!(host.count("reboot"), 1, "one reboot for all who asked");
    assert_eq!(host.count("uncordon"), 1);
    for name in ["mop/a", "mop/b", "mop/c", "reboot"] {
        assert_eq!(
            host.events(name, HistoryEvent::Finished).await.len(),
            1,
            "{name} finished once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_script_fails_closed_until_an_operator_retries() {
    let host = Host::new().await;
    let fixed = host.path("fixed");
    let script = format!(
        "echo checking\necho broken disk >&2\n[ -e {} ] || exit 3\n",
        fixed.display()
    );
    host.submitted("check", &script, DEFAULT, |_| {}).await;
    host.submitted("after", &host.script("after", false), 99, |_| {})
        .await;
    let _agent = host.procedure_agent().await;
    let record = host
        .wait_for("failed", |r| r.state == NodeState::Failed)
        .await;
    assert_eq!(record.slot, Some(0), "a failed node keeps its slot");
    assert!(record.cordoned_by_rota, "and stays cordoned");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(host.count("uncordon"), 0);
    assert!(host.script_log().is_empty(), "the rest of the queue waits");
    let failures = host.events("mop/check", HistoryEvent::Failed).await;
    let cause = failures[0].clone().expect("a cause");
    assert!(
        cause.contains("exit 3") && cause.contains("broken disk") && cause.contains("checking"),
        "{cause}"
    );

    std::fs::write(&fixed, b"").expect("fix");
    host.store()
        .retry(&host.node)
        .await
        .expect("an operator's retry");
    host.idle_after_window().await;
    assert_eq!(host.script_log(), ["start after", "end after"]);
    assert_eq!(
        host.events("mop/check", HistoryEvent::Finished).await.len(),
        1,
        "{:?}",
        host.history().await
    );
    assert_eq!(host.count("uncordon"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_in_the_middle_of_a_script_never_starts_it_again() {
    let host = Host::new().await;
    host.stop_the_agent_while_long_runs().await;
    let _agent = host.procedure_agent().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    host.release("long");
    host.idle_after_window().await;
    assert_eq!(host.script_log(), ["start long", "end long"]);
    assert_eq!(
        host.events("mop/long", HistoryEvent::Finished).await.len(),
        1
    );
}

/// A procedure without `retry` whose agent died while it ran, and that is no longer running
/// when the agent comes back (its process group was killed too): the request fails closed with
/// a cause that says so, in one readable sentence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procedure_interrupted_with_its_agent_fails_and_says_why() {
    let host = Host::new().await;
    host.stop_the_agent_while_long_runs().await;
    let pids: Vec<_> = walk(&host.path("root"))
        .into_iter()
        .filter(|p| {
            p.ends_with("pid")
                && p.parent()
                    .and_then(|d| d.parent())
                    .is_some_and(|d| d.ends_with("runs"))
        })
        .collect();
    assert_eq!(pids.len(), 1, "one run directory with a pid: {pids:?}");
    let pid = std::fs::read_to_string(&pids[0]).expect("pid");
    let killed = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", pid.trim())])
        .status()
        .expect("kill");
    assert!(killed.success(), "killing the procedure's process group");

    let _agent = host.procedure_agent().await;
    host.wait_for("failed", |r| r.state == NodeState::Failed)
        .await;
    let failures = host.events("mop/long", HistoryEvent::Failed).await;
    assert_eq!(
        failures,
        [Some(
            "procedure long was interrupted: its agent stopped while it ran and it is no longer \
             running (set retry to run it again)"
                .to_string()
        )]
    );
    assert_eq!(host.script_log(), ["start long"], "never started again");
}

/// Every file under `dir`, depth first.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_names_the_running_procedure_and_stale_ones_are_removed() {
    let host = Host::new().await;
    let stale = host.root("var/42.maintenance");
    std::fs::write(&stale, b"left by a crash\n").expect("stale marker");
    let marker = host.root("var/07.maintenance");
    let script = format!(
        "cat {} >> {}\n",
        marker.display(),
        host.path("scripts.log").display()
    );
    host.submitted("marked", &script, 7, |_| {}).await;
    let _agent = host.procedure_agent().await;
    host.idle_after_window().await;
    assert_eq!(
        host.script_log(),
        ["marked"],
        "the marker names the procedure"
    );
    assert!(!marker.exists(), "removed when the procedure ended");
    assert!(!stale.exists(), "a stale marker is removed at start-up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procedure_runs_once_on_matching_nodes_only() {
    let host = Host::new().await;
    let names = |names: &[&str]| {
        names
            .iter()
            .map(|n| NodeName::new(*n).expect("a node name"))
            .collect::<Vec<_>>()
    };
    host.submitted(
        "elsewhere",
        &host.script("elsewhere", false),
        DEFAULT,
        |s| s.nodes = names(&["node-b", "node-c"]),
    )
    .await;
    host.submitted("gpu", &host.script("gpu", false), DEFAULT, |s| {
        s.node_selector.insert("pool".into(), "gpu".into());
    })
    .await;
    host.submitted("here", &host.script("here", false), DEFAULT, |s| {
        s.nodes = names(&["node-a"]);
        s.drain = false;
    })
    .await;
    let labelled = |c: &mut rota_agent::AgentConfig| {
        c.procedure_poll = Duration::from_millis(100);
        c.node_labels.insert("pool".into(), "gpu".into());
    };
    let agent = host.agent_with(labelled).await;
    host.wait_until("both ran", || host.script_log().len() == 4)
        .await;
    host.idle_after_window().await;
    agent.stop().await.expect("the agent stops cleanly");
    let _agent = host.agent_with(labelled).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut log = host.script_log();
    log.sort();
    assert_eq!(
        log,
        ["end gpu", "end here", "start gpu", "start here"],
        "once each, after a restart too"
    );
    let requests = host.store().all_requests().await.expect("requests");
    assert!(
        requests
            .iter()
            .all(|r| r.process != Process::mop("elsewhere").expect("process"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_without_drain_neither_cordons_nor_uncordons() {
    let host = Host::new().await;
    host.submitted("light", &host.script("light", false), DEFAULT, |s| {
        s.drain = false;
    })
    .await;
    let _agent = host.procedure_agent().await;
    host.wait_log("end light").await;
    host.idle_after_window().await;
    assert_eq!(host.count("drain"), 0);
    assert_eq!(host.count("uncordon"), 0);
}
