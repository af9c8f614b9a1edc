//! Scraping Prometheus text endpoints while bench runs: the engine's `/metrics` (vLLM, SGLang),
//! a DCGM exporter, anything else named. Every round's samples go raw to `scrape.jsonl`; the
//! known metrics (and `--scrape-metric` names) are kept per round for the cells' summaries. A
//! scrape that fails is counted and never stops the load; a URL's credentials are used to
//! scrape and never written.

pub mod names;
pub mod prom;
pub mod summary;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use names::{Fold, Kind, Role};

use super::{BenchError, CellInfo};
use crate::report::engine::Hardware;

/// A page larger than this is not read (a metrics page is a few hundred kilobytes).
const MAX_PAGE: usize = 16 << 20;
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// What to scrape, decided once from `--scrape`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ScrapePlan {
    /// The target's `/metrics`, when it answers with vLLM's or SGLang's metrics.
    #[default]
    Auto,
    Off,
    Urls(Vec<String>),
}

impl ScrapePlan {
    /// `--scrape` values: none → auto, `off` → off, else the URLs.
    pub fn from_args(v: &[String]) -> Result<ScrapePlan, String> {
        match v {
            [] => Ok(ScrapePlan::Auto),
            [one] if one == "off" => Ok(ScrapePlan::Off),
            urls => {
                for u in urls {
                    Endpoint::new(u)?;
                }
                Ok(ScrapePlan::Urls(urls.to_vec()))
            }
        }
    }
}

/// A scrape URL: the request's URI (userinfo taken off), its Basic credentials, and the form
/// that may be written (credentials and secret-looking query values replaced).
#[derive(Clone)]
pub struct Endpoint {
    uri: http::Uri,
    auth: Option<String>,
    pub shown: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// Query keys whose values are never written.
fn secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    [
        "key", "token", "secret", "pass", "auth", "sig", "cred", "session",
    ]
    .iter()
    .any(|s| k.contains(s))
}

impl Endpoint {
    pub fn new(url: &str) -> Result<Endpoint, String> {
        let bad = |why: &str| Err(format!("--scrape {}: {why}", redact(url)));
        let Some(rest) = url.strip_prefix("http://") else {
            return bad("scrapes speak plain http:// (as vLLM, SGLang and dcgm-exporter serve)");
        };
        let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
        let (userinfo, host) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let Ok(uri) = format!("http://{host}{path}").parse::<http::Uri>() else {
            return bad("not a URL");
        };
        if uri.host().is_none_or(str::is_empty) {
            return bad("no host");
        }
        let auth = userinfo.map(|u| {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            crate::config::basic_auth(user, pass)
        });
        Ok(Endpoint {
            uri,
            auth,
            shown: redact(url),
        })
    }
}

/// A URL as it may be written: userinfo and secret-looking query values replaced by
/// `REDACTED`.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, tail) = rest
        .find(['/', '?', '#'])
        .map_or((rest, ""), |i| rest.split_at(i));
    let authority = match authority.rfind('@') {
        Some(i) => format!("REDACTED@{}", &authority[i + 1..]),
        None => authority.to_owned(),
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut out = format!(
        "{scheme}{}{authority}{path}",
        if scheme.is_empty() { "" } else { "://" }
    );
    if !query.is_empty() {
        let (query, fragment) = query.split_once('#').unwrap_or((query, ""));
        let q: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if secret_key(k) => format!("{k}=REDACTED"),
                _ => kv.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&q.join("&"));
        if !fragment.is_empty() {
            out.push_str("#REDACTED");
        }
    }
    out
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(c)
}

async fn fetch(client: &HttpClient, e: &Endpoint) -> Result<String, String> {
    let mut req = http::Request::get(e.uri.clone());
    if let Some(a) = &e.auth {
        req = req.header(http::header::AUTHORIZATION, a.as_str());
    }
    let req = req.body(Empty::new()).map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(SCRAPE_TIMEOUT, client.request(req))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status()));
    }
    let body = tokio::time::timeout(
        SCRAPE_TIMEOUT,
        Limited::new(resp.into_body(), MAX_PAGE).collect(),
    )
    .await
    .map_err(|_| "timed out".to_string())?
    .map_err(|e| e.to_string())?
    .to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The target's own `/metrics`, when it is an engine's page.
pub async fn probe_target(base: &str) -> Option<Endpoint> {
    let base = base.trim_end_matches('/').trim_end_matches("/v1");
    let e = Endpoint::new(&format!("{base}/metrics")).ok()?;
    let text = fetch(&client(), &e).await.ok()?;
    names::is_engine_page(&prom::parse(&text)).then_some(e)
}

/// One round over every endpoint: its time (ms since the run's start) and, per role and per
/// summarised metric, the folded value.
#[derive(Debug, Clone, Default)]
pub struct Round {
    pub t_ms: f64,
    pub failed: usize,
    pub roles: BTreeMap<Role, f64>,
    /// (endpoint, metric) → (kind, value folded over its series).
    pub metrics: BTreeMap<(usize, String), (Kind, f64)>,
}

