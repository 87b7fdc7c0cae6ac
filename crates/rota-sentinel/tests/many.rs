//! Many watchers in one process, more than `fs.inotify.max_user_instances` allows instances.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::fs;

use common::{spawn, stop, wait_present};

const WATCHERS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_watchers_in_one_process_all_see_their_sentinel() {
    let instances: usize = fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    println!("fs.inotify.max_user_instances = {instances}, watchers = {WATCHERS}");
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared-reboot-needed");
    let mut watchers = Vec::new();
    for index in 0..WATCHERS {
        let own_dir = dir.path().join(format!("node-{index}"));
        fs::create_dir(&own_dir).unwrap();
        let own = own_dir.join("reboot-needed");
        let (watcher, receiver, cancel) = spawn(&[own.clone(), shared.clone()]);
        watchers.push((watcher, receiver, cancel, own));
    }

    fs::write(&shared, b"").unwrap();
    for (_, receiver, _, own) in &mut watchers {
        wait_present(receiver, &shared).await;
        fs::write(&*own, b"").unwrap();
    }
    for (_, receiver, _, own) in &mut watchers {
        wait_present(receiver, own).await;
    }
    for (watcher, _, cancel, _) in watchers {
        stop(watcher, &cancel).await;
    }
}
