//! `rota bench --workload fleetlock`: a FleetLock server (`rota fleetlock`'s, in this process,
//! on the bench's store) asked `pre-reboot` by many simulated Fedora CoreOS hosts, each request
//! exactly as Zincati sends it, at a fixed rate: the load is open-loop, every request sent when
//! it is due whether or not the earlier ones were answered, and its latency counted from when
//! it was due, so that a slow server cannot slow the load down and hide its own delays
//! (coordinated omission).
//!
//! The hosts take their turns in order, `--hosts` of them, each asking every hosts/rate
//! seconds. A host is drained at once (there is no drain command); with `--reboot-time` a
//! host answered 200 "reboots", calls `steady-state`, and asks no more. With `--warm-up`, every
//! host first asks once, a few at a time and unmeasured, and the measured load is the hosts'
//! later requests.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rota_fleetlock::protocol::PROTOCOL_HEADER;
use rota_fleetlock::{CommandPlatform, Config, Endpoint, Hosts, NameIds, Server};
use rota_store::{Store, StoreExt, StoreUrl};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::counted::{Call, Counted, Figures};
use crate::cli::BenchArgs;
use crate::output;

/// Zincati's group.
const GROUP: &str = "default";

/// When each request is due: request `i` at `i / rate` seconds from the start, from host
/// `i % hosts`; so every host asks once per round of `hosts` requests, every hosts/rate
/// seconds.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    hosts: usize,
    /// Requests a second.
    rate: u32,
}

impl Schedule {
    /// How long after the start request `i` is due.
    fn due(self, i: u64) -> Duration {
        let nanos = u128::from(i) * 1_000_000_000 / u128::from(self.rate);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The host (0-based) that sends request `i`.
    fn host(self, i: u64) -> usize {
        usize::try_from(i % self.hosts as u64).unwrap_or(0)
    }

    /// The round of request `i`: 0 for each host's first request, 1 for its second, …
    fn round(self, i: u64) -> u64 {
        i / self.hosts as u64
    }

    /// How many requests fall due within `length` of the start.
    fn requests_within(self, length: Duration) -> u64 {
        // due(i) < length ⇔ i · 10⁹ < length in ns · rate.
        let product = length.as_nanos() * u128::from(self.rate);
        u64::try_from(product.div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
    }
}

/// Zincati's body: its client parameters, in its fields' order, pretty-printed.
#[derive(Serialize)]
struct Body<'a> {
    client_params: ClientParams<'a>,
}

#[derive(Serialize)]
struct ClientParams<'a> {
    id: &'a str,
    group: &'a str,
}

fn body(id: &str) -> Result<String> {
    let body = Body {
        client_params: ClientParams { id, group: GROUP },
    };
    serde_json::to_string_pretty(&body).context("writing a request's body")
}

/// Host `i`'s id, the name of its node: `host-00001` for the first.
fn host_id(i: usize, hosts: usize) -> String {
    let width = hosts.to_string().len().max(5);
    format!("host-{:0width$}", i + 1)
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    /// An HTTP answer: its status, and the `kind` of an error body; its `value` too when the
    /// answer is wrong.
    Http {
        status: u16,
        kind: Option<String>,
        value: Option<String>,
    },
    /// No answer within `--request-timeout`.
    Timeout,
    /// No answer: the connection failed (the error's text).
    Transport(String),
}

impl Answer {
    /// The protocol's correct answers: 200, or a 409 refusal (the host asks again later).
    fn correct(&self) -> bool {
        matches!(
            self,
            Answer::Http {
                status: 200 | 409,
                ..
            }
        )
    }
}

#[derive(Clone, Debug)]
struct Sample {
    endpoint: Endpoint,
    /// The host's first request.
    first: bool,
    answer: Answer,
    /// From when it was due to its whole answer.
    latency: Duration,
}

/// The hosts, as the load's tasks share them.
struct Fleet {
    client: reqwest::Client,
    base: String,
    bodies: Vec<String>,
    timeout: Duration,
    reboot_time: Option<Duration>,
    /// Hosts answered 200 with `--reboot-time`: they reboot and ask no more.
    rebooted: Vec<AtomicBool>,
}

