//! [`PrometheusBlocker`]: the alerts Prometheus reports as active (`GET /api/v1/alerts`).

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;
use reqwest::Url;
use serde::Deserialize;
use tracing::debug;

use crate::blocker::{Block, BlockKind, Blocker};
use crate::error::{ConfigError, QueryError};

/// How long one question to Prometheus may take before it counts as unreachable.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Which active alerts block, as kured's flags choose them.
#[derive(Clone, Debug, Default)]
pub struct AlertFilter {
    /// Alerts whose name matches are ignored (`--alert-filter-regexp`)...
    pub regexp: Option<Regex>,
    /// ...or, with this, only those block (`--alert-filter-match-only`).
    pub match_only: bool,
    /// Only firing alerts block, not pending ones (`--alert-firing-only`).
    pub firing_only: bool,
}

impl AlertFilter {
    /// The filter the flags describe; a malformed regular expression, or `match_only` without
    /// one, is refused naming the flag.
    pub fn new(
        regexp: Option<&str>,
        match_only: bool,
        firing_only: bool,
    ) -> Result<AlertFilter, ConfigError> {
        let regexp = regexp
            .map(|value| {
                Regex::new(value).map_err(|e| ConfigError::Invalid {
                    flag: "--alert-filter-regexp",
                    value: value.to_string(),
                    reason: format!("not a regular expression: {e}"),
                })
            })
            .transpose()?;
        if match_only && regexp.is_none() {
            return Err(ConfigError::Needs {
                flag: "--alert-filter-match-only",
                needs: "--alert-filter-regexp (the alerts it keeps)",
            });
        }
        Ok(AlertFilter {
            regexp,
            match_only,
            firing_only,
        })
    }

    /// Whether an active alert named `name` in `state` (`firing` or `pending`) blocks.
    pub fn blocks(&self, name: &str, state: &str) -> bool {
        if self.firing_only && state != "firing" {
            return false;
        }
        match &self.regexp {
            Some(regexp) => regexp.is_match(name) == self.match_only,
            None => true,
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<AlertList>,
}

#[derive(Deserialize)]
struct AlertList {
    alerts: Vec<Alert>,
}

#[derive(Deserialize)]
struct Alert {
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    state: String,
}

/// Blocks while Prometheus reports alerts that the filter keeps, and while it cannot be asked.
pub struct PrometheusBlocker {
    client: reqwest::Client,
    url: Url,
    alerts: Url,
    filter: AlertFilter,
}

impl PrometheusBlocker {
    /// A blocker asking the Prometheus at `url` (`--prometheus-url`: http or https, with a
    /// host; a path prefix is kept, as behind a proxy).
    pub fn new(url: &str, filter: AlertFilter) -> Result<PrometheusBlocker, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid {
            flag: "--prometheus-url",
            value: url.to_string(),
            reason,
        };
        let parsed = Url::parse(url).map_err(|e| invalid(format!("not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "the scheme must be http or https, not {}",
                parsed.scheme()
            )));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(invalid("the URL has no host".into()));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(invalid(
                "give Prometheus's base URL, without a query or fragment".into(),
            ));
        }
        let mut base = parsed.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let alerts = base
            .join("api/v1/alerts")
            .map_err(|e| invalid(e.to_string()))?;
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(ConfigError::Client)?;
        Ok(PrometheusBlocker {
            client,
            url: parsed,
            alerts,
            filter,
        })
    }

    /// The names of the active alerts that block, sorted and without repeats.
    pub async fn blocking_alerts(&self) -> Result<Vec<String>, QueryError> {
        let response = self
            .client
            .get(self.alerts.clone())
            .send()
            .await
            .map_err(|e| QueryError::Request(e.without_url()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(QueryError::Status { status });
        }
        let answer: Answer = response
            .json()
            .await
            .map_err(|e| QueryError::Body(e.without_url()))?;
        let Some(data) = answer.data.filter(|_| answer.status == "success") else {
            return Err(QueryError::Failed {
                status: answer.status,
                error: answer.error.unwrap_or_default(),
            });
        };
        let names: BTreeSet<String> = data
            .alerts
            .into_iter()
            .filter_map(|alert| {
                let name = alert.labels.get("alertname").cloned().unwrap_or_default();
                self.filter.blocks(&name, &alert.state).then_some(name)
            })
            .collect();
        Ok(names.into_iter().collect())
    }
}

#[async_trait]
impl Blocker for PrometheusBlocker {
    async fn blocks(&self) -> Vec<Block> {
        match self.blocking_alerts().await {
            Ok(names) if names.is_empty() => Vec::new(),
            Ok(names) => vec![Block {
                kind: BlockKind::Alert,
                reason: format!(
                    "alerts active in prometheus at {}: {}",
                    self.url,
                    names.join(", ")
                ),
            }],
            Err(e) => {
                debug!(url = %self.url, error = %e, "prometheus could not be asked");
                vec![Block {
                    kind: BlockKind::PrometheusUnreachable,
                    reason: format!("prometheus at {} unreachable: {e}", self.url),
                }]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(regexp: Option<&str>, match_only: bool, firing_only: bool) -> AlertFilter {
        AlertFilter::new(regexp, match_only, firing_only).expect("valid filter")
    }

    #[test]
    fn the_filter_ignores_matching_alerts_or_keeps_only_them() {
        let all = filter(None, false, false);
        assert!(all.blocks("Watchdog", "firing") && all.blocks("Watchdog", "pending"));
        let ignore = filter(Some("^(Watchdog|InfoInhibitor)$"), false, false);
        assert!(!ignore.blocks("Watchdog", "firing"));
        assert!(ignore.blocks("NodeDown", "firing"));
        let only = filter(Some("^Node"), true, false);
        assert!(only.blocks("NodeDown", "firing"));
        assert!(!only.blocks("Watchdog", "firing"));
        let firing = filter(None, false, true);
        assert!(firing.blocks("NodeDown", "firing"));
        assert!(!firing.blocks("NodeDown", "pending"));
    }

    #[test]
    fn bad_filters_name_the_flag_and_the_value() {
        let error = AlertFilter::new(Some("(unclosed"), false, false)
            .expect_err("a malformed regular expression is refused")
            .to_string();
        assert!(
            error.starts_with("--alert-filter-regexp \"(unclosed\": not a regular expression"),
            "{error}"
        );
        let error = AlertFilter::new(None, true, false)
            .expect_err("match-only without a regexp is refused")
            .to_string();
        assert!(error.starts_with("--alert-filter-match-only needs --alert-filter-regexp"));
    }

    #[test]
    fn bad_urls_name_the_flag_and_the_value() {
        for (url, why) in [
            ("prometheus:9090", "the scheme must be http or https"),
            ("ftp://prometheus:9090", "the scheme must be http or https"),
            ("not a url", "not a URL"),
            ("http://prom:9090/?x=1", "without a query"),
        ] {
            let error = match PrometheusBlocker::new(url, AlertFilter::default()) {
                Ok(_) => panic!("{url} was accepted"),
                Err(e) => e.to_string(),
            };
            assert!(
                error.starts_with(&format!("--prometheus-url {url:?}: ")) && error.contains(why),
                "{url}: {error}"
            );
        }
    }

    #[test]
    fn a_path_prefix_is_kept() {
        let blocker =
            PrometheusBlocker::new("http://proxy:8080/prometheus", AlertFilter::default())
                .expect("valid URL");
        assert_eq!(
            blocker.alerts.as_str(),
            "http://proxy:8080/prometheus/api/v1/alerts"
        );
    }
}
