//! The stores' own counters around a run's phases: etcd's (`--etcd-metrics`, see `etcd`) and
//! PostgreSQL's (`--handle-per-agent` on PostgreSQL, see `postgres_counters`). The harness
//! marks where each phase begins and ends; this module reads the counters there.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::etcd::{BASELINE_WITHOUT_IDLE, Etcd, EtcdCounts, EtcdRun, EtcdSummary};
use crate::postgres_counters::{
    PgCounts, PgObserver, PostgresPhase, PostgresSummary, STATISTICS_DELAY,
};
use crate::{Error, Result};

/// The counters a run reads, as far as it has them.
pub(crate) struct StoreCounters {
    /// Until its baseline is counted; then `etcd_run`.
    etcd: Option<Etcd>,
    etcd_run: Option<EtcdRun>,
    postgres: Option<PgObserver>,
    postgres_idle: Option<PostgresPhase>,
}

/// The counters where a phase began.
pub(crate) struct Marks {
    etcd: Option<EtcdCounts>,
    postgres: Option<PgCounts>,
}

/// What the counters said about a run.
#[derive(Default)]
pub(crate) struct Counted {
    pub(crate) etcd: Option<EtcdSummary>,
    pub(crate) postgres: Option<PostgresSummary>,
}

async fn unless_interrupted(interrupt: &CancellationToken, wait: Duration) -> Result<()> {
    tokio::select! {
        () = interrupt.cancelled() => Err(Error::Interrupted),
        () = tokio::time::sleep(wait) => Ok(()),
    }
}

impl StoreCounters {
    pub(crate) fn new(etcd: Option<Etcd>, postgres: Option<PgObserver>) -> StoreCounters {
        StoreCounters {
            etcd,
            etcd_run: None,
            postgres,
            postgres_idle: None,
        }
    }

    /// Before any agent starts: etcd's baseline, as long as the idle phase will be.
    pub(crate) async fn before_agents(
        &mut self,
        idle: Duration,
        interrupt: &CancellationToken,
    ) -> Result<()> {
        if let Some(etcd) = self.etcd.take() {
            let length = if idle.is_zero() {
                BASELINE_WITHOUT_IDLE
            } else {
                idle
            };
            tokio::select! {
                () = interrupt.cancelled() => return Err(Error::Interrupted),
                run = EtcdRun::baseline(etcd, length) => self.etcd_run = Some(run?),
            }
        }
        Ok(())
    }

    /// Once every agent has started: PostgreSQL has counted their starts after a while, and
    /// the first phase must not count them.
    pub(crate) async fn after_start(&self, interrupt: &CancellationToken) -> Result<()> {
        if self.postgres.is_some() {
            unless_interrupted(interrupt, STATISTICS_DELAY).await?;
        }
        Ok(())
    }

    /// The counters now, where a phase begins.
    pub(crate) async fn mark(&self) -> Result<Marks> {
        Ok(Marks {
            etcd: match &self.etcd_run {
                Some(run) => Some(run.mark().await?),
                None => None,
            },
            postgres: match &self.postgres {
                Some(observer) => Some(observer.mark().await?),
                None => None,
            },
        })
    }

    /// Ends the idle phase begun at `marks`, in which the harness did not read the store.
    pub(crate) async fn end_idle(&mut self, marks: &Marks, agents: usize) -> Result<()> {
        if let (Some(run), Some(before)) = (&mut self.etcd_run, &marks.etcd) {
            run.end_idle(before).await?;
        }
        if let (Some(observer), Some(before)) = (&self.postgres, &marks.postgres) {
            self.postgres_idle = Some(observer.phase(before, 0, agents).await?);
        }
        Ok(())
    }

    /// Ends the rollout begun at `marks`, in which the harness read the store
    /// `harness_statements` times; PostgreSQL's counts are read once it has counted the
    /// rollout's last transactions.
    pub(crate) async fn end_rollout(
        self,
        marks: &Marks,
        harness_statements: u64,
        nodes: usize,
        interrupt: &CancellationToken,
    ) -> Result<Counted> {
        let mut counted = Counted::default();
        if let (Some(run), Some(before)) = (self.etcd_run, &marks.etcd) {
            counted.etcd = Some(run.end_rollout(before, nodes).await?);
        }
        if let (Some(observer), Some(before)) = (&self.postgres, &marks.postgres) {
            unless_interrupted(interrupt, STATISTICS_DELAY).await?;
            let rollout = observer.phase(before, harness_statements, nodes).await?;
            counted.postgres = Some(observer.summary(self.postgres_idle, rollout, nodes));
        }
        Ok(counted)
    }
}
