//! The load's client: an HTTP client that measures each streamed request with the proxy's own
//! `Meter`, and what this client itself adds to TTFT (`client_overhead`). Every request it sends
//! carries a unique `x-request-id` (its record's `request_id`), so that a proxy's record of it
//! joins bench's.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;

use super::request::{Req, Sent};
use super::stamped::{self, Connector};
use crate::meter::ending::{self, Close};
use crate::meter::{
    BodyEnd, Buckets, Experiment, Facts, Meter, MeteredBody, Observer, Outcome, RequestRecord,
    Stamp, Verdict,
};
use crate::openai::Api;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a listing that opens a connection (`Target::preconnect`) may take.
const LISTING_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the listings' connections are given to be back in the pool before the cell.
const POOL_SETTLE: Duration = Duration::from_millis(20);

/// The header every request's id goes out in: the one tokentap serve reads by default
/// (`request_id.headers`), as do vLLM, AIPerf and most gateways.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Ids for this client's requests: `bench-<16 random hex digits, one per client>-<counter>`,
/// unique within a run and, by the random part, across runs. Derived from nothing secret.
struct RequestIds {
    prefix: String,
    next: AtomicU64,
}

impl RequestIds {
    fn new() -> RequestIds {
        RequestIds {
            prefix: format!("bench-{:016x}", fastrand::u64(..)),
            next: AtomicU64::new(0),
        }
    }

    fn next(&self) -> String {
        format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}

/// An OpenAI-compatible endpoint under test.
pub struct Target {
    base: String,
    client: Client<Connector, Full<Bytes>>,
    auth: Option<String>,
    key_id: Option<String>,
    headers: Vec<(String, String)>,
    /// `--metrics-listen`: bench's own counters.
    live: Option<Arc<super::live::Live>>,
    ids: RequestIds,
    /// The most connections opened at once so far (`preconnect`).
    opened: AtomicUsize,
}

impl Target {
    /// The run's own id when none was given (`--run-id`, `--start-at`): the random part of its
    /// request ids, so the records' `run_id` and their `request_id` prefix agree.
    pub fn run_id(&self) -> String {
        self.ids.prefix.clone()
    }

    /// Count every request in these live counters (`--metrics-listen`).
    pub fn with_live(mut self, live: Option<Arc<super::live::Live>>) -> Target {
        self.live = live;
        self
    }

    pub fn new(
        base: &str,
        api_key: Option<String>,
        headers: Vec<(String, String)>,
    ) -> Result<Target, String> {
        let base = base
            .trim_end_matches('/')
            .trim_end_matches("/v1")
            .to_owned();
        let uri: Uri = format!("{base}/v1/models")
            .parse()
            .map_err(|e| format!("invalid URL: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(
                "bench speaks plain http:// (put it in front of the listener, not a TLS endpoint)"
                    .into(),
            );
        }
        let mut c = HttpConnector::new();
        c.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1024)
            .build(Connector::new(c));
        let key_id = api_key
            .as_ref()
            .map(|k| crate::keys::fingerprint(k.as_bytes()));
        Ok(Target {
            base,
            client,
            auth: api_key.map(|k| format!("Bearer {k}")),
            key_id,
            headers,
            live: None,
            ids: RequestIds::new(),
            opened: AtomicUsize::new(0),
        })
    }

