//! `--etcd-metrics URL`: what etcd wrote during each phase of a Kubernetes run, from etcd's own
//! counters (`/metrics` on its client or metrics URL): the bytes it appended to its write-ahead
//! log, and the keys it stored with their size where it reports them.
//!
//! etcd counts everything it writes, not only what rota's agents caused: kwok's node
//! heartbeats, the API server's own leases, other users of the cluster. So the run first
//! counts a baseline, as long as the idle phase (or [`BASELINE_WITHOUT_IDLE`]), after its Nodes
//! are ready and before any agent starts, and every phase reports what etcd wrote above the
//! baseline's rate besides what it wrote in all.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::{Error, Result, error_chain};

/// The baseline's length when the run has no idle phase.
pub(crate) const BASELINE_WITHOUT_IDLE: Duration = Duration::from_secs(10);
/// How long one read of the metrics may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Reads of the metrics in a row before a failure ends the run.
const READ_ATTEMPTS: u32 = 3;

/// Bytes appended to the write-ahead log: every write's cost on disk, whatever its kind.
const WAL_BYTES: &str = "etcd_disk_wal_write_bytes_total";
/// Keys stored (a create or an update of one object each).
const PUTS: &str = "etcd_mvcc_put_total";
/// The size of the keys and values stored.
const PUT_BYTES: &str = "etcd_debugging_mvcc_total_put_size_in_bytes";

/// What the JSON says about where the figures come from.
const NOTE: &str = "etcd's own counters (write-ahead log bytes, keys stored): everything etcd \
    wrote, kwok's node heartbeats and the cluster's other writers included; over_baseline_bytes \
    is what it wrote above the baseline's rate, counted before any agent started";

/// etcd's metrics endpoint.
pub(crate) struct Etcd {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The URL as given, for messages.
    given: String,
}

/// etcd's counters at one moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EtcdCounts {
    at: Instant,
    wal_bytes: u64,
    puts: Option<u64>,
    put_bytes: Option<u64>,
}

impl Etcd {
    /// The metrics of the etcd at `given` (`http(s)://HOST:PORT`, its `/metrics` read, or the
    /// metrics URL itself), refused unless it answers with etcd's metrics.
    pub(crate) async fn connect(given: &str) -> Result<Etcd> {
        let invalid = |reason: String| Error::EtcdMetrics {
            url: given.to_owned(),
            reason,
        };
        let mut url = reqwest::Url::parse(given)
            .map_err(|e| invalid(format!("{e}; expected http(s)://HOST:PORT")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(invalid("expected http(s)://HOST:PORT".into()));
        }
        if !url.path().ends_with("/metrics") {
            let path = format!("{}/metrics", url.path().trim_end_matches('/'));
            url.set_path(&path);
        }
        let client = reqwest::Client::builder()
            .timeout(READ_TIMEOUT)
            .build()
            .map_err(|e| invalid(format!("an HTTP client: {e}")))?;
        let etcd = Etcd {
            client,
            url,
            given: given.to_owned(),
        };
        etcd.read_once().await?;
        Ok(etcd)
    }

    /// The counters now; a failed read is tried again a few times before it ends the run.
    pub(crate) async fn read(&self) -> Result<EtcdCounts> {
        let mut attempt = 1;
        loop {
            match self.read_once().await {
                Err(e) if attempt < READ_ATTEMPTS => {
                    tracing::warn!(error = %e, "reading etcd's metrics again");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                read => return read,
            }
        }
    }

    async fn read_once(&self) -> Result<EtcdCounts> {
        let failed = |reason: String| Error::EtcdMetrics {
            url: self.given.clone(),
            reason,
        };
        let response = self
            .client
            .get(self.url.clone())
            .send()
            .await
            .map_err(|e| failed(format!("reading {}: {}", self.url, error_chain(&e))))?;
        if !response.status().is_success() {
            return Err(failed(format!(
                "{} answered {}",
                self.url,
                response.status()
            )));
        }
        let text = response
            .text()
            .await
            .map_err(|e| failed(format!("reading {}: {}", self.url, error_chain(&e))))?;
        let at = Instant::now();
        let wal_bytes = metric(&text, WAL_BYTES).ok_or_else(|| {
            failed(format!(
                "{} is not etcd's metrics: it has no {WAL_BYTES}",
                self.url
            ))
        })?;
        Ok(EtcdCounts {
            at,
            wal_bytes,
            puts: metric(&text, PUTS),
            put_bytes: metric(&text, PUT_BYTES),
        })
    }
}

/// The sum of every series of `name` in Prometheus's text format, if it has any.
fn metric(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split_whitespace();
        let (Some(series), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        if series.split('{').next() != Some(name) {
            continue;
        }
        if let Ok(value) = value.parse::<f64>()
            && value.is_finite()
            && value >= 0.0
        {
            // Counters of bytes and keys are whole numbers, printed as floats at most.
            *found.get_or_insert(0) += value.round() as u64;
        }
    }
    found
}

/// What etcd wrote in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct EtcdPhase {
    pub seconds: f64,
    /// Bytes appended to etcd's write-ahead log.
    pub wal_bytes: u64,
    pub wal_bytes_per_second: f64,
    /// Keys stored, if etcd reports them (`etcd_mvcc_put_total`).
    pub puts: Option<u64>,
    /// Their size, if etcd reports it (`etcd_debugging_mvcc_total_put_size_in_bytes`).
    pub put_bytes: Option<u64>,
    /// `wal_bytes` less what etcd wrote at the baseline's rate in as long; can be below 0
    /// when the rest of the cluster wrote less than in the baseline. Absent in the baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_baseline_bytes: Option<f64>,
}

impl EtcdPhase {
    fn between(before: &EtcdCounts, after: &EtcdCounts, baseline: Option<&EtcdPhase>) -> Self {
        let seconds = after.at.duration_since(before.at).as_secs_f64();
        let wal_bytes = after.wal_bytes.saturating_sub(before.wal_bytes);
        let delta = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.saturating_sub(b));
        EtcdPhase {
            seconds,
            wal_bytes,
            wal_bytes_per_second: per_second(wal_bytes as f64, seconds),
            puts: delta(after.puts, before.puts),
            put_bytes: delta(after.put_bytes, before.put_bytes),
            over_baseline_bytes: baseline
                .map(|b| wal_bytes as f64 - b.wal_bytes_per_second * seconds),
        }
    }
}

