//! Running procedure scripts so that a run outlives the agent that started it.
//!
//! Each attempt of a procedure on this node has a run directory, `<state-dir>/runs/<run id>`,
//! made before the script starts. A small shell wrapper, started in a process group of its own,
//! writes its pid, runs the script under `timeout` with the output in files, and writes the exit
//! status last (renamed into place, so it is whole or absent). A restarted agent reads the
//! directory instead of starting the script again: a status means finished, a live wrapper
//! means running, and neither means the attempt was interrupted.
//!
//! While a script runs, the seed's `/var/<priority>.maintenance` marker names it, so that host
//! scripts can see what is active.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rota_core::{Priority, ProcedureSpec};
use tokio::process::Command;
use tokio::sync::Notify;
use tracing::warn;

use crate::error::{Error, Result};

/// The exit status `timeout` gives a command it had to stop.
const TIMED_OUT: i32 = 124;
/// How much of each output stream history keeps.
const OUTPUT_TAIL: usize = 1000;
/// How long `timeout` waits after its TERM before it KILLs.
const KILL_AFTER: &str = "10s";

/// `$1` run directory, `$2` timeout in seconds, then the exec prefix. Each file is one short
/// `echo` (no `mv`: every fork shows in the time between two procedures), so a reader may find
/// one empty for an instant; an empty or partial status counts as not written yet.
const WRAPPER: &str = r#"dir=$1; limit=$2; shift 2
echo $$ > "$dir/pid"
timeout -k "$ROTA_KILL_AFTER" "$limit" "$@" sh -s < "$dir/script" > "$dir/stdout" 2> "$dir/stderr"
echo $? > "$dir/status"
"#;

/// What a run directory says about an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    /// No directory: the attempt has not started.
    NotStarted,
    /// The wrapper is alive.
    Running,
    /// The script ended with this exit status.
    Exited(i32),
    /// Started, but neither finished nor running: the agent stopped in the middle, and the
    /// wrapper with it (or before it started).
    Interrupted,
}

/// The run id of attempt `index` of a request.
pub fn attempt_run(request: i64, index: u32) -> String {
    format!("{request}-{index}")
}

/// One attempt of a request, as its run directory tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub run: String,
    pub index: u32,
    pub state: RunState,
    /// Its failure is already recorded in the store.
    pub recorded: bool,
}

/// The run directories and markers of one node, and the wrappers this agent started.
pub struct Runner {
    runs: PathBuf,
    markers: PathBuf,
    exec_prefix: Vec<String>,
    node: String,
    /// Run ids whose wrapper this agent started and that have not exited yet.
    children: Arc<std::sync::Mutex<HashSet<String>>>,
    exited: Arc<Notify>,
}

fn host_file(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::HostFile { what, path, source }
}

impl Runner {
    /// `runs` holds the run directories, `markers` the `<priority>.maintenance` files.
    pub fn new(runs: PathBuf, markers: PathBuf, exec_prefix: Vec<String>, node: &str) -> Runner {
        Runner {
            runs,
            markers,
            exec_prefix,
            node: node.to_string(),
            children: Arc::default(),
            exited: Arc::new(Notify::new()),
        }
    }

    /// Notified when a wrapper this agent started exits.
    pub fn exited(&self) -> Arc<Notify> {
        self.exited.clone()
    }

    fn dir(&self, run: &str) -> PathBuf {
        self.runs.join(run)
    }

    fn marker(&self, priority: Priority) -> PathBuf {
        self.markers.join(format!("{priority}.maintenance"))
    }

    fn started_here(&self, run: &str) -> bool {
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(run)
    }

