//! `--reboot-method signal`: the reboot is systemd's reboot signal, SIGRTMIN+5 as systemd
//! counts it (39), sent to a process. Here the process is a child of the test that records
//! which of the signals around 39 it received, never the real PID 1.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rota_actions::{Reboot, SYSTEMD_REBOOT_SIGNAL};

const PATIENCE: Duration = Duration::from_secs(30);

/// A bash child that writes the number of the first of signals 37..=41 it receives to
/// `dir/got` and exits; `dir/ready` once its traps are set.
fn listener(dir: &Path) -> Child {
    let mut script = String::new();
    for signal in 37..=41 {
        script.push_str(&format!(
            "trap 'echo {signal} > \"$0/got\"; exit 0' {signal}; "
        ));
    }
    script.push_str("touch \"$0/ready\"; while :; do sleep 0.05; done");
    let child = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(dir)
        .spawn()
        .expect("bash starts");
    let start = Instant::now();
    while !dir.join("ready").exists() {
        assert!(start.elapsed() < PATIENCE, "the listener never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[tokio::test]
async fn the_signal_method_sends_systemds_reboot_signal_to_the_given_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = listener(dir.path());
    let pid = i32::try_from(child.id()).expect("a pid");
    let handle = Reboot::Signal { pid }
        .start(None)
        .expect("the signal is sent");
    handle
        .await
        .expect("the handle resolves")
        .expect("a sent signal is a started reboot");
    let status = child.wait().expect("the listener exits");
    assert!(status.success(), "the listener ended with {status}");
    let got = std::fs::read_to_string(dir.path().join("got")).expect("a recorded signal");
    assert_eq!(got.trim(), "39");
    assert_eq!(SYSTEMD_REBOOT_SIGNAL, 39);
}

#[tokio::test]
async fn a_signal_that_cannot_be_sent_fails_the_reboot_naming_the_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = listener(dir.path());
    let pid = i32::try_from(child.id()).expect("a pid");
    child.kill().expect("kill");
    child.wait().expect("reaped");
    let error = Reboot::Signal { pid }
        .start(None)
        .expect_err("no such process any more");
    assert_eq!(error.action, "reboot");
    assert!(
        error.detail.contains(&format!("to PID {pid}")),
        "{}",
        error.detail
    );
}
