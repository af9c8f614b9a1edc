//! tokentap's test support, shared by every integration test and the overhead bench: a
//! scriptable upstream on raw TCP (exact wire control: chunking, delays, resets, stalls),
//! fixture loading, a proxy on ephemeral ports, a real HTTP client, log reading, `/proc`
//! readings. Everything binds 127.0.0.1:0. Test code: it panics on anything unexpected.
// Tests and benches time what they drive on their own process clock, and set the environment
// only where they must (tests/environment/): the one-door rules are for the record's path.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use tokentap::config::{Config, Overrides};
use tokentap::meter::RequestRecord;
use tokentap::serve::Running;

pub mod load;
pub mod records;

/// Milliseconds, for scripts and timeouts.
pub const MS: fn(u64) -> Duration = Duration::from_millis;

/// Resident memory of one process (`None`: this one), in KiB, from `/proc/<pid>/status`.
pub fn rss_kb(pid: Option<u32>) -> u64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_owned(),
    };
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

pub fn fixtures_dir() -> PathBuf {
    // This crate lives in tests/support; the fixtures beside it in tests/fixtures.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/sse")
}

/// A recorded exchange from `tests/fixtures/sse`.
pub struct Fixture {
    pub name: String,
    pub status: u16,
    /// Response headers as recorded (framing headers included).
    pub headers: Vec<(String, String)>,
    /// De-chunked body: what the client must receive.
    pub body: Vec<u8>,
    /// Payload lengths of the HTTP chunks as they came off the socket.
    pub chunk_lens: Vec<usize>,
    /// A capture of a server stopped mid-stream: it has a `NAME.end` (the signal, and how the
    /// connection ended).
    pub stopped: bool,
    /// The chunked body ended with its terminating chunk (`NAME.end` says when it did not: the
    /// server closed the connection first, or the client gave up on a stalled stream).
    pub terminated: bool,
    /// The request: method, path, headers, body.
    pub method: String,
    pub path: String,
    pub req_headers: Vec<(String, String)>,
    pub req_body: Vec<u8>,
}

impl Fixture {
    pub fn load(name: &str) -> Fixture {
        let dir = fixtures_dir();
        let head = std::fs::read_to_string(dir.join(format!("{name}.headers"))).unwrap();
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once(':').unwrap();
                (k.trim().to_owned(), v.trim().to_owned())
            })
            .collect();
        let body = std::fs::read(dir.join(format!("{name}.sse"))).unwrap();
        let chunk_lens = match std::fs::read_to_string(dir.join(format!("{name}.timing.jsonl"))) {
            Ok(t) => t
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["len"]
                        .as_u64()
                        .unwrap() as usize
                })
                .collect(),
            Err(_) => vec![body.len()],
        };
        assert_eq!(
            chunk_lens.iter().sum::<usize>(),
            body.len(),
            "{name}: timing lengths"
        );
        let end = std::fs::read_to_string(dir.join(format!("{name}.end")))
            .ok()
            .map(|t| serde_json::from_str::<serde_json::Value>(&t).unwrap());
        let stopped = end.is_some();
        let terminated = end.is_none_or(|e| e["terminating_chunk"].as_bool().unwrap());
        let req = std::fs::read(dir.join(format!("{name}.request"))).unwrap();
        let split = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let req_head = String::from_utf8_lossy(&req[..split]).to_string();
        let req_body = req[split + 4..].to_vec();
        let mut rl = req_head.split("\r\n");
        let first = rl.next().unwrap();
        let mut parts = first.split(' ');
        let method = parts.next().unwrap().to_owned();
        let path = parts.next().unwrap().to_owned();
        let req_headers = rl
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        Fixture {
            name: name.to_owned(),
            status,
            headers,
            body,
            chunk_lens,
            stopped,
            terminated,
            method,
            path,
            req_headers,
            req_body,
        }
    }

    /// All fixture names in the folder.
    pub fn all() -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(fixtures_dir())
            .unwrap()
            .filter_map(|e| {
                let n = e.ok()?.file_name().to_string_lossy().to_string();
                n.strip_suffix(".sse").map(str::to_owned)
            })
            .collect();
        v.sort();
        v
    }

    /// The recorded body cut into its recorded chunks.
    pub fn chunks(&self) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut at = 0;
        for &l in &self.chunk_lens {
            out.push(Bytes::copy_from_slice(&self.body[at..at + l]));
            at += l;
        }
        out
    }

    /// A script replaying this fixture: headers at once, first chunk after `first`, then `gap`;
    /// then the terminating chunk, or, when the server closed the connection before it, a close.
    pub fn script(&self, first: Duration, gap: Duration) -> Script {
        let headers = self
            .headers
            .iter()
            .filter(|(k, _)| {
                !k.eq_ignore_ascii_case("transfer-encoding")
                    && !k.eq_ignore_ascii_case("connection")
            })
            .cloned()
            .collect::<Vec<_>>();
        let chunked = !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
        let chunks = self
            .chunks()
            .into_iter()
            .enumerate()
            .map(|(i, c)| (if i == 0 { first } else { gap }, c))
            .collect();
        Script {
            status: self.status,
            headers,
            chunks,
            chunked,
            finish: if self.terminated {
                Finish::Clean
            } else {
                Finish::Stall(Duration::ZERO)
            },
            ..Script::default()
        }
    }
}