    /// A request to the target, with its id (`x-request-id`, in place of any header of that
    /// name among the extra headers).
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
        extra: Option<(&str, &str)>,
        load: Option<&Req>,
        id: &str,
    ) -> Result<Request<Full<Bytes>>, String> {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if !body.is_empty() {
            b = b.header(http::header::CONTENT_TYPE, "application/json");
        }
        if let Some(a) = &self.auth {
            b = b.header(http::header::AUTHORIZATION, a.as_str());
        }
        for (k, v) in &self.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        if let Some((k, v)) = extra {
            b = b.header(k, v);
        }
        // tokentap takes these off and records them: its records then carry bench's tags too.
        for (k, v) in load.into_iter().flat_map(|r| r.tags().headers()) {
            b = b.header(k, v);
        }
        let id = http::HeaderValue::from_str(id).map_err(|e| e.to_string())?;
        if let Some(h) = b.headers_mut() {
            h.insert(REQUEST_ID_HEADER, id);
        }
        b.body(Full::new(body)).map_err(|e| e.to_string())
    }

    /// The first model the target lists (`GET /v1/models`).
    pub async fn first_model(&self) -> Result<String, String> {
        let id = self.ids.next();
        let req = self.request("GET", "/v1/models", Bytes::new(), None, None, &id)?;
        let resp = tokio::time::timeout(Duration::from_secs(30), self.client.request(req))
            .await
            .map_err(|_| "GET /v1/models timed out".to_string())?
            .map_err(|e| format!("GET /v1/models: {e}"))?;
        self.opened(1);
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| format!("GET /v1/models: status {status}, not JSON"))?;
        v["data"][0]["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| {
                format!("GET /v1/models: status {status}, no model listed (use --model)")
            })
    }

    /// Have `n` connections open before a cell whose first round sends `n` requests at once, so
    /// that the round does not time `n` handshakes into bench's TTFT (the proxy's starts at the
    /// request head and cannot see them): `n` listings at once (`GET /v1/models`), unmeasured
    /// and unrecorded by bench; any answer, even an error, leaves its connection in the pool.
    /// As many connections as listings are in flight at once: all `n` when the listings go out
    /// faster than answers come back, fewer on a loaded machine, where hyper's pool takes a
    /// connection back as soon as its answer is in and a later listing reuses it. Done once per
    /// level: a level no higher than one already opened sends nothing.
    pub async fn preconnect(self: &Arc<Self>, n: usize) {
        if n <= self.opened.load(Ordering::Relaxed) {
            return;
        }
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let (t, id) = (self.clone(), self.ids.next());
            set.spawn(async move {
                let Ok(req) = t.request("GET", "/v1/models", Bytes::new(), None, None, &id) else {
                    return;
                };
                let list = async {
                    if let Ok(resp) = t.client.request(req).await {
                        let _ = resp.into_body().collect().await;
                    }
                };
                let _ = tokio::time::timeout(LISTING_TIMEOUT, list).await;
            });
        }
        while set.join_next().await.is_some() {}
        // The pool takes a connection back on the connection's own task once its body is read:
        // a cell sent at once could find one not back yet and open another beside it.
        tokio::time::sleep(POOL_SETTLE).await;
        self.opened(n);
    }

    /// `n` requests were in flight at once: as many connections are in the pool.
    pub fn opened(&self, n: usize) {
        self.opened.fetch_max(n, Ordering::Relaxed);
    }

    /// One streamed request, measured on this client's clock.
    pub async fn one(&self, req: &Req, sent: Sent, stop: &AtomicBool) -> RequestRecord {
        let lag = sent.schedule.map(|s| s.lag_ms);
        if let Some(l) = &self.live {
            l.request_sent();
        }
        let rec = self.one_measured(req, sent, stop).await;
        if let Some(l) = &self.live {
            l.request_done(rec.outcome != Outcome::Ok, lag);
        }
        rec
    }

    async fn one_measured(&self, req: &Req, sent: Sent, stop: &AtomicBool) -> RequestRecord {
        // The record's id; its `ts` is set once t0 is known (below).
        let stamp = Stamp::now();
        let (path, body) = req.body();
        // Straight to bytes, not through `Display`'s formatter (a Value always serializes).
        let body =
            Bytes::from(serde_json::to_vec(&body).unwrap_or_else(|_| body.to_string().into()));
        let prefix = req.arm.as_ref().map_or("", |a| &*a.1);
        let endpoint = format!("{prefix}{path}");
        let mut facts = Facts::new(stamp, "POST", &endpoint);
        facts.experiment = req.arm.as_ref().map(|(name, _, pair)| {
            Box::new(Experiment {
                arm: name.to_string(),
                pair_id: Some(pair.clone()),
            })
        });
        facts.model = Some(req.model.to_string());
        facts.key_id = self.key_id.clone();
        facts.stream = req.stream;
        facts.max_tokens = Some(req.out);
        facts.request_bytes = body.len() as u64;
        facts.in_flight = sent.in_flight;
        facts.load = req.tags();
        facts.schedule = sent.schedule;
        // The id this request goes out with: the proxy's record of it carries the same.
        let id = self.ids.next();
        facts.request_id = Some(id.clone());
        let route = req.arm.as_ref().map_or("bench", |a| &*a.0).to_owned();
        let extra = req
            .route_header
            .as_deref()
            .zip(req.arm.as_ref().map(|a| &*a.0));
        let (mut meter, verdict) = self.exchange(&endpoint, body, extra, req, &id, stop).await;
        // `ts` is t0's wall time, as every record's: the write that sent the request.
        facts.stamp.at = Stamp::of(meter.timeline.t0).at;
        let mut rec = RequestRecord::assemble(
            facts,
            &mut meter,
            verdict,
            Instant::now(),
            &route,
            &Buckets::default(),
        );
        rec.prompt_index = req.prompt;
        rec
    }

    /// Send one request and read its response through the proxy's own observer; the meter and
    /// the verdict on the request, by the rule the proxy's exchange follows too
    /// (`meter::ending`): this client names how its side saw the end, the rule decides.
    async fn exchange(
        &self,
        path: &str,
        body: Bytes,
        extra: Option<(&str, &str)>,
        req: &Req,
        id: &str,
        stop: &AtomicBool,
    ) -> (Meter, Verdict) {
        let set_out = Instant::now();
        let (mut meter, status, close) = match self.send(path, body, extra, req, id).await {
            Err(close) => (Meter::new(set_out), 0, close),
            Ok(resp) => {
                // The request's t0 is the write that sent it whole (bench/stamped.rs), as the
                // proxy's is its head's arrival: the wait before it is bench's own.
                let t0 = stamped::written(&resp)
                    .filter(|w| *w >= set_out)
                    .unwrap_or(set_out);
                let status = resp.status().as_u16();
                match read(resp, Meter::new(t0), path, t0, stop).await {
                    Ok((m, close)) => (m, status, close),
                    Err(lost) => (Meter::new(t0), 0, lost),
                }
            }
        };
        let v = ending::verdict(close, status, &mut meter);
        (meter, v)
    }

    /// The request sent and its response's head, or how it failed before one.
    async fn send(
        &self,
        path: &str,
        body: Bytes,
        extra: Option<(&str, &str)>,
        req: &Req,
        id: &str,
    ) -> Result<http::Response<hyper::body::Incoming>, Close> {
        let http = self
            .request("POST", path, body, extra, Some(req), id)
            .map_err(|e| Close::Failed(Outcome::Rejected, e))?;
        match tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(http)).await {
            Err(_) => Err(Close::Failed(
                Outcome::Timeout,
                "no response headers".into(),
            )),
            Ok(Err(e)) => {
                let o = if e.is_connect() {
                    Outcome::ConnectError
                } else {
                    Outcome::UpstreamReset
                };
                Err(Close::Failed(o, format!("{e}")))
            }
            Ok(Ok(resp)) => Ok(resp),
        }
    }
}

