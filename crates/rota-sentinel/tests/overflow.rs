//! Overflow of the kernel's inotify queue. In its own test binary (its own process, so its own
//! shared inotify instance) because it deliberately floods that instance.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::fs;

use common::{spawn, stop, wait_present};

#[tokio::test]
async fn queue_overflow_triggers_a_full_rescan() {
    let max_queued: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let quiet = tempfile::tempdir().unwrap();
    let noisy = tempfile::tempdir().unwrap();
    let sentinel = quiet.path().join("reboot-needed");
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));
    // A second watcher makes the kernel report events from the noisy directory. They are not
    // delivered to the first watcher, so only the overflow can tell it that it missed something.
    let (noise_watcher, _noise_receiver, noise_cancel) = spawn(&[noisy.path().join("unused")]);

    let overflows_before = rota_sentinel::testing::overflow_count();
    {
        let _paused = rota_sentinel::testing::pause_delivery().unwrap();
        // Distinct names, so the kernel cannot merge the events: the queue fills and overflows.
        for index in 0..max_queued + 4096 {
            fs::write(noisy.path().join(format!("noise-{index}")), b"").unwrap();
        }
        // The queue is full: this creation's event is dropped by the kernel.
        fs::write(&sentinel, b"").unwrap();
    }
    wait_present(&mut receiver, &sentinel).await;
    assert!(rota_sentinel::testing::overflow_count() > overflows_before);

    stop(watcher, &cancel).await;
    stop(noise_watcher, &noise_cancel).await;
}