/// How a scripted response ends.
#[derive(Clone, Debug, Default)]
pub enum Finish {
    /// Terminating chunk (or all content-length bytes), connection kept for reuse.
    #[default]
    Clean,
    /// TCP reset (SO_LINGER 0) after the chunks, without the terminating chunk.
    Reset,
    /// Send nothing more for this long, then close.
    Stall(Duration),
}

/// One scripted response.
#[derive(Clone, Debug)]
pub struct Script {
    pub head_delay: Duration,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// (delay before, bytes).
    pub chunks: Vec<(Duration, Bytes)>,
    pub chunked: bool,
    pub finish: Finish,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            head_delay: Duration::ZERO,
            status: 200,
            headers: vec![(
                "content-type".into(),
                "text/event-stream; charset=utf-8".into(),
            )],
            chunks: vec![],
            chunked: true,
            finish: Finish::Clean,
        }
    }
}

impl Script {
    /// An OpenAI chat stream as vLLM sends it: role chunk, `n` content chunks `gap` apart (first
    /// after `ttft`; the last carries `"finish_reason":"stop"`), optional usage chunk, `[DONE]`.
    pub fn chat_stream(ttft: Duration, gap: Duration, n: usize, usage: bool) -> Script {
        let ev = |j: String| Bytes::from(format!("data: {j}\n\n"));
        let mut chunks = vec![(
            Duration::ZERO,
            ev(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#.into()),
        )];
        for i in 0..n {
            let d = if i == 0 { ttft } else { gap };
            let finish = if i + 1 == n {
                r#","finish_reason":"stop""#
            } else {
                ""
            };
            chunks.push((
                d,
                ev(format!(
                    r#"{{"choices":[{{"index":0,"delta":{{"content":"t{i} "}}{finish}}}]}}"#
                )),
            ));
        }
        if usage {
            chunks.push((Duration::ZERO, ev(format!(r#"{{"choices":[],"usage":{{"prompt_tokens":7,"completion_tokens":{n},"total_tokens":{}}}}}"#, n + 7))));
        }
        chunks.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
        Script {
            chunks,
            ..Script::default()
        }
    }

    pub fn json(status: u16, body: &str) -> Script {
        Script {
            status,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("content-length".into(), body.len().to_string()),
            ],
            chunks: vec![(Duration::ZERO, Bytes::from(body.to_owned()))],
            chunked: false,
            ..Script::default()
        }
    }
}

/// What the upstream received.
#[derive(Clone, Debug)]
pub struct Received {
    pub head: String,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
    pub fn request_line(&self) -> &str {
        self.head.split("\r\n").next().unwrap_or("")
    }
}

type Handler = Arc<dyn Fn(&Received) -> Script + Send + Sync>;

/// A scriptable upstream on 127.0.0.1:0.
pub struct Upstream {
    pub addr: std::net::SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
    /// When a write to the proxy failed (the proxy closed the connection), per event.
    pub write_failures: Arc<Mutex<Vec<Instant>>>,
    /// Per request, in arrival order: when each chunk was written, from when the request was read.
    /// Tests bound what the proxy measured by what was actually sent, so a late timer on a busy
    /// machine moves both sides together.
    pub sent: Arc<Mutex<Vec<Vec<Duration>>>>,
    pub connections: Arc<AtomicUsize>,
}

impl Upstream {
    pub async fn spawn(handler: impl Fn(&Received) -> Script + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let write_failures = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let handler: Handler = Arc::new(handler);
        let (r, w, c, t) = (
            received.clone(),
            write_failures.clone(),
            connections.clone(),
            sent.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                c.fetch_add(1, Ordering::Relaxed);
                let _ = s.set_nodelay(true);
                let (r, w, t) = (r.clone(), w.clone(), t.clone());
                tokio::spawn(serve_conn(s, handler.clone(), r, w, t));
            }
        });
        Upstream {
            addr,
            received,
            write_failures,
            sent,
            connections,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Read one request (head and content-length body) from a raw connection; `None` at EOF.
pub async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Received> {
    loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..p]).to_string();
            let cl: usize = head
                .split("\r\n")
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < p + 4 + cl {
                let mut tmp = [0u8; 16384];
                let n = s.read(&mut tmp).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            let body = buf[p + 4..p + 4 + cl].to_vec();
            buf.drain(..p + 4 + cl);
            return Some(Received { head, body });
        }
        let mut tmp = [0u8; 16384];
        let n = s.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

async fn serve_conn(
    mut s: TcpStream,
    handler: Handler,
    received: Arc<Mutex<Vec<Received>>>,
    failures: Arc<Mutex<Vec<Instant>>>,
    sent: Arc<Mutex<Vec<Vec<Duration>>>>,
) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut s, &mut buf).await {
        let read_at = Instant::now();
        received.lock().unwrap().push(req.clone());
        let slot = {
            let mut g = sent.lock().unwrap();
            g.push(Vec::new());
            g.len() - 1
        };
        let script = handler(&req);
        tokio::time::sleep(script.head_delay).await;
        let mut head = format!("HTTP/1.1 {} X\r\n", script.status);
        for (k, v) in &script.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if script.chunked {
            head.push_str("transfer-encoding: chunked\r\n");
        }
        head.push_str("\r\n");
        if s.write_all(head.as_bytes()).await.is_err() {
            failures.lock().unwrap().push(Instant::now());
            return;
        }
        // Chunks go out on an absolute schedule from the head, so sleep overshoot never adds up.
        let mut at = Instant::now();
        for (delay, chunk) in &script.chunks {
            if !delay.is_zero() {
                at += *delay;
                tokio::time::sleep_until(at).await;
            }
            let res = if script.chunked {
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(chunk);
                framed.extend_from_slice(b"\r\n");
                s.write_all(&framed).await
            } else {
                s.write_all(chunk).await
            };
            if res.is_err() {
                failures.lock().unwrap().push(Instant::now());
                return;
            }
            sent.lock().unwrap()[slot].push(read_at.elapsed());
        }
        match script.finish {
            Finish::Clean => {
                if script.chunked && s.write_all(b"0\r\n\r\n").await.is_err() {
                    failures.lock().unwrap().push(Instant::now());
                    return;
                }
            }
            Finish::Reset => {
                // Linger 0 makes the close a reset; it does not block.
                #[allow(deprecated)]
                let _ = s.set_linger(Some(Duration::ZERO));
                return;
            }
            Finish::Stall(d) => {
                tokio::time::sleep(d).await;
                return;
            }
        }
    }
}

/// A unique scratch directory for one test.
pub fn scratch(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "tokentap-test-{}-{}-{}",
        std::process::id(),
        tag,
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A proxy in front of `upstream_url`, logging to a scratch file; `extra` is appended TOML.
pub struct TestProxy {
    pub running: Option<Running>,
    pub addr: std::net::SocketAddr,
    pub admin: std::net::SocketAddr,
    pub log: PathBuf,
    pub dir: PathBuf,
}

pub async fn proxy(upstream_url: &str, extra: &str) -> TestProxy {
    proxy_toml(&format!(
        "[[routes]]\nname = \"default\"\nupstream = \"{upstream_url}\"\n{extra}"
    ))
    .await
}

/// A proxy from a TOML body (listen/admin/log are filled in).
pub async fn proxy_toml(body: &str) -> TestProxy {
    let dir = scratch("proxy");
    let log = dir.join("requests.jsonl");
    let over = Overrides {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        log: Some(log.display().to_string()),
        ..Overrides::default()
    };
    let config = Config::from_toml(body, "test.toml", &over).unwrap();
    let running = Running::start(config).await.unwrap();
    let addr = running.addr;
    let admin = running.admin.unwrap();
    TestProxy {
        running: Some(running),
        addr,
        admin,
        log,
        dir,
    }
}

impl TestProxy {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Wait until the log holds at least `n` records (up to 5 s) and return them all.
    pub async fn records(&self, n: usize) -> Vec<RequestRecord> {
        wait_records(&self.log, n).await
    }

    /// A streamed chat completion through the proxy, with a fresh client.
    pub async fn chat(&self) -> Got {
        self.chat_with(&client()).await
    }

    /// A streamed chat completion through the proxy, with the given client.
    pub async fn chat_with(&self, c: &TestClient) -> Got {
        send(
            c,
            "POST",
            &self.url("/v1/chat/completions"),
            &[],
            chat_body("m", true),
        )
        .await
        .unwrap()
    }

    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        let r = send(
            &client(),
            "GET",
            &format!("http://{}{}", self.admin, path),
            &[],
            Vec::new(),
        )
        .await
        .unwrap();
        (r.status, String::from_utf8_lossy(&r.body).to_string())
    }

    pub async fn shutdown(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await.unwrap();
        }
    }
}

pub async fn wait_records(path: &Path, n: usize) -> Vec<RequestRecord> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // Only whole lines: the writer may be mid-write.
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let recs: Vec<RequestRecord> = whole
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad record {l}: {e}")))
            .collect();
        if recs.len() >= n || Instant::now() > deadline {
            return recs;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(c)
}

/// A response as the client saw it.
pub struct Got {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
    /// Arrival time of each body frame, from when the request was sent.
    pub frame_times: Vec<Duration>,
    /// The body ended with an error (cut stream).
    pub body_error: bool,
}

pub async fn send(
    c: &TestClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Got, hyper_util::client::legacy::Error> {
    let mut b = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let t0 = Instant::now();
    let resp = c
        .request(b.body(Full::new(Bytes::from(body))).unwrap())
        .await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut out = Vec::new();
    let mut frame_times = Vec::new();
    let mut body_error = false;
    while let Some(f) = body.frame().await {
        match f {
            Ok(f) => {
                if let Some(d) = f.data_ref() {
                    out.extend_from_slice(d);
                    frame_times.push(t0.elapsed());
                }
            }
            Err(_) => {
                body_error = true;
                break;
            }
        }
    }
    Ok(Got {
        status,
        headers,
        body: out,
        frame_times,
        body_error,
    })
}

/// A raw TCP client that has sent a complete streamed chat request to `addr` (for tests that
/// read partially, hang up, or need the wire).
pub async fn raw_chat(addr: std::net::SocketAddr) -> TcpStream {
    raw_chat_with(addr, &[]).await
}

/// [`raw_chat`] with extra request headers.
pub async fn raw_chat_with(addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> TcpStream {
    let body = chat_body("m", true);
    let mut s = TcpStream::connect(addr).await.unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    s
}

/// Read from a raw connection until the bytes so far contain `needle`; everything read.
pub async fn read_until(s: &mut TcpStream, needle: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended before {needle:?}");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// A chat request body.
pub fn chat_body(model: &str, stream: bool) -> Vec<u8> {
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}],"max_tokens":16,"stream":{stream}}}"#).into_bytes()
}