fn per_second(amount: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { amount / seconds } else { 0.0 }
}

/// What etcd wrote during a run (`--etcd-metrics`).
#[derive(Clone, Debug, Serialize)]
pub struct EtcdSummary {
    /// Where the figures come from, and what they include.
    pub note: &'static str,
    /// Before any agent started, the run's Nodes and pods ready.
    pub baseline: EtcdPhase,
    /// While every agent was idle (`--idle`), if there was such a phase.
    pub idle: Option<EtcdPhase>,
    /// The idle phase's `over_baseline_bytes` per node and hour.
    pub idle_over_baseline_per_node_hour: Option<f64>,
    /// From the sentinels to the end of the rollout.
    pub rollout: EtcdPhase,
    /// The rollout's `over_baseline_bytes` per node (one window each in a clean rollout).
    pub rollout_over_baseline_per_window: f64,
}

/// The phases of one run as they are counted.
pub(crate) struct EtcdRun {
    etcd: Etcd,
    baseline: EtcdPhase,
    idle: Option<EtcdPhase>,
}

impl EtcdRun {
    /// Counts the baseline: `length` with the run's Nodes ready and no agent started.
    pub(crate) async fn baseline(etcd: Etcd, length: Duration) -> Result<EtcdRun> {
        let before = etcd.read().await?;
        tokio::time::sleep(length).await;
        let after = etcd.read().await?;
        Ok(EtcdRun {
            baseline: EtcdPhase::between(&before, &after, None),
            etcd,
            idle: None,
        })
    }

    /// The counters at the start of a phase.
    pub(crate) async fn mark(&self) -> Result<EtcdCounts> {
        self.etcd.read().await
    }

    /// Ends the idle phase begun at `before`.
    pub(crate) async fn end_idle(&mut self, before: &EtcdCounts) -> Result<()> {
        let after = self.etcd.read().await?;
        self.idle = Some(EtcdPhase::between(before, &after, Some(&self.baseline)));
        Ok(())
    }

    /// Ends the rollout begun at `before`, on `nodes` nodes.
    pub(crate) async fn end_rollout(
        self,
        before: &EtcdCounts,
        nodes: usize,
    ) -> Result<EtcdSummary> {
        let after = self.etcd.read().await?;
        let rollout = EtcdPhase::between(before, &after, Some(&self.baseline));
        let per_node_hour = |phase: &EtcdPhase| {
            let node_hours = nodes as f64 * phase.seconds / 3600.0;
            per_second(phase.over_baseline_bytes.unwrap_or(0.0), node_hours)
        };
        Ok(EtcdSummary {
            note: NOTE,
            idle_over_baseline_per_node_hour: self.idle.as_ref().map(per_node_hour),
            rollout_over_baseline_per_window: rollout.over_baseline_bytes.unwrap_or(0.0)
                / nodes.max(1) as f64,
            baseline: self.baseline,
            idle: self.idle,
            rollout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_is_the_sum_of_its_series_and_absent_when_not_served() {
        let text = "# HELP etcd_disk_wal_write_bytes_total Total number of bytes written in WAL.\n\
                    # TYPE etcd_disk_wal_write_bytes_total gauge\n\
                    etcd_disk_wal_write_bytes_total 220120\n\
                    etcd_disk_wal_write_bytes_total_other 5\n\
                    etcd_mvcc_put_total{member=\"a\"} 2.5e+02\n\
                    etcd_mvcc_put_total{member=\"b\"} 7\n";
        assert_eq!(metric(text, WAL_BYTES), Some(220_120));
        assert_eq!(
            metric(text, PUTS),
            Some(257),
            "both series, floats included"
        );
        assert_eq!(metric(text, PUT_BYTES), None);
    }

    #[test]
    fn a_phase_counts_what_etcd_wrote_above_the_baselines_rate() {
        let start = Instant::now();
        let counts = |s: u64, wal_bytes: u64| EtcdCounts {
            at: start + Duration::from_secs(s),
            wal_bytes,
            puts: Some(wal_bytes / 100),
            put_bytes: None,
        };
        let baseline = EtcdPhase::between(&counts(0, 1_000), &counts(10, 2_000), None);
        assert_eq!(baseline.wal_bytes_per_second, 100.0);
        assert_eq!(baseline.over_baseline_bytes, None);
        let phase = EtcdPhase::between(&counts(10, 2_000), &counts(30, 7_000), Some(&baseline));
        assert_eq!(phase.wal_bytes, 5_000);
        assert_eq!(phase.puts, Some(50));
        assert_eq!(phase.put_bytes, None);
        assert_eq!(
            phase.over_baseline_bytes,
            Some(3_000.0),
            "20 s at 100 B/s is background"
        );
    }
}
