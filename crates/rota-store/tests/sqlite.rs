//! The store conformance suite against the embedded SQLite store, plus SQLite-only cases.

use std::sync::Arc;

use rota_store::{SqliteStore, Store, StoreUrl};

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