    /// Reads an attempt's state from its directory (and from this agent's own children).
    pub fn state(&self, run: &str) -> Result<RunState> {
        let dir = self.dir(run);
        if !dir.exists() {
            return Ok(RunState::NotStarted);
        }
        let status = dir.join("status");
        match std::fs::read_to_string(&status) {
            Ok(text) => {
                if let Ok(code) = text.trim().parse() {
                    return Ok(RunState::Exited(code));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(host_file("reading", &status)(e)),
        }
        if self.started_here(run) || wrapper_alive(&dir) {
            Ok(RunState::Running)
        } else {
            Ok(RunState::Interrupted)
        }
    }

    /// Whether a run this agent did not start (one it found after a restart) is running.
    pub fn is_orphan(&self, run: &str) -> bool {
        !self.started_here(run)
    }

    /// Starts an attempt: makes its directory (refusing if it exists: an attempt never starts
    /// twice), writes the script and the marker, and starts the wrapper.
    pub fn start(&self, run: &str, spec: &ProcedureSpec, script: &str) -> Result<()> {
        std::fs::create_dir_all(&self.runs).map_err(host_file("creating", &self.runs))?;
        let dir = self.dir(run);
        std::fs::create_dir(&dir).map_err(host_file("creating", &dir))?;
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(host_file("writing", &path))
        };
        write("script", script)?;
        write("procedure", &spec.name)?;
        write("priority", &spec.priority.to_string())?;
        let marker = self.marker(spec.priority);
        std::fs::write(&marker, format!("{}\n", spec.name))
            .map_err(host_file("creating", &marker))?;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg("rota-procedure")
            .arg(&dir)
            .arg(spec.timeout.as_secs().max(1).to_string())
            .args(&self.exec_prefix)
            .env("ROTA_KILL_AFTER", KILL_AFTER)
            .env("ROTA_NODE", &self.node)
            .env("ROTA_PROCEDURE", &spec.name)
            .env("ROTA_PRIORITY", spec.priority.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a signal to the agent's group does not reach the script.
            .process_group(0)
            .kill_on_drop(false);
        let mut child = command
            .spawn()
            .map_err(host_file("starting the wrapper in", &dir))?;
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(run.to_string());
        let children = self.children.clone();
        let exited = self.exited.clone();
        let run = run.to_string();
        tokio::spawn(async move {
            if let Err(e) = child.wait().await {
                warn!(run, error = %e, "waiting for a procedure's wrapper");
            }
            children
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&run);
            exited.notify_one();
        });
        Ok(())
    }

    /// What history keeps of a finished attempt: its status and the tails of its output.
    pub fn summary(&self, run: &str, spec: &ProcedureSpec, code: i32) -> String {
        let dir = self.dir(run);
        let mut summary = match code {
            0 => "exit 0".to_string(),
            TIMED_OUT => format!(
                "timed out after {}",
                humantime::format_duration(spec.timeout)
            ),
            code => format!("exit {code}"),
        };
        for stream in ["stdout", "stderr"] {
            let text = std::fs::read(dir.join(stream)).unwrap_or_default();
            let tail = tail(&text);
            if !tail.is_empty() {
                summary.push_str(&format!("; {stream}: {tail}"));
            }
        }
        summary
    }

    /// Removes the attempt's marker once its result is recorded.
    pub fn finish(&self, spec: &ProcedureSpec) -> Result<()> {
        remove_if_present(&self.marker(spec.priority))
    }

    /// The latest attempt of a request, if any: attempt `k` lives in `<request>-<k>`.
    pub fn latest(&self, request: i64) -> Result<Option<Attempt>> {
        let entries = match std::fs::read_dir(&self.runs) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(host_file("reading", &self.runs)(e)),
        };
        let prefix = format!("{request}-");
        let index = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix(&prefix)?.parse::<u32>().ok()
            })
            .max();
        let Some(index) = index else {
            return Ok(None);
        };
        let run = attempt_run(request, index);
        Ok(Some(Attempt {
            state: self.state(&run)?,
            recorded: self.dir(&run).join("recorded").exists(),
            run,
            index,
        }))
    }

    /// Notes that an attempt's failure is in the store, so that a later look at it (after an
    /// operator's retry) starts the next attempt instead of recording it again.
    pub fn mark_recorded(&self, run: &str) -> Result<()> {
        let path = self.dir(run).join("recorded");
        std::fs::write(&path, b"").map_err(host_file("writing", &path))
    }

    /// At start-up: removes `<priority>.maintenance` markers that no running script owns
    /// (a crash leaves them behind).
    pub fn clean_stale_markers(&self) -> Result<Vec<PathBuf>> {
        let live: Vec<String> = match std::fs::read_dir(&self.runs) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|dir| !dir.join("status").exists() && wrapper_alive(dir))
                .filter_map(|dir| std::fs::read_to_string(dir.join("priority")).ok())
                .map(|p| p.trim().to_string())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(host_file("reading", &self.runs)(e)),
        };
        let entries = match std::fs::read_dir(&self.markers) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(host_file("reading", &self.markers)(e)),
        };
        let mut removed = Vec::new();
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(priority) = name.strip_suffix(".maintenance") else {
                continue;
            };
            if priority.parse::<Priority>().is_err() || priority.len() != 2 {
                continue;
            }
            if !live.iter().any(|p| p == priority) {
                let path = entry.path();
                remove_if_present(&path)?;
                removed.push(path);
            }
        }
        Ok(removed)
    }
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(host_file("removing", path)(e)),
    }
}