/// A stand-in for a service tokentap posts batches to (an OTLP collector, ClickHouse's HTTP
/// interface), on a fixed loopback address so it can go away and come back: every request is
/// kept with the status it got, the next queued status answers it (200 once none is queued),
/// after `delay`.
pub struct Collector {
    pub addr: std::net::SocketAddr,
    /// Each request, with the status it was answered.
    pub got: Arc<Mutex<Vec<(Received, u16)>>>,
    /// Statuses to answer, in order.
    pub statuses: Arc<Mutex<std::collections::VecDeque<u16>>>,
    /// The accept loop and each connection's task.
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Collector {
    pub async fn spawn() -> Collector {
        Collector::on("127.0.0.1:0".parse().unwrap(), Duration::ZERO).await
    }

    pub async fn on(addr: std::net::SocketAddr, delay: Duration) -> Collector {
        let l = TcpListener::bind(addr).await.unwrap();
        let addr = l.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let statuses = Arc::new(Mutex::new(std::collections::VecDeque::new()));
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let (g, st, ts) = (got.clone(), statuses.clone(), tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (g, st) = (g.clone(), st.clone());
                let conn = tokio::spawn(async move {
                    let mut buf = Vec::new();
                    while let Some(r) = read_request(&mut s, &mut buf).await {
                        tokio::time::sleep(delay).await;
                        let status = st.lock().unwrap().pop_front().unwrap_or(200);
                        g.lock().unwrap().push((r, status));
                        let body = if status == 200 { "" } else { "refused" };
                        let resp = format!(
                            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
                ts.lock().unwrap().push(conn);
            }
        });
        tasks.lock().unwrap().push(accept);
        Collector {
            addr,
            got,
            statuses,
            tasks,
        }
    }

    /// Stop listening, and drop every connection.
    pub fn down(self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// The value of the metric line of `text` that starts with `prefix`, if any.
pub fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}
