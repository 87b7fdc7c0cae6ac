//! `rota mop submit` and `rota mop list` on SQLite: what the command line refuses and says,
//! a pinned script that the CLI refuses and `rota agent`, a real process, refuses too, and a
//! submission that wakes an idle agent in another process at once. How
//! the agent runs procedures is tested in-process in `crates/rota-agent/tests/procedures.rs`.

mod common;

use std::process::Command;

use common::{Agent, Host, ROTA};
use rota_core::{NodeState, ProcedureSpec, sha256_hex};
use rota_store::Store;

/// Agent flags for these tests: procedures are looked for often.
const FAST: [&str; 2] = ["--procedure-poll", "100ms"];

impl Host {
    /// `rota mop submit` with `script` and `extra` flags; returns the exit status and stderr.
    fn submit(&self, name: &str, script: &str, extra: &[&str]) -> (bool, String) {
        let file = self.path(&format!("{name}.sh"));
        std::fs::write(&file, script).expect("script file");
        let output = Command::new(ROTA)
            .args([
                "mop",
                "submit",
                "--store",
                &self.store_url(),
                "--name",
                name,
            ])
            .arg("--script")
            .arg(&file)
            .args(extra)
            .output()
            .expect("rota mop submit");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    fn submitted(&self, name: &str, script: &str, extra: &[&str]) {
        let (ok, stderr) = self.submit(name, script, extra);
        assert!(ok, "submit {name}: {stderr}");
    }

    fn procedure_agent(&self) -> Agent {
        self.agent(&FAST)
    }
}

#[tokio::test]
async fn a_script_that_does_not_match_its_pin_is_refused() {
    let host = Host::new();
    // Operator commands never create a store: this one is the fleet's.
    host.store().await;
    let ran = host.path("ran");
    let script = format!("touch {}\n", ran.display());
    let (ok, stderr) = host.submit("pinned", &script, &["--sha256", &sha256_hex("other")]);
    assert!(!ok, "the CLI refuses a script that does not match its pin");
    assert!(stderr.contains("refusing to run it"), "{stderr}");

    // A procedure stored by another tool (or whose script changed): the agent refuses it.
    let store = host.store().await;
    let mut spec = ProcedureSpec::new("pinned", script);
    spec.sha256 = Some(sha256_hex("other"));
    store.submit_procedure(&spec).await.expect("submit");
    let _agent = host.procedure_agent();
    let record = host
        .wait_for("failed", |r| r.state == NodeState::Failed)
        .await;
    assert!(
        record
            .last_result
            .as_deref()
            .is_some_and(|r| r.contains("sha256")),
        "{record:?}"
    );
    assert!(!ran.exists(), "the script never ran");
}

#[tokio::test]
async fn invalid_submissions_name_the_value_and_what_is_allowed() {
    let host = Host::new();
    // Operator commands never create a store: this one is the fleet's.
    host.store().await;
    for bad in ["100", "ab", "-1"] {
        let (ok, stderr) = host.submit("p", "true\n", &["--priority", bad]);
        assert!(!ok, "{bad} accepted");
        assert!(
            stderr.contains(&format!("invalid priority \"{bad}\"")) && stderr.contains("00..99"),
            "{bad}: {stderr}"
        );
    }
    let (ok, stderr) = host.submit("Bad_Name", "true\n", &[]);
    assert!(!ok);
    assert!(stderr.contains("DNS-1123"), "{stderr}");
    let (ok, stderr) = host.submit("p", "true\n", &["--timeout", "soon"]);
    assert!(!ok);
    assert!(stderr.contains("soon"), "{stderr}");
    let missing = host.path("missing.sh");
    let output = Command::new(ROTA)
        .args([
            "mop",
            "submit",
            "--store",
            &host.store_url(),
            "--name",
            "p",
            "--script",
        ])
        .arg(&missing)
        .output()
        .expect("run");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("missing.sh"));
}

#[tokio::test]
async fn a_changed_procedure_needs_a_new_name() {
    let host = Host::new();
    // Operator commands never create a store: this one is the fleet's.
    host.store().await;
    host.submitted("p", "echo one\n", &[]);
    let (ok, stderr) = host.submit("p", "echo one\n", &[]);
    assert!(ok, "the same again is a no-op: {stderr}");
    let (ok, stderr) = host.submit("p", "echo two\n", &[]);
    assert!(!ok);
    assert!(stderr.contains("procedures are immutable"), "{stderr}");
    let listed = Command::new(ROTA)
        .args(["mop", "list", "--store", &host.store_url(), "-o", "json"])
        .output()
        .expect("list");
    assert!(listed.status.success());
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert_eq!(listed[0]["spec"]["name"], "p");
    assert_eq!(listed[0]["nodes"]["pending"], 0);
}

/// A procedure submitted from another process reaches an idle SQLite agent at once, not at its
/// next procedure poll: with polls of an hour, the second script runs only because the
/// submission woke the agent (the first may also have been found by the agent's look at start).
#[tokio::test]
async fn a_procedure_submitted_from_another_process_wakes_the_idle_agent() {
    let host = Host::new();
    host.store().await;
    let _agent = host.agent(&["--procedure-poll", "1h", "--store-poll", "1h"]);
    host.wait_for("the agent's node", |r| r.state == NodeState::Idle)
        .await;
    for name in ["first", "second"] {
        let ran = host.path(name);
        host.submitted(name, &format!("touch {}\n", ran.display()), &["--no-drain"]);
        host.wait_until(&format!("the {name} script ran"), || ran.exists())
            .await;
        host.wait_for("the window closed", |r| r.state == NodeState::Idle)
            .await;
    }
}