impl Fleet {
    async fn ask(&self, endpoint: Endpoint, host: usize) -> Answer {
        let path = match endpoint {
            Endpoint::PreReboot => "v1/pre-reboot",
            Endpoint::SteadyState => "v1/steady-state",
        };
        // As Zincati: POST, the protocol's header, no content type.
        let sent = self
            .client
            .post(format!("{}/{path}", self.base))
            .header(PROTOCOL_HEADER, "true")
            .body(self.bodies[host].clone())
            .timeout(self.timeout)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return failure(&e),
        };
        let status = response.status().as_u16();
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(e) => return failure(&e),
        };
        let error = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
        let field = |name: &str| {
            let text = error.as_ref()?.get(name)?.as_str()?;
            Some(text.to_owned())
        };
        Answer::Http {
            status,
            kind: field("kind"),
            value: (!matches!(status, 200 | 409)).then(|| field("value").unwrap_or_default()),
        }
    }

    /// Request `i` of the schedule, due at `due`; with `--reboot-time`, a host answered 200
    /// calls `steady-state` that long after.
    async fn pre_reboot(self: Arc<Fleet>, host: usize, first: bool, due: Instant) -> Vec<Sample> {
        let answer = self.ask(Endpoint::PreReboot, host).await;
        let answered = Instant::now();
        let granted = matches!(answer, Answer::Http { status: 200, .. });
        let mut samples = vec![Sample {
            endpoint: Endpoint::PreReboot,
            first,
            answer,
            latency: answered.saturating_duration_since(due),
        }];
        if let Some(reboot) = self.reboot_time
            && granted
            && !self.rebooted[host].swap(true, Ordering::SeqCst)
        {
            let due = answered + reboot;
            tokio::time::sleep_until(due).await;
            let answer = self.ask(Endpoint::SteadyState, host).await;
            samples.push(Sample {
                endpoint: Endpoint::SteadyState,
                first: false,
                answer,
                latency: Instant::now().saturating_duration_since(due),
            });
        }
        samples
    }
}

fn failure(error: &reqwest::Error) -> Answer {
    if error.is_timeout() {
        return Answer::Timeout;
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    Answer::Transport(text)
}

/// What the load generator did beside its requests.
struct Sent {
    samples: Vec<Sample>,
    /// Requests not sent: their host had rebooted.
    skipped: u64,
    /// How far behind its schedule a request was sent, at most.
    lag: Duration,
}

/// Requests in flight at once during the warm-up.
const WARM_UP_REQUESTS: usize = 16;

/// Every host asks once, [`WARM_UP_REQUESTS`] at a time: what the warm-up found.
struct WarmUp {
    elapsed: Duration,
    errors: usize,
}

async fn warm_up(fleet: &Arc<Fleet>, hosts: usize) -> Result<WarmUp> {
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..WARM_UP_REQUESTS {
        let (fleet, next) = (fleet.clone(), next.clone());
        workers.spawn(async move {
            let mut errors = 0;
            loop {
                let host = next.fetch_add(1, Ordering::SeqCst);
                if host >= hosts {
                    return errors;
                }
                if !fleet.ask(Endpoint::PreReboot, host).await.correct() {
                    errors += 1;
                }
            }
        });
    }
    let mut errors = 0;
    while let Some(done) = workers.join_next().await {
        errors += done.context("a warm-up task")?;
    }
    Ok(WarmUp {
        elapsed: started.elapsed(),
        errors,
    })
}

/// The load: the schedule's requests from `first` on, for `length`.
async fn generate(
    fleet: Arc<Fleet>,
    schedule: Schedule,
    first: u64,
    length: Duration,
) -> Result<Sent> {
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let mut sent = Sent {
        samples: Vec::new(),
        skipped: 0,
        lag: Duration::ZERO,
    };
    for i in first..first + schedule.requests_within(length) {
        let due = start + schedule.due(i - first);
        tokio::time::sleep_until(due).await;
        sent.lag = sent.lag.max(Instant::now().saturating_duration_since(due));
        while let Some(done) = tasks.try_join_next() {
            sent.samples.extend(done.context("a request's task")?);
        }
        let host = schedule.host(i);
        if fleet.rebooted[host].load(Ordering::SeqCst) {
            sent.skipped += 1;
            continue;
        }
        let first = schedule.round(i) == 0;
        tasks.spawn(fleet.clone().pre_reboot(host, first, due));
    }
    while let Some(done) = tasks.join_next().await {
        sent.samples.extend(done.context("a request's task")?);
    }
    Ok(sent)
}

/// The nearest-rank percentile of `sorted` (ascending): the least value that `p` percent of
/// them do not exceed.
fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// Milliseconds, to a tenth.
fn ms(duration: Duration) -> String {
    format!("{:.1}", duration.as_secs_f64() * 1000.0)
}

/// A row of the latency table: `samples`, how many, their errors and their latencies.
fn latency_row(label: &str, samples: &[&Sample]) -> Option<Vec<String>> {
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    latencies.sort_unstable();
    let at = |p| percentile(&latencies, p).map_or_else(|| "-".to_owned(), ms);
    let errors = samples.iter().filter(|s| !s.answer.correct()).count();
    (!latencies.is_empty()).then(|| {
        vec![
            label.to_owned(),
            latencies.len().to_string(),
            errors.to_string(),
            at(50.0),
            at(90.0),
            at(99.0),
            at(100.0),
        ]
    })
}

/// This process's CPU time so far (user and system), from `/proc/self/stat`; `None` where
/// there is none.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command's name: utime and stime are the 12th and 13th, in
    // clock ticks of 1/100 s (Linux's USER_HZ).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn endpoint_name(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::PreReboot => "pre-reboot",
        Endpoint::SteadyState => "steady-state",
    }
}

