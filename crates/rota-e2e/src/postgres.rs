//! A throwaway PostgreSQL database per test, on the server named by `ROTA_TEST_POSTGRES_URL`
//! (which `scripts/test` starts with `scripts/postgres-up`). Without that variable the tests
//! that need one fail, unless `ROTA_POSTGRES_SKIP=1` says that skipping them is intended.

use std::sync::atomic::{AtomicU64, Ordering};

use rota_store::now_millis;

fn server_url() -> Option<String> {
    match std::env::var("ROTA_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("ROTA_POSTGRES_SKIP").as_deref() == Ok("1") => {
            eprintln!("skipped: ROTA_POSTGRES_SKIP=1 and no ROTA_TEST_POSTGRES_URL");
            None
        }
        _ => panic!(
            "ROTA_TEST_POSTGRES_URL is not set: run the tests with scripts/test, or start a \
             server with `url=$(scripts/postgres-up | tail -n 1)` and export \
             ROTA_TEST_POSTGRES_URL=$url (set ROTA_POSTGRES_SKIP=1 to skip these tests on purpose)"
        ),
    }
}

/// The server's URL with another database name.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let (server, _) = base
        .rsplit_once('/')
        .filter(|(server, _)| server.contains("://") && !server.ends_with('/'))
        .unwrap_or((base, ""));
    format!("{server}/{name}{query}")
}

/// Creates an empty database for one test and returns its URL.
pub async fn fresh_database() -> Option<String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let url = server_url()?;
    let name = format!(
        "rota_t_{}_{}_{}",
        std::process::id(),
        now_millis(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let admin = sqlx::PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connecting to ROTA_TEST_POSTGRES_URL {url}: {e}"));
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .expect("create a test database");
    admin.close().await;
    Some(with_database(&url, &name))
}

/// The URL with another user: `scheme://[user[:password]@]host…` becomes `scheme://user@host…`.
pub fn with_user(url: &str, user: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let host = match rest.split_once('/') {
        Some((authority, _)) => match authority.rsplit_once('@') {
            Some((_, host)) => &rest[authority.len() - host.len()..],
            None => rest,
        },
        None => rest.rsplit_once('@').map_or(rest, |(_, host)| host),
    };
    format!("{scheme}://{user}@{host}")
}

/// A fresh database (see [`fresh_database`]) owned by a login role of its own, which the test
/// server's role `rota` (see `scripts/postgres-up`) can limit: returns `rota`'s URL of the
/// database, the new role's URL of it, and the new role's name.
pub async fn database_with_own_role() -> Option<(String, String, String)> {
    let url = fresh_database().await?;
    let admin = sqlx::PgPool::connect(&url).await.expect("connect");
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&admin)
        .await
        .expect("the database's name");
    admin.close().await;
    let role = format!("{database}_role");
    execute(
        &url,
        &[
            format!("CREATE ROLE {role} LOGIN"),
            // Only a member of a role may give it a database.
            format!("GRANT {role} TO CURRENT_USER"),
            format!("ALTER DATABASE {database} OWNER TO {role}"),
        ],
    )
    .await;
    let own = with_user(&url, &role);
    Some((url, own, role))
}

/// Makes the server refuse every new connection of `role` (a connection limit of 0) and ends
/// its connections, as a server that has reached its `max_connections` refuses a client; `url`
/// is of a role that may alter `role` and end its connections (see [`database_with_own_role`]).
pub async fn refuse_role(url: &str, role: &str) {
    execute(
        url,
        &[
            format!("ALTER ROLE {role} CONNECTION LIMIT 0"),
            format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
            ),
        ],
    )
    .await;
}

/// Lifts [`refuse_role`]'s limit.
pub async fn admit_role(url: &str, role: &str) {
    execute(url, &[format!("ALTER ROLE {role} CONNECTION LIMIT -1")]).await;
}

/// Runs `statements` one by one on a connection of its own to `url`.
pub async fn execute(url: &str, statements: &[String]) {
    let admin = sqlx::PgPool::connect(url).await.expect("connect");
    for statement in statements {
        sqlx::query(statement)
            .execute(&admin)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    admin.close().await;
}

/// Ends every connection to `url`'s database but the caller's, as a restart of the server
/// does; returns how many were ended.
pub async fn end_connections(url: &str) -> i64 {
    let admin = sqlx::PgPool::connect(url).await.expect("connect");
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
    )
    .fetch_one(&admin)
    .await
    .expect("end the store's connections");
    admin.close().await;
    ended
}

#[cfg(test)]
mod tests {
    use super::{with_database, with_user};

    #[test]
    fn another_user_replaces_only_the_user() {
        assert_eq!(
            with_user("postgres://rota@127.0.0.1:5432/rota", "r"),
            "postgres://r@127.0.0.1:5432/rota"
        );
        assert_eq!(
            with_user("postgres://a:b@h/db?x=@", "r"),
            "postgres://r@h/db?x=@"
        );
        assert_eq!(with_user("postgres://h:1/db", "r"), "postgres://r@h:1/db");
    }

    #[test]
    fn test_databases_replace_only_the_database_name() {
        assert_eq!(
            with_database("postgres://rota@127.0.0.1:5432/rota", "x"),
            "postgres://rota@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://rota@h/rota?sslmode=disable", "x"),
            "postgres://rota@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    }
}