/// All a run's scraping gathered.
#[derive(Debug, Default)]
pub struct Collected {
    pub endpoints: Vec<String>,
    pub interval_ms: f64,
    pub rounds: Vec<Round>,
    pub failures: usize,
    pub samples_written: u64,
    pub write_error: Option<String>,
}

/// Asks the scraper for a round now; answers with its time.
#[derive(Clone)]
pub struct Handle(mpsc::Sender<oneshot::Sender<f64>>);

impl Handle {
    /// A round now (at a cell's start or end); its time in ms since the run's start.
    pub async fn mark(&self) -> Option<f64> {
        let (tx, rx) = oneshot::channel();
        self.0.send(tx).await.ok()?;
        rx.await.ok()
    }
}

/// The running scraper.
pub struct Scraper {
    pub handle: Handle,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Collected>,
}

/// What the scraper needs.
pub struct Settings {
    pub endpoints: Vec<Endpoint>,
    pub interval: Duration,
    /// Unknown metrics to summarise too (`--scrape-metric`).
    pub extra: Vec<String>,
    pub t0: Instant,
}

impl Scraper {
    /// Start scraping into `dir/scrape.jsonl`.
    pub fn start(s: Settings, dir: &Path) -> std::io::Result<Scraper> {
        let file = std::fs::File::create(dir.join(crate::report::read::SCRAPE_FILE))?;
        let (tx, rx) = mpsc::channel(4);
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(run(s, std::io::BufWriter::new(file), rx, stop_rx));
        Ok(Scraper {
            handle: Handle(tx),
            stop,
            task,
        })
    }

