//! The store conformance suite against the embedded SQLite store, plus SQLite-only cases.

use std::sync::Arc;

use rota_store::{SqliteStore, Store, StoreExt, StoreUrl};

async fn make() -> Arc<dyn Store> {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    Arc::new(
        SqliteStore::open(&dir.join("rota.db"))
            .await
            .expect("open store"),
    )
}

rota_store::conformance_tests!(make);

#[tokio::test]
async fn a_file_that_is_not_sqlite_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "these are my notes, not a database\n".repeat(100)).expect("write");
    let err = SqliteStore::open(&path).await.err().expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("notes.txt") && text.contains("not a rota database"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "these are my notes, not a database\n".repeat(100),
        "the file is untouched"
    );
}

#[tokio::test]
async fn another_programs_sqlite_database_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("other.db");
    let other = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .expect("create other db");
    sqlx::query("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        .execute(&other)
        .await
        .expect("create table");
    other.close().await;
    let err = SqliteStore::open(&path).await.err().expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("not a rota database") && text.contains("invoices"),
        "{text}"
    );
}

#[tokio::test]
async fn a_newer_schema_is_refused_without_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rota.db");
    drop(SqliteStore::open(&path).await.expect("create"));
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("connect");
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101000000, 'from the future', 1, x'00', 0)",
    )
    .execute(&pool)
    .await
    .expect("fake a future migration");
    pool.close().await;
    let err = SqliteStore::open(&path).await.err().expect("refused");
    assert!(
        err.to_string().contains("newer than this rota binary"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_handles_on_one_file_never_exceed_the_slots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url: StoreUrl = format!("sqlite://{}", dir.path().join("rota.db").display())
        .parse()
        .expect("url");
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(url.open().await.expect("open"));
    }
    rota_store::conformance::concurrent_stress_across(stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_opening_a_new_file_at_once_all_succeed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rota.db");
    let opens: Vec<_> = (0..16)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { SqliteStore::open(&path).await.map(drop) })
        })
        .collect();
    for open in opens {
        open.await
            .expect("task")
            .expect("every concurrent open succeeds");
    }
}

/// The inotify instances this process holds (`fs.inotify.max_user_instances` is 128 by
/// default, for every process of the user together).
fn inotify_instances() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "anon_inode:inotify")
        .count()
}

/// Each store handle watches its database for other processes' operator changes; a handle
/// that is dropped gives its inotify instance back. Before, every dropped handle kept one until
/// the next write in its directory, and a process that opened stores one after another (a
/// soak's runs) used up the machine's instances, so that new agents could not watch their
/// sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_store_gives_its_inotify_instance_back() {
    let before = inotify_instances();
    for _ in 0..40 {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("rota.db"))
            .await
            .expect("open store");
        store.set_concurrency(2).await.expect("a write");
        drop(store);
    }
    let mut held = inotify_instances();
    for _ in 0..100 {
        if held <= before + 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        held = inotify_instances();
    }
    assert!(
        held <= before + 1,
        "{held} inotify instances held, {before} before"
    );
}

/// A caller that gives up drops its store call wherever it is, also inside sqlx's `begin`,
/// which is not cancel-safe: the connection must not serve the next call from inside a
/// transaction (every later write on it failed, and its write lock held the others off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_dropped_halfway_leave_no_connection_inside_a_transaction() {
    let store = make().await;
    let node = rota_core::NodeName::new("node-a").expect("name");
    let session = store
        .open_session(&node, std::time::Duration::from_secs(60))
        .await
        .expect("session");
    for i in 0..3000u64 {
        // Deadlines from 0 to 1 ms: some fall inside `begin`, some inside the write.
        let deadline = std::time::Duration::from_micros((i * 37) % 1000);
        let _ = tokio::time::timeout(
            deadline,
            store.heartbeat(&session, std::time::Duration::from_secs(60)),
        )
        .await;
    }
    for _ in 0..16 {
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            store.heartbeat(&session, std::time::Duration::from_secs(60)),
        )
        .await
        .expect("a write after the dropped ones is not held off")
        .expect("a write after the dropped ones succeeds");
    }
}