/// Read a response's body through the proxy's own observer until it ends, the run stops or the
/// request's time is up: the meter, and how this client saw the end. NB: the body is dropped
/// before the meter is taken back, so its observer has ended (MeteredBody ends it on drop at
/// the latest) and sent its meter; a closed channel would be a bug in MeteredBody, recorded as
/// such rather than invented (the error, with a fresh meter).
async fn read(
    resp: http::Response<hyper::body::Incoming>,
    mut meter: Meter,
    path: &str,
    t0: Instant,
    stop: &AtomicBool,
) -> Result<(Meter, Close), Close> {
    meter.timeline.headers = Some(Instant::now());
    meter.path_api = crate::openai::Api::from_path(path);
    let header = |name| {
        resp.headers()
            .get(name)
            .map(|v: &http::HeaderValue| v.as_bytes())
    };
    meter.expect_body(header(http::header::CONTENT_TYPE), 1 << 20, 8 << 20);
    meter.expect_encoding(header(http::header::CONTENT_ENCODING));
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Each frame at its segment's arrival (the kernel's stamp), not at this worker's read.
    let mut body = MeteredBody::new(
        stamped::Body::of(resp),
        Ended {
            meter,
            tx: Some(tx),
        },
    )
    .stamped_by(stamped::Body::arrival);
    // One timer for the whole body, not one a frame.
    let deadline = tokio::time::sleep_until(t0 + REQUEST_TIMEOUT);
    tokio::pin!(deadline);
    // Why this client stopped reading, when it did.
    let mut timed_out = false;
    loop {
        if stop.load(Ordering::Relaxed) && !body.meter().is_some_and(|m| m.done) {
            break;
        }
        tokio::select! {
            biased;
            f = body.frame() => match f {
                None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
            _ = &mut deadline => {
                timed_out = true;
                break;
            }
        }
    }
    drop(body);
    let Ok((meter, end)) = rx.await else {
        return Err(Close::Failed(
            Outcome::ClientCancelled,
            "measurement lost: the body's observer never ended".into(),
        ));
    };
    let close = match end {
        _ if timed_out => Close::Failed(Outcome::Timeout, "total timeout".into()),
        End::Complete => Close::Complete,
        End::Error(e) => Close::Failed(Outcome::UpstreamReset, format!("body: {e}")),
        End::Dropped => Close::Dropped { cut: false },
    };
    Ok((meter, close))
}