    /// A last round, then everything gathered.
    pub async fn finish(self) -> Collected {
        let _ = self.handle.mark().await;
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

async fn run(
    s: Settings,
    mut w: std::io::BufWriter<std::fs::File>,
    mut marks: mpsc::Receiver<oneshot::Sender<f64>>,
    mut stop: oneshot::Receiver<()>,
) -> Collected {
    let client = client();
    let mut out = Collected {
        endpoints: s.endpoints.iter().map(|e| e.shown.clone()).collect(),
        interval_ms: s.interval.as_secs_f64() * 1000.0,
        ..Default::default()
    };
    let mut tick = tokio::time::interval(s.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let reply = tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => None,
            m = marks.recv() => match m {
                Some(r) => Some(r),
                None => break,
            },
        };
        let round = scrape_round(&client, &s, &mut w, &mut out).await;
        if let Some(r) = reply {
            let _ = r.send(round.t_ms);
        }
        out.failures += round.failed;
        out.rounds.push(round);
    }
    if let Err(e) = w.flush() {
        out.write_error.get_or_insert(e.to_string());
    }
    out
}

async fn scrape_round(
    client: &HttpClient,
    s: &Settings,
    w: &mut impl Write,
    out: &mut Collected,
) -> Round {
    let t_ms = s.t0.elapsed().as_secs_f64() * 1000.0;
    let time = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let mut round = Round {
        t_ms,
        ..Default::default()
    };
    // Per role: values from current names, values from older ones.
    let mut by_role: BTreeMap<Role, (Fold, Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (i, e) in s.endpoints.iter().enumerate() {
        let page = match fetch(client, e).await {
            Ok(text) => prom::parse(&text),
            Err(_) => {
                round.failed += 1;
                continue;
            }
        };
        let mut folded: BTreeMap<&str, (Vec<f64>, Kind, Fold)> = BTreeMap::new();
        for smp in &page.samples {
            let line = serde_json::json!({
                "time": time,
                "t_ms": (t_ms * 1000.0).round() / 1000.0,
                "endpoint": e.shown,
                "metric": smp.name,
                "labels": smp.labels.iter().cloned().collect::<BTreeMap<_, _>>(),
                "value": smp.value,
            });
            if writeln!(w, "{line}").is_ok() {
                out.samples_written += 1;
            } else if out.write_error.is_none() {
                out.write_error = Some("scrape.jsonl: write failed".into());
            }
            let Some(value) = names::value_of(smp).filter(|v| v.is_finite()) else {
                continue;
            };
            let (kind, fold) = match names::known(&smp.name) {
                Some(k) => (k.kind, k.fold),
                None if s.extra.contains(&smp.name) => match page.kind_of(&smp.name) {
                    prom::Kind::Counter => (Kind::Counter, Fold::Sum),
                    _ => (Kind::Gauge, Fold::Sum),
                },
                None => continue,
            };
            folded
                .entry(smp.name.as_str())
                .or_insert_with(|| (Vec::new(), kind, fold))
                .0
                .push(value);
        }
        for (name, (values, kind, fold)) in folded {
            let v = fold_values(fold, &values);
            if let Some(k) = names::known(name) {
                let slot = by_role
                    .entry(k.role)
                    .or_insert((k.fold, Vec::new(), Vec::new()));
                if k.old { &mut slot.2 } else { &mut slot.1 }.push(v);
            }
            round.metrics.insert((i, name.to_owned()), (kind, v));
        }
    }
    for (role, (fold, current, old)) in by_role {
        let v = if current.is_empty() { old } else { current };
        if !v.is_empty() {
            round.roles.insert(role, fold_values(fold, &v));
        }
    }
    round
}

fn fold_values(fold: Fold, v: &[f64]) -> f64 {
    let sum: f64 = v.iter().sum();
    match fold {
        Fold::Sum => sum,
        Fold::Mean => sum / v.len().max(1) as f64,
    }
}

/// What to scrape while the load runs (`--scrape`), how often, and which unknown metrics to
/// summarise per cell too (`--scrape-metric`).
#[derive(Debug, Clone)]
pub struct Scraping {
    pub plan: ScrapePlan,
    pub interval: Duration,
    pub metrics: Vec<String>,
}

impl Default for Scraping {
    fn default() -> Self {
        Scraping {
            plan: ScrapePlan::Auto,
            interval: Duration::from_secs(1),
            metrics: Vec::new(),
        }
    }
}

impl Scraping {
    /// No scraping.
    pub fn off() -> Scraping {
        Scraping {
            plan: ScrapePlan::Off,
            ..Scraping::default()
        }
    }
}

/// The scraper for `--scrape`: the URLs given, or the target's own `/metrics` when it is an
/// engine's; none when off or when the target's is not.
pub(super) async fn start_for(
    (cfg, target): (&Scraping, &str),
    (quiet, out): (bool, &std::path::Path),
    t0: Instant,
) -> Result<Option<Scraper>, BenchError> {
    let endpoints = match &cfg.plan {
        ScrapePlan::Off => Vec::new(),
        ScrapePlan::Urls(urls) => urls
            .iter()
            .map(|u| Endpoint::new(u))
            .collect::<Result<_, _>>()
            .map_err(BenchError::Usage)?,
        ScrapePlan::Auto => probe_target(target).await.into_iter().collect(),
    };
    if endpoints.is_empty() {
        return Ok(None);
    }
    if !quiet {
        let shown: Vec<&str> = endpoints
            .iter()
            .map(|e: &Endpoint| e.shown.as_str())
            .collect();
        eprintln!(
            "tokentap bench: scraping {} every {} (raw samples: scrape.jsonl)",
            shown.join(", "),
            humantime::format_duration(cfg.interval)
        );
    }
    let settings = Settings {
        endpoints,
        interval: cfg.interval,
        extra: cfg.metrics.clone(),
        t0,
    };
    Scraper::start(settings, out)
        .map(Some)
        .map_err(|source| BenchError::Io {
            path: out
                .join(crate::report::read::SCRAPE_FILE)
                .display()
                .to_string(),
            source,
        })
}

/// Each cell's scrape summary, and what `run.json` says of the scraping.
pub(super) fn summarise(hw: &Hardware, c: &Collected, cells: &mut [CellInfo]) -> ScrapeInfo {
    for cell in cells.iter_mut() {
        if let Some((from, to)) = cell.window_ms {
            let facts = summary::CellFacts {
                requests: cell.measured,
                output_tokens: cell.output_tokens,
                wall_s: cell.wall_s,
                peak_bandwidth: hw.peak_bandwidth_bytes_s,
                peak_flops: hw.peak_flops,
            };
            cell.scrape = Some(summary::cell(c, from, to, &facts));
        }
    }
    ScrapeInfo {
        endpoints: c.endpoints.clone(),
        interval_ms: c.interval_ms,
        rounds: c.rounds.len(),
        failures: c.failures,
        samples: c.samples_written,
        file: crate::report::read::SCRAPE_FILE,
        write_error: c.write_error.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_never_shown() {
        let e = Endpoint::new("http://user:s3cret@127.0.0.1:9400/metrics?token=abc&x=1").unwrap();
        assert_eq!(
            e.shown,
            "http://REDACTED@127.0.0.1:9400/metrics?token=REDACTED&x=1"
        );
        assert!(!format!("{e:?}").contains("s3cret"));
        assert_eq!(
            e.uri.to_string(),
            "http://127.0.0.1:9400/metrics?token=abc&x=1"
        );
        assert!(e.auth.as_deref().is_some_and(|a| a.starts_with("Basic ")));
        assert_eq!(
            redact("http://h/m?api_key=k#frag"),
            "http://h/m?api_key=REDACTED#REDACTED"
        );
        let err = Endpoint::new("https://u:pw@h/metrics").unwrap_err();
        assert!(!err.contains("pw") && err.contains("REDACTED"), "{err}");
        assert_eq!(ScrapePlan::from_args(&["off".into()]), Ok(ScrapePlan::Off));
        assert_eq!(ScrapePlan::from_args(&[]), Ok(ScrapePlan::Auto));
    }
}

/// `scrape` in `run.json`.
#[derive(Debug, serde::Serialize)]
pub struct ScrapeInfo {
    /// The endpoints, credentials replaced by `REDACTED`.
    pub endpoints: Vec<String>,
    pub interval_ms: f64,
    /// Rounds over every endpoint (each cell's start and end add one).
    pub rounds: usize,
    /// Scrapes that failed (an endpoint in a round); they never stop the run.
    pub failures: usize,
    /// Raw samples written to `scrape.jsonl`.
    pub samples: u64,
    pub file: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_error: Option<String>,
}