pub(super) async fn run(store: Arc<dyn Store>, url: &StoreUrl, args: &BenchArgs) -> Result<()> {
    store.set_concurrency(args.concurrency).await?;
    let counted = Arc::new(Counted::new(store));
    let cancel = CancellationToken::new();
    let hosts = Hosts::new(
        counted.clone(),
        Arc::new(CommandPlatform::default()),
        Config::default(),
        cancel.clone(),
    );
    let server = Arc::new(Server::new(hosts, Arc::new(NameIds), HashMap::new()));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .context("listening on 127.0.0.1")?;
    let address = listener.local_addr()?;
    let serving = tokio::spawn(server.serve(listener, None, cancel.clone()));

    let schedule = Schedule {
        hosts: args.hosts,
        rate: args.rate,
    };
    let length = Duration::from_secs(args.seconds);
    let bodies = (0..args.hosts)
        .map(|i| body(&host_id(i, args.hosts)))
        .collect::<Result<Vec<_>>>()?;
    let fleet = Arc::new(Fleet {
        // A connection of its own for every request, as from separate hosts.
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .context("building the HTTP client")?,
        base: format!("http://{address}"),
        bodies,
        timeout: args.request_timeout,
        reboot_time: args.reboot_time,
        rebooted: (0..args.hosts).map(|_| AtomicBool::new(false)).collect(),
    });
    output::emit(&format!(
        "fleetlock: a server on {address}, store {url} ({}), concurrency {}; {} hosts ({} … {}) \
         ask pre-reboot, {} a second for {} s (each host every {:.1} s), {}\n",
        url.kind(),
        args.concurrency,
        args.hosts,
        host_id(0, args.hosts),
        host_id(args.hosts - 1, args.hosts),
        args.rate,
        args.seconds,
        args.hosts as f64 / f64::from(args.rate),
        match args.reboot_time {
            Some(t) => format!(
                "a host answered 200 calls steady-state {} later",
                humantime::format_duration(t)
            ),
            None => "no steady-state".to_owned(),
        }
    ))?;
    let mut first = 0;
    if args.warm_up {
        let warm = warm_up(&fleet, args.hosts).await?;
        output::emit(&format!(
            "warm-up: each host asked once, {WARM_UP_REQUESTS} at a time: {} requests in {:.1} s \
             ({:.0} a second), {} errors; not measured\n",
            args.hosts,
            warm.elapsed.as_secs_f64(),
            super::rate(args.hosts, warm.elapsed),
            warm.errors
        ))?;
        output::emit(&format!(
            "{}\n",
            store_table(&counted.figures(), args.hosts)
        ))?;
        if warm.errors > 0 {
            bail!("{} of the warm-up's requests failed", warm.errors);
        }
        counted.reset();
        first = args.hosts as u64;
    }
    let cpu_before = cpu_time();
    let started = Instant::now();
    let sent = generate(fleet, schedule, first, length).await;
    let elapsed = started.elapsed();
    let cpu = cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let figures = counted.figures();
    cancel.cancel();
    serving
        .await
        .context("the FleetLock server's task")?
        .context("serving FleetLock")?;
    let sent = sent?;
    report(&sent, &figures, elapsed, cpu)
}

