//! `--handle-per-agent` on PostgreSQL: what the server counted for the agents' own handles, from
//! its own statistics, as `scripts/pg-fleet` reads them for separate agent processes: their
//! connections (`pg_stat_activity`), transactions (`pg_stat_database`) and statements
//! (`pg_stat_statements`, where the server has it).
//!
//! The agents' handles name themselves [`AGENT_APPLICATION`], so that their connections can be
//! told from the harness's own. The observer reads on one connection of its own to another
//! database of the same server (`rota_stats`, where `scripts/postgres-up` keeps
//! `pg_stat_statements`, or else `postgres`), so that its reads are not counted as the
//! simulation database's. The harness's own reads of the store during the rollout are counted
//! by the harness and taken off.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection as _, PgConnection};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{Error, Result};

/// The `application_name` of the agents' own connections.
pub(crate) const AGENT_APPLICATION: &str = "rota-simulate-agent";
const OBSERVER_APPLICATION: &str = "rota-simulate-observer";
/// Where the observer connects, in this order: never the simulation's database.
const OBSERVER_DATABASES: [&str; 2] = ["rota_stats", "postgres"];
/// PostgreSQL counts a backend's transactions when it reports its statistics, which an idle
/// backend does up to 10 s after its last transaction: counts read sooner miss some.
pub(crate) const STATISTICS_DELAY: Duration = Duration::from_secs(11);
/// How often the agents' connections are counted for a phase's peak.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

const NOTE: &str = "PostgreSQL's own statistics for the simulation's database: the agents' \
    connections (application_name rota-simulate-agent) from pg_stat_activity, sampled every \
    0.5 s; transactions (xact_commit + xact_rollback) from pg_stat_database and statements \
    (calls) from pg_stat_statements, both less the harness's own reads of the store \
    (harness_statements, one statement each). An idle backend reports its transactions up to \
    10 s late: the idle phase begins 11 s after every agent started, and the rollout is counted \
    until 11 s after its end, idle agents' statements of those seconds included";

/// `url` with the agents' `application_name` (after any the URL has, so that it wins).
pub(crate) fn agents_url(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}application_name={AGENT_APPLICATION}")
}

/// The observer's connection, with a task that counts the agents' connections for the peak.
pub(crate) struct PgObserver {
    connection: Arc<Mutex<PgConnection>>,
    database: Arc<str>,
    observer_database: &'static str,
    /// Why statements are not counted, if they are not.
    statements: std::result::Result<(), String>,
    peak: Arc<AtomicU64>,
    sampler: JoinHandle<()>,
}

impl Drop for PgObserver {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// The server's counts at one moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PgCounts {
    at: Instant,
    connections: u64,
    transactions: u64,
    statements: Option<u64>,
}

fn failed(what: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| Error::PgStatistics(format!("{what}: {e}"))
}

impl PgObserver {
    /// Connects to the server of `url` (the simulation's store) to count what its database
    /// serves.
    pub(crate) async fn connect(url: &str) -> Result<PgObserver> {
        let options = PgConnectOptions::from_str(url).map_err(failed("the store's URL"))?;
        let database: Arc<str> = options
            .get_database()
            .unwrap_or(options.get_username())
            .into();
        let mut tried = Vec::new();
        for candidate in OBSERVER_DATABASES {
            if candidate == &*database {
                continue;
            }
            let observer = options
                .clone()
                .database(candidate)
                .application_name(OBSERVER_APPLICATION);
            match PgConnection::connect_with(&observer).await {
                Ok(connection) => {
                    return PgObserver::start(connection, database, candidate).await;
                }
                Err(e) => tried.push(format!("database {candidate}: {e}")),
            }
        }
        Err(Error::PgStatistics(format!(
            "the observer reads them from another database of the server than the \
             simulation's, and could connect to none ({})",
            tried.join("; ")
        )))
    }