/// How a response body ended, as bench's observer saw it (owned: it crosses a channel).
enum End {
    Complete,
    Error(String),
    Dropped,
}

/// Bench's observer: hands the meter and the ending back to the request's task.
struct Ended {
    meter: Meter,
    tx: Option<tokio::sync::oneshot::Sender<(Meter, End)>>,
}

impl Observer for Ended {
    fn meter(&mut self) -> &mut Meter {
        &mut self.meter
    }

    fn end(mut self, end: BodyEnd<'_>) {
        let end = match end {
            BodyEnd::Complete => End::Complete,
            BodyEnd::Error(e) => End::Error(e.to_string()),
            BodyEnd::Dropped => End::Dropped,
        };
        if let Some(tx) = self.tx.take() {
            let _ = tx.send((self.meter, end));
        }
    }
}

/// A loopback server that answers every request at once with a canned one-token SSE stream
/// (headers, role chunk, content chunk, usage, `[DONE]` in one write): whatever TTFT a client
/// measures against it is that client's own overhead plus the loopback round trip.
async fn canned_sse_server() -> std::io::Result<std::net::SocketAddr> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BODY: &str = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" hi\"},\"finish_reason\":\"length\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n",
        "data: [DONE]\n\n",
    );
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            let response = response.clone();
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                let mut tmp = [0u8; 4096];
                loop {
                    // One request: head, then content-length bytes of body.
                    let (head_end, len) = loop {
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
                            let len = head
                                .lines()
                                .find_map(|l| {
                                    l.strip_prefix("content-length:")
                                        .and_then(|v| v.trim().parse::<usize>().ok())
                                })
                                .unwrap_or(0);
                            break (p + 4, len);
                        }
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    };
                    while buf.len() < head_end + len {
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    }
                    buf.drain(..head_end + len);
                    if s.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// What this client adds to TTFT (`client_overhead_ttft_ms` in `run.json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Overhead {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub how: &'static str,
}

/// What this client adds to TTFT: 50 requests (after 10 warm-up) to a server that answers at
/// once.
pub async fn client_overhead() -> Overhead {
    let how = "TTFT this client measures against an in-process server that answers at once (client overhead + loopback round trip)";
    let failed = Overhead {
        n: 0,
        p50: f64::NAN,
        p99: f64::NAN,
        how,
    };
    let Ok(addr) = canned_sse_server().await else {
        return failed;
    };
    let Ok(t) = Target::new(&format!("http://{addr}"), None, Vec::new()) else {
        return failed;
    };
    let never = AtomicBool::new(false);
    let mut ttft = Vec::new();
    for i in 0..60 {
        let req = Req {
            concurrency: Some(1),
            ..Req::plain(
                "calibration".into(),
                Api::Chat,
                "calibrate",
                1,
                "calibration",
            )
        };
        let r = t.one(&req, Sent::default(), &never).await;
        if let (true, Some(v)) = (i >= 10, r.ttft_ms) {
            ttft.push(v);
        }
    }
    let ttft = crate::stats::sorted(ttft);
    let q = |p: f64| crate::stats::pct(&ttft, p).unwrap_or(f64::NAN);
    Overhead {
        n: ttft.len(),
        p50: q(0.5),
        p99: q(0.99),
        how,
    }
}