fn report(
    sent: &Sent,
    figures: &[(Call, Figures)],
    elapsed: Duration,
    cpu: Option<Duration>,
) -> Result<()> {
    let samples = &sent.samples;
    let of = |endpoint: Endpoint| -> Vec<&Sample> {
        samples.iter().filter(|s| s.endpoint == endpoint).collect()
    };
    let pre_reboots = of(Endpoint::PreReboot);
    let errors: Vec<&Sample> = samples.iter().filter(|s| !s.answer.correct()).collect();
    let mut text = format!(
        "sent {} pre-reboot and {} steady-state requests in {:.2} s ({} not sent: their host \
         had rebooted), at most {} ms behind schedule; errors: {}\n\n",
        pre_reboots.len(),
        samples.len() - pre_reboots.len(),
        elapsed.as_secs_f64(),
        sent.skipped,
        ms(sent.lag),
        errors.len()
    );

    let mut answers: BTreeMap<(&str, String, String), usize> = BTreeMap::new();
    for s in samples {
        let (status, kind) = match &s.answer {
            Answer::Http { status, kind, .. } => (status.to_string(), cell(kind.as_deref())),
            Answer::Timeout => ("-".to_owned(), "timeout".to_owned()),
            Answer::Transport(_) => ("-".to_owned(), "transport error".to_owned()),
        };
        *answers
            .entry((endpoint_name(s.endpoint), status, kind))
            .or_default() += 1;
    }
    text.push_str(&output::table(
        &["ENDPOINT", "STATUS", "KIND", "ANSWERS"],
        answers.into_iter().map(|((endpoint, status, kind), n)| {
            vec![endpoint.to_owned(), status, kind, n.to_string()]
        }),
    ));
    text.push('\n');

    let first: Vec<&Sample> = pre_reboots.iter().copied().filter(|s| s.first).collect();
    let later: Vec<&Sample> = pre_reboots.iter().copied().filter(|s| !s.first).collect();
    let rows = [
        latency_row("pre-reboot: each host's first", &first),
        latency_row("pre-reboot: the hosts' later", &later),
        latency_row("pre-reboot: all", &pre_reboots),
        latency_row("steady-state", &of(Endpoint::SteadyState)),
    ];
    text.push_str(&output::table(
        &[
            "REQUESTS (LATENCY IN MS)",
            "SENT",
            "ERRORS",
            "P50",
            "P90",
            "P99",
            "MAX",
        ],
        rows.into_iter().flatten(),
    ));
    text.push('\n');

    text.push_str(&store_table(figures, samples.len()));
    if let Some(cpu) = cpu {
        text.push_str(&format!(
            "this process's CPU (server and load together): {:.1} s in {:.1} s, {:.2} cores\n",
            cpu.as_secs_f64(),
            elapsed.as_secs_f64(),
            cpu.as_secs_f64() / elapsed.as_secs_f64().max(f64::EPSILON)
        ));
    }
    // What the errors said: each distinct text once (a node's name in it as `host-…`), the
    // most frequent first.
    let mut said: HashMap<String, usize> = HashMap::new();
    for s in &errors {
        let error = match &s.answer {
            Answer::Transport(text) => format!("transport error: {text}"),
            Answer::Http {
                status,
                kind,
                value,
            } => format!(
                "{status} {}: {}",
                cell(kind.as_deref()),
                value.as_deref().unwrap_or("")
            ),
            Answer::Timeout => continue,
        };
        *said.entry(without_host(&error)).or_default() += 1;
    }
    let mut said: Vec<(String, usize)> = said.into_iter().collect();
    said.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (error, n) in said.iter().take(5) {
        text.push_str(&format!("{n} × {error}\n"));
    }
    output::emit(&text)?;
    if !errors.is_empty() {
        bail!(
            "{} of {} requests were not answered 200 or 409",
            errors.len(),
            samples.len()
        );
    }
    Ok(())
}