/// Whether the wrapper of the run directory is alive. Its pid file names it; a wrapper that has
/// not yet written it (an empty or missing file, for an instant after the spawn) is looked for
/// among all processes, so that a restarted agent never takes a live run for an interrupted one.
fn wrapper_alive(dir: &Path) -> bool {
    let pid = std::fs::read_to_string(dir.join("pid"))
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok());
    match pid {
        Some(pid) => names_dir(&format!("/proc/{pid}/cmdline"), dir),
        None => std::fs::read_dir("/proc").is_ok_and(|entries| {
            entries.flatten().any(|entry| {
                let pid = entry.file_name();
                pid.to_str()
                    .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
                    && names_dir(&format!("/proc/{}/cmdline", pid.to_string_lossy()), dir)
            })
        }),
    }
}

/// Whether a process's command line has the run directory as an argument, as only its wrapper
/// has (not a process that reused the pid).
fn names_dir(cmdline: &str, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(cmdline) else {
        return false;
    };
    let dir = dir.as_os_str().as_encoded_bytes();
    cmdline.split(|b| *b == 0).any(|arg| arg == dir)
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().rev().nth(OUTPUT_TAIL) {
        Some((cut, _)) => format!("…{}", &text[cut..]),
        None => text.to_string(),
    }
}

