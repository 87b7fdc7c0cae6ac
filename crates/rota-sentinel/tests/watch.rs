//! Sentinel detection through real inotify on real directories.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::fs;
use std::time::Duration;

use common::{PATIENCE, events_only, mtime, spawn, stop, wait_absent, wait_present, wait_until};
use rota_sentinel::{Error, SentinelWatcher, WatcherOptions};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn sentinel_created_after_start_is_reported_with_its_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("reboot-needed");
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));
    assert!(!watcher.current().any_present());

    fs::write(&sentinel, b"").unwrap();
    let seen = wait_present(&mut receiver, &sentinel).await;
    assert_eq!(seen, mtime(&sentinel));
    assert!(watcher.current().any_present());
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn deletion_and_recreation_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("reboot-required");
    fs::write(&sentinel, b"").unwrap();
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));
    assert_eq!(
        watcher.current().get(&sentinel).unwrap().present,
        Some(mtime(&sentinel))
    );

    fs::remove_file(&sentinel).unwrap();
    wait_absent(&mut receiver, &sentinel).await;

    fs::write(&sentinel, b"again").unwrap();
    let seen = wait_present(&mut receiver, &sentinel).await;
    assert_eq!(seen, mtime(&sentinel));
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn touching_an_existing_sentinel_reports_the_new_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("maintenance-required");
    fs::write(&sentinel, b"").unwrap();
    let before = mtime(&sentinel);
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));

    let touched = before + Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&sentinel)
        .unwrap()
        .set_modified(touched)
        .unwrap();
    wait_until(&mut receiver, "the touched mtime", |snapshot| {
        snapshot.get(&sentinel).unwrap().present == Some(touched)
    })
    .await;
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn rename_into_place_and_rename_away_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("x");
    let temporary = dir.path().join("x.tmp");
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));

    fs::write(&temporary, b"pending").unwrap();
    fs::rename(&temporary, &sentinel).unwrap();
    let seen = wait_present(&mut receiver, &sentinel).await;
    assert_eq!(seen, mtime(&sentinel));

    fs::rename(&sentinel, dir.path().join("x.done")).unwrap();
    wait_absent(&mut receiver, &sentinel).await;
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn parent_directory_removed_and_recreated() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let sentinel = run.join("reboot-needed");
    fs::create_dir(&run).unwrap();
    fs::write(&sentinel, b"").unwrap();
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));
    assert!(watcher.current().any_present());

    fs::remove_dir_all(&run).unwrap();
    wait_absent(&mut receiver, &sentinel).await;

    // The watch on the old directory is gone; the new one must be found and armed.
    fs::create_dir(&run).unwrap();
    fs::write(&sentinel, b"").unwrap();
    wait_present(&mut receiver, &sentinel).await;

    // And the re-armed watch keeps working for later changes.
    fs::remove_file(&sentinel).unwrap();
    wait_absent(&mut receiver, &sentinel).await;
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn nested_missing_directories_created_one_level_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = a.join("b");
    let c = b.join("c");
    let sentinel = c.join("reboot-needed");
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));

    // Pauses between levels let each re-arm happen before the next level appears.
    for level in [&a, &b, &c] {
        fs::create_dir(level).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!watcher.current().any_present());
    fs::write(&sentinel, b"").unwrap();
    wait_present(&mut receiver, &sentinel).await;

    // Removing the whole chain falls back to the top, and recreating it at once re-arms down.
    fs::remove_dir_all(&a).unwrap();
    wait_absent(&mut receiver, &sentinel).await;
    fs::create_dir_all(&c).unwrap();
    fs::write(&sentinel, b"").unwrap();
    wait_present(&mut receiver, &sentinel).await;
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn nested_chain_created_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("var/lib/rota/maintenance-required");
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));

    fs::create_dir_all(sentinel.parent().unwrap()).unwrap();
    fs::write(&sentinel, b"").unwrap();
    wait_present(&mut receiver, &sentinel).await;
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn several_sentinels_in_the_same_and_in_different_directories() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let var = dir.path().join("var");
    fs::create_dir(&run).unwrap();
    fs::create_dir(&var).unwrap();
    let reboot_needed = run.join("reboot-needed");
    let reboot_required = run.join("reboot-required");
    let maintenance = var.join("maintenance-required");
    let paths = [
        reboot_needed.clone(),
        reboot_required.clone(),
        maintenance.clone(),
    ];
    let (watcher, mut receiver, cancel) = spawn(&paths);
    let first = watcher.current();
    assert_eq!(
        first
            .sentinels
            .iter()
            .map(|state| state.path.clone())
            .collect::<Vec<_>>(),
        paths
    );

    fs::write(&reboot_required, b"").unwrap();
    wait_present(&mut receiver, &reboot_required).await;
    let snapshot = watcher.current();
    assert!(snapshot.get(&reboot_needed).unwrap().present.is_none());
    assert!(snapshot.get(&maintenance).unwrap().present.is_none());

    fs::write(&maintenance, b"").unwrap();
    wait_present(&mut receiver, &maintenance).await;
    fs::write(&reboot_needed, b"").unwrap();
    wait_present(&mut receiver, &reboot_needed).await;

    fs::remove_file(&reboot_required).unwrap();
    wait_absent(&mut receiver, &reboot_required).await;
    let snapshot = watcher.current();
    assert!(snapshot.get(&reboot_needed).unwrap().present.is_some());
    assert!(snapshot.get(&maintenance).unwrap().present.is_some());
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn unrelated_entries_do_not_wake_subscribers() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("reboot-needed");
    let (watcher, mut receiver, cancel) = spawn(std::slice::from_ref(&sentinel));

    fs::write(dir.path().join("reboot-needed.tmp"), b"").unwrap();
    fs::write(dir.path().join("unrelated"), b"").unwrap();
    fs::create_dir(dir.path().join("subdir")).unwrap();
    fs::remove_file(dir.path().join("unrelated")).unwrap();
    let woke = tokio::time::timeout(Duration::from_millis(300), receiver.changed()).await;
    assert!(woke.is_err(), "woken by unrelated entries: {woke:?}");

    fs::write(&sentinel, b"").unwrap();
    tokio::time::timeout(PATIENCE, receiver.changed())
        .await
        .unwrap()
        .unwrap();
    assert!(receiver.borrow_and_update().any_present());
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn directory_reached_through_a_symlink_is_watched_under_both_names() {
    // Like /var/run → /run: two sentinel parents naming one directory share one inotify watch.
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let var_run = dir.path().join("var-run");
    fs::create_dir(&run).unwrap();
    std::os::unix::fs::symlink(&run, &var_run).unwrap();
    let direct = run.join("reboot-needed");
    let linked = var_run.join("reboot-required");
    let (watcher, mut receiver, cancel) = spawn(&[direct.clone(), linked.clone()]);

    fs::write(run.join("reboot-required"), b"").unwrap();
    wait_present(&mut receiver, &linked).await;
    fs::write(&direct, b"").unwrap();
    wait_present(&mut receiver, &direct).await;
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn watchers_of_one_directory_share_it_and_survive_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("reboot-needed");
    let (first, _first_receiver, first_cancel) = spawn(std::slice::from_ref(&sentinel));
    let (second, mut receiver, second_cancel) = spawn(std::slice::from_ref(&sentinel));

    // Ending the first watcher must not remove the watch the second one still needs.
    stop(first, &first_cancel).await;
    fs::write(&sentinel, b"").unwrap();
    wait_present(&mut receiver, &sentinel).await;
    stop(second, &second_cancel).await;
}

