//! A watcher that falls behind its own events. In its own test binary because pausing event
//! delivery affects every watcher in the process.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::fs;

use common::{spawn, stop, wait_present};

#[tokio::test]
async fn watcher_whose_queue_fills_rescans() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("reboot-needed");
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));

    let overflows_before = rota_sentinel::testing::overflow_count();
    {
        let _paused = rota_sentinel::testing::pause_delivery().unwrap();
        // Far more events than a watcher's queue holds, far fewer than the kernel's queue holds:
        // the sentinel's own event is dropped by the hub, not by the kernel.
        for index in 0..2000 {
            fs::write(dir.path().join(format!("noise-{index}")), b"").unwrap();
        }
        fs::write(&sentinel, b"").unwrap();
    }
    wait_present(&mut receiver, &sentinel).await;
    assert_eq!(rota_sentinel::testing::overflow_count(), overflows_before);
    stop(watcher, &cancel).await;
}