/// How long to wait before looking at runs this agent did not start again.
pub const ORPHAN_POLL: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(root: &Path) -> Runner {
        Runner::new(root.join("runs"), root.join("var"), Vec::new(), "n1")
    }

    async fn wait_exit(runner: &Runner, run: &str) -> i32 {
        loop {
            if let RunState::Exited(code) = runner.state(run).expect("state") {
                return code;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_run_records_status_output_and_marker() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("var")).expect("var");
        let runner = runner(root.path());
        let mut spec = ProcedureSpec::new("kernel", "");
        spec.priority = "07".parse().expect("priority");
        let script = "echo out-$ROTA_PROCEDURE-$ROTA_PRIORITY; cat /dev/null; echo err >&2; \
                      test -f \"$MARKER\" && exit 3";
        let script = script.replace(
            "$MARKER",
            &root.path().join("var/07.maintenance").display().to_string(),
        );
        assert_eq!(runner.state("1-0").expect("state"), RunState::NotStarted);
        runner.start("1-0", &spec, &script).expect("start");
        assert_eq!(runner.state("1-0").expect("state"), RunState::Running);
        let code = wait_exit(&runner, "1-0").await;
        assert_eq!(code, 3, "the marker exists while the script runs");
        let summary = runner.summary("1-0", &spec, code);
        assert_eq!(summary, "exit 3; stdout: out-kernel-07; stderr: err");
        runner.finish(&spec).expect("finish");
        assert!(!root.path().join("var/07.maintenance").exists());
        let again = runner.start("1-0", &spec, "true");
        assert!(again.is_err(), "an attempt never starts twice");
    }

    #[tokio::test]
    async fn a_wrapper_that_has_not_written_its_pid_yet_is_running() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("runs/5-0");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("pid"), "").expect("pid");
        // What the wrapper is between its start and its `echo $$ > pid`: a process whose command
        // line names the directory. It waits in a builtin: a child it forked would name the
        // directory too until its own exec, even after this one is gone.
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg("read -r line")
            .arg("rota-procedure")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        // The spawn returns once the child has left this process's memory, a moment before
        // the kernel has set up its new command line: a restarted agent, a process started
        // later, always finds it set.
        let cmdline = format!("/proc/{}/cmdline", wrapper.id().expect("pid"));
        for _ in 0..500 {
            if std::fs::read(&cmdline).is_ok_and(|c| !c.is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let restarted = runner(root.path());
        assert_eq!(restarted.state("5-0").expect("state"), RunState::Running);
        wrapper.kill().await.expect("kill");
        assert_eq!(
            restarted.state("5-0").expect("state"),
            RunState::Interrupted
        );
    }

    #[tokio::test]
    async fn a_timeout_is_reported_as_such() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("var")).expect("var");
        let runner = runner(root.path());
        let mut spec = ProcedureSpec::new("slow", "");
        spec.timeout = Duration::from_secs(1);
        runner.start("2-0", &spec, "sleep 30").expect("start");
        let code = wait_exit(&runner, "2-0").await;
        assert_eq!(runner.summary("2-0", &spec, code), "timed out after 1s");
    }

    #[tokio::test]
    async fn another_agent_sees_running_and_interrupted_runs() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("var")).expect("var");
        let first = runner(root.path());
        let spec = ProcedureSpec::new("p", "");
        first.start("3-0", &spec, "sleep 1").expect("start");
        // A second runner is what a restarted agent has: no children of its own.
        let restarted = runner(root.path());
        while !root.path().join("runs/3-0/pid").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(restarted.state("3-0").expect("state"), RunState::Running);
        assert!(restarted.is_orphan("3-0"));
        assert!(
            restarted.clean_stale_markers().expect("clean").is_empty(),
            "its marker is live"
        );
        assert_eq!(wait_exit(&restarted, "3-0").await, 0);
        std::fs::create_dir_all(root.path().join("runs/4-0")).expect("dir");
        std::fs::create_dir_all(root.path().join("runs/4-1")).expect("dir");
        std::fs::create_dir_all(root.path().join("runs/14-7")).expect("dir");
        let latest = restarted.latest(4).expect("latest").expect("an attempt");
        assert_eq!((latest.run.as_str(), latest.index), ("4-1", 1));
        assert_eq!(latest.state, RunState::Interrupted);
        assert!(!latest.recorded);
        restarted.mark_recorded("4-1").expect("mark");
        assert!(
            restarted
                .latest(4)
                .expect("latest")
                .expect("attempt")
                .recorded
        );
        assert_eq!(restarted.latest(5).expect("latest"), None);
    }

    #[tokio::test]
    async fn stale_markers_go_and_others_stay() {
        let root = tempfile::tempdir().expect("tempdir");
        let var = root.path().join("var");
        std::fs::create_dir(&var).expect("var");
        for name in [
            "05.maintenance",
            "99.maintenance",
            "notes.maintenance",
            "maintenance-required",
        ] {
            std::fs::write(var.join(name), "").expect("write");
        }
        let removed = runner(root.path()).clean_stale_markers().expect("clean");
        assert_eq!(removed.len(), 2);
        assert!(!var.join("05.maintenance").exists());
        assert!(var.join("notes.maintenance").exists());
        assert!(var.join("maintenance-required").exists());
    }

    /// Untrusted input (issue 29): a run directory holds what the wrapper wrote, or what a
    /// crash, a full disk or a hand left there. Any bytes in `status`, `pid` and the output
    /// files are read without a panic: the status is the exit code only when it reads as one
    /// (a status that is not text is an error naming the file), and the summary keeps a tail of
    /// any output.
    mod untrusted {
        use proptest::prelude::*;

        use super::*;

        /// Cases per property: each writes a run directory.
        const CASES: u32 = 300;

        fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..max),
                "[ 0-9+-]{0,6}\n?".prop_map(String::into_bytes),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(CASES))]

            #[test]
            fn any_run_directory_reads(
                status in proptest::option::of(bytes(16)),
                pid in proptest::option::of(bytes(16)),
                output in bytes(3 * OUTPUT_TAIL),
            ) {
                let root = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
                let runner = runner(root.path());
                let dir = root.path().join("runs/1-0");
                let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes);
                std::fs::create_dir_all(&dir).map_err(|e| TestCaseError::fail(e.to_string()))?;
                for (name, content) in [("status", &status), ("pid", &pid)] {
                    if let Some(content) = content {
                        write(name, content).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    }
                }
                write("stdout", &output).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let text = status.as_deref().map(std::str::from_utf8);
                match (runner.state("1-0"), text) {
                    (Err(e), Some(Err(_))) => {
                        prop_assert!(e.to_string().contains("runs/1-0/status"), "{e}");
                    }
                    (Ok(state), text) => {
                        let code = text.and_then(Result::ok).and_then(|t| t.trim().parse::<i32>().ok());
                        match code {
                            Some(code) => prop_assert_eq!(state, RunState::Exited(code)),
                            None => prop_assert_eq!(state, RunState::Interrupted),
                        }
                    }
                    (state, text) => prop_assert!(false, "{state:?} from {text:?}"),
                }
                let summary = runner.summary("1-0", &ProcedureSpec::new("p", ""), 1);
                prop_assert!(summary.starts_with("exit 1"));
                prop_assert!(summary.chars().count() <= "exit 1; stdout: …".len() + OUTPUT_TAIL);
            }
        }
    }
}