/// The store's calls, made for `requests` requests: how many, and the time their callers waited.
fn store_table(figures: &[(Call, Figures)], requests: usize) -> String {
    let requests = requests.max(1) as f64;
    let used: Vec<_> = figures.iter().filter(|(_, f)| f.calls > 0).collect();
    let mut text = output::table(
        &[
            "STORE CALL",
            "CALLS",
            "PER REQUEST",
            "MEAN MS",
            "MAX MS",
            "TOTAL S",
        ],
        used.iter().map(|(call, f)| {
            let mean = f
                .total
                .checked_div(u32::try_from(f.calls).unwrap_or(u32::MAX))
                .unwrap_or_default();
            vec![
                call.name().to_owned(),
                f.calls.to_string(),
                format!("{:.3}", f.calls as f64 / requests),
                ms(mean),
                ms(f.max),
                format!("{:.2}", f.total.as_secs_f64()),
            ]
        }),
    );
    let writes: u64 = used
        .iter()
        .filter(|(call, _)| call.writes())
        .map(|(_, f)| f.calls)
        .sum();
    text.push_str(&format!(
        "store writes: {writes} ({:.3} per request; try_acquire_slot is a read, and a write \
         only when a host's turn has come)\n",
        writes as f64 / requests
    ));
    text
}

fn cell(kind: Option<&str>) -> String {
    kind.unwrap_or("-").to_owned()
}

/// `text` with every host's name (`host-` and digits) written `host-…`, so that one error of
/// many hosts is counted as one.
fn without_host(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("host-") {
        out.push_str(&rest[..at]);
        out.push_str("host-…");
        rest = rest[at + "host-".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;

    #[test]
    fn every_host_asks_once_a_round_on_schedule() {
        let schedule = Schedule {
            hosts: 10_000,
            rate: 500,
        };
        // 500 a second for 60 s: 30,000 requests, the last due 2 ms before the end.
        let sixty = Duration::from_secs(60);
        assert_eq!(schedule.requests_within(sixty), 30_000);
        assert_eq!(schedule.due(29_999), Duration::from_millis(59_998));
        assert_eq!(schedule.due(1), Duration::from_millis(2));
        // Each host asks every 20 s: three times in the minute, in the same order each round.
        let asks: Vec<u64> = (0..30_000).filter(|&i| schedule.host(i) == 42).collect();
        assert_eq!(asks, [42, 10_042, 20_042]);
        let times: Vec<Duration> = asks.iter().map(|&i| schedule.due(i)).collect();
        assert_eq!(times[1] - times[0], Duration::from_secs(20));
        assert_eq!(times[2] - times[1], Duration::from_secs(20));
        assert_eq!(
            asks.iter().map(|&i| schedule.round(i)).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        // A rate that does not divide a second: 3 a second, 7 s: due at 0, 1/3, …, 20/3 s.
        let odd = Schedule { hosts: 2, rate: 3 };
        assert_eq!(odd.requests_within(Duration::from_secs(7)), 21);
        assert_eq!(odd.due(1), Duration::from_nanos(333_333_333));
        assert_eq!(odd.requests_within(Duration::from_millis(1)), 1);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let sorted: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&sorted, 50.0), Some(ms(50)));
        assert_eq!(percentile(&sorted, 99.0), Some(ms(99)));
        assert_eq!(percentile(&sorted, 100.0), Some(ms(100)));
        assert_eq!(percentile(&sorted, 0.0), Some(ms(1)));
        // 1,000 values of which 11 are slow: p99 is one of the slow ones.
        let mut skewed = vec![ms(1); 989];
        skewed.extend(vec![ms(200); 11]);
        assert_eq!(percentile(&skewed, 99.0), Some(ms(200)));
        assert_eq!(percentile(&skewed, 98.0), Some(ms(1)));
        assert_eq!(percentile(&[ms(7)], 99.0), Some(ms(7)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn the_body_is_zincatis() {
        assert_eq!(
            body("host-00001").unwrap(),
            "{\n  \"client_params\": {\n    \"id\": \"host-00001\",\n    \"group\": \"default\"\n  }\n}"
        );
        assert_eq!(host_id(0, 10_000), "host-00001");
        assert_eq!(host_id(9_999, 10_000), "host-10000");
        assert_eq!(host_id(0, 200_000), "host-000001");
    }

    #[test]
    fn errors_of_many_hosts_read_as_one() {
        assert_eq!(
            without_host("node host-00042 waits; host-7 too, host-"),
            "node host-… waits; host-… too, host-…"
        );
    }

    #[test]
    fn only_200_and_409_are_correct_answers() {
        let http = |status| Answer::Http {
            status,
            kind: None,
            value: None,
        };
        assert!(http(200).correct());
        assert!(http(409).correct());
        for wrong in [http(500), http(503), http(404), http(400)] {
            assert!(!wrong.correct(), "{wrong:?}");
        }
        assert!(!Answer::Timeout.correct());
        assert!(!Answer::Transport("refused".into()).correct());
    }
}