#[tokio::test]
async fn safety_recheck_finds_a_change_no_event_reports() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let parent = a.join("b");
    let sentinel = parent.join("reboot-needed");
    fs::create_dir_all(&parent).unwrap();
    let cancel = CancellationToken::new();
    let options = WatcherOptions {
        safety_recheck: Duration::from_millis(100),
    };
    let watcher = SentinelWatcher::spawn(vec![sentinel.clone()], options, cancel.clone()).unwrap();
    let mut receiver = watcher.subscribe();

    // Renaming the grandparent moves the watched directory without any event on it: the watch
    // now follows `moved/b`, and a new `a/b` is invisible to it.
    fs::rename(&a, dir.path().join("moved")).unwrap();
    fs::create_dir_all(&parent).unwrap();
    fs::write(&sentinel, b"").unwrap();
    wait_present(&mut receiver, &sentinel).await;
    stop(watcher, &cancel).await;
}

#[tokio::test]
async fn parent_that_is_a_regular_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    fs::write(&run, b"not a directory").unwrap();
    let sentinel = run.join("reboot-needed");

    let error = SentinelWatcher::spawn(
        vec![sentinel.clone()],
        events_only(),
        CancellationToken::new(),
    )
    .unwrap_err();
    match &error {
        Error::NotADirectory {
            sentinel: named,
            path,
        } => {
            assert_eq!(named, &sentinel);
            assert_eq!(path, &run);
        }
        other => panic!("unexpected error: {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains(&run.display().to_string()), "{message}");
    assert!(message.contains("not a directory"), "{message}");
}

#[tokio::test]
async fn ancestor_that_is_a_regular_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("var");
    fs::write(&file, b"").unwrap();
    let sentinel = file.join("lib/rota/reboot-needed");

    let error = SentinelWatcher::spawn(vec![sentinel], events_only(), CancellationToken::new())
        .unwrap_err();
    assert!(
        matches!(&error, Error::NotADirectory { path, .. } if *path == file),
        "{error:?}"
    );
}

#[tokio::test]
async fn relative_and_non_file_paths_are_errors() {
    let error = SentinelWatcher::spawn(
        vec!["run/reboot-needed".into()],
        events_only(),
        CancellationToken::new(),
    )
    .unwrap_err();
    assert!(matches!(error, Error::RelativePath { .. }), "{error:?}");

    let error = SentinelWatcher::spawn(
        vec!["/run/../reboot-needed".into()],
        events_only(),
        CancellationToken::new(),
    )
    .unwrap_err();
    assert!(matches!(error, Error::NotAFilePath { .. }), "{error:?}");
}

#[tokio::test]
async fn zero_recheck_interval_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let options = WatcherOptions {
        safety_recheck: Duration::ZERO,
    };
    let error = SentinelWatcher::spawn(
        vec![dir.path().join("reboot-needed")],
        options,
        CancellationToken::new(),
    )
    .unwrap_err();
    assert!(matches!(error, Error::ZeroRecheckInterval), "{error:?}");
}

#[test]
fn spawn_outside_a_runtime_is_an_error() {
    let error = SentinelWatcher::spawn(
        vec!["/run/reboot-needed".into()],
        WatcherOptions::default(),
        CancellationToken::new(),
    )
    .unwrap_err();
    assert!(matches!(error, Error::NoRuntime), "{error:?}");
}

#[tokio::test]
async fn default_recheck_is_sixty_seconds() {
    assert_eq!(
        WatcherOptions::default().safety_recheck,
        Duration::from_secs(60)
    );
}

#[tokio::test]
async fn join_returns_ok_after_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let (watcher, mut receiver, cancel) = spawn(&[dir.path().join("reboot-needed")]);
    cancel.cancel();
    tokio::time::timeout(PATIENCE, watcher.join())
        .await
        .unwrap()
        .unwrap();
    // The task is gone, so the channel is closed.
    assert!(receiver.changed().await.is_err());
}