    async fn start(
        mut connection: PgConnection,
        database: Arc<str>,
        observer_database: &'static str,
    ) -> Result<PgObserver> {
        let installed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'",
        )
        .fetch_one(&mut connection)
        .await
        .map_err(failed("looking for pg_stat_statements"))?;
        let statements = if installed == 0 {
            Err(format!(
                "pg_stat_statements is not installed in database {observer_database}"
            ))
        } else {
            statement_calls(&mut connection, &database)
                .await
                .map(|_| ())
                .map_err(|e| format!("reading pg_stat_statements: {e}"))
        };
        let peak = Arc::new(AtomicU64::new(0));
        let connection = Arc::new(Mutex::new(connection));
        let sampler = tokio::spawn(sample_peak(
            connection.clone(),
            database.clone(),
            peak.clone(),
        ));
        Ok(PgObserver {
            connection,
            database,
            observer_database,
            statements,
            peak,
            sampler,
        })
    }

    /// The counts now, which begin a phase: its peak of connections starts from here.
    pub(crate) async fn mark(&self) -> Result<PgCounts> {
        let counts = self.read().await?;
        self.peak.store(counts.connections, Ordering::Relaxed);
        Ok(counts)
    }

    /// The phase begun at `before`, ending now, in which the harness made `harness_statements`
    /// reads of the store itself, by `agents` agents.
    pub(crate) async fn phase(
        &self,
        before: &PgCounts,
        harness_statements: u64,
        agents: usize,
    ) -> Result<PostgresPhase> {
        let after = self.read().await?;
        let peak = self
            .peak
            .fetch_max(after.connections, Ordering::Relaxed)
            .max(after.connections);
        let seconds = after.at.duration_since(before.at).as_secs_f64();
        let agents_own = |after: u64, before: u64| {
            after
                .saturating_sub(before)
                .saturating_sub(harness_statements)
        };
        let transactions = agents_own(after.transactions, before.transactions);
        let statements = after
            .statements
            .zip(before.statements)
            .map(|(after, before)| agents_own(after, before));
        let per_agent_second = |n: u64| {
            let agent_seconds = agents as f64 * seconds;
            if agent_seconds > 0.0 {
                n as f64 / agent_seconds
            } else {
                0.0
            }
        };
        Ok(PostgresPhase {
            seconds,
            connections_peak: peak,
            connections_end: after.connections,
            transactions,
            statements,
            harness_statements,
            transactions_per_agent_second: per_agent_second(transactions),
            statements_per_agent_second: statements.map(per_agent_second),
        })
    }

    /// The summary of the run's phases, on `nodes` nodes.
    pub(crate) fn summary(
        &self,
        idle: Option<PostgresPhase>,
        rollout: PostgresPhase,
        nodes: usize,
    ) -> PostgresSummary {
        let per_window = |n: u64| n as f64 / nodes.max(1) as f64;
        PostgresSummary {
            note: NOTE,
            database: self.database.to_string(),
            observer_database: self.observer_database,
            statements_unavailable: self.statements.clone().err(),
            rollout_transactions_per_window: per_window(rollout.transactions),
            rollout_statements_per_window: rollout.statements.map(per_window),
            idle,
            rollout,
        }
    }

    async fn read(&self) -> Result<PgCounts> {
        let mut connection = self.connection.lock().await;
        let connections = agent_connections(&mut connection, &self.database)
            .await
            .map_err(failed("counting the agents' connections"))?;
        let transactions: Option<i64> = sqlx::query_scalar(
            "SELECT (xact_commit + xact_rollback)::BIGINT FROM pg_stat_database \
             WHERE datname = $1",
        )
        .bind(&*self.database)
        .fetch_optional(&mut *connection)
        .await
        .map_err(failed("reading pg_stat_database"))?;
        let transactions = transactions.ok_or_else(|| {
            Error::PgStatistics(format!(
                "pg_stat_database has no database {}",
                self.database
            ))
        })?;
        let statements = match self.statements {
            Ok(()) => Some(
                statement_calls(&mut connection, &self.database)
                    .await
                    .map_err(failed("reading pg_stat_statements"))?,
            ),
            Err(_) => None,
        };
        Ok(PgCounts {
            at: Instant::now(),
            connections,
            transactions: u64::try_from(transactions).unwrap_or(0),
            statements,
        })
    }
}

async fn agent_connections(connection: &mut PgConnection, database: &str) -> sqlx::Result<u64> {
    let count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
    )
    .bind(database)
    .bind(AGENT_APPLICATION)
    .fetch_one(connection)
    .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

async fn statement_calls(connection: &mut PgConnection, database: &str) -> sqlx::Result<u64> {
    let calls: i64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(calls), 0)::BIGINT FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)",
    )
    .bind(database)
    .fetch_one(connection)
    .await?;
    Ok(u64::try_from(calls).unwrap_or(0))
}

/// Counts the agents' connections every [`SAMPLE_EVERY`] into `peak`, until aborted.
async fn sample_peak(
    connection: Arc<Mutex<PgConnection>>,
    database: Arc<str>,
    peak: Arc<AtomicU64>,
) {
    loop {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let counted = agent_connections(&mut *connection.lock().await, &database).await;
        match counted {
            Ok(now) => {
                peak.fetch_max(now, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(error = %e, "counting the agents' connections"),
        }
    }
}

/// What PostgreSQL counted for the agents in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct PostgresPhase {
    pub seconds: f64,
    /// Most connections of the agents' handles at once.
    pub connections_peak: u64,
    /// The agents' connections at the phase's end.
    pub connections_end: u64,
    /// Transactions in the simulation's database, less the harness's statements.
    pub transactions: u64,
    /// Statements (`pg_stat_statements` calls), less the harness's; absent without the view.
    pub statements: Option<u64>,
    /// The harness's own reads of the store in the phase, taken off the counts above.
    pub harness_statements: u64,
    pub transactions_per_agent_second: f64,
    pub statements_per_agent_second: Option<f64>,
}

/// What PostgreSQL counted for the agents' own handles (`--handle-per-agent`).
#[derive(Clone, Debug, Serialize)]
pub struct PostgresSummary {
    /// Where the figures come from, and what they include.
    pub note: &'static str,
    /// The simulation's database.
    pub database: String,
    /// The database the observer read the statistics from.
    pub observer_database: &'static str,
    /// Why there are no statement counts, if there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statements_unavailable: Option<String>,
    /// While every agent was idle (`--idle`), if there was such a phase.
    pub idle: Option<PostgresPhase>,
    /// From the sentinels to the end of the rollout, and [`STATISTICS_DELAY`] more.
    pub rollout: PostgresPhase,
    /// The rollout's transactions per node (one window each in a clean rollout).
    pub rollout_transactions_per_window: f64,
    pub rollout_statements_per_window: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_connections_bear_their_name_whatever_the_url_says() {
        for url in [
            "postgres://rota@db/rota",
            "postgres://rota@db/rota?sslmode=disable&application_name=mine",
        ] {
            let parsed = PgConnectOptions::from_str(&agents_url(url)).expect("a URL");
            assert_eq!(
                parsed.get_application_name(),
                Some(AGENT_APPLICATION),
                "{url}"
            );
            assert_eq!(parsed.get_database(), Some("rota"), "{url}");
        }
    }
}
