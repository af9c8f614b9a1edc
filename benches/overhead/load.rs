//! The load generator: a plain HTTP/1.1 reader on keep-alive connections (each event timed by
//! the read that completed it), the paced and closed-loop cells, throughput, slow streams.

use super::*;

#[derive(Default)]
pub(crate) struct Samples {
    pub(crate) ttft_us: Vec<f64>,
    pub(crate) itl_us: Vec<f64>,
    /// Client send → upstream arrival of the request head.
    pub(crate) req_us: Vec<f64>,
    /// How late the upstream wrote the first event (see [`FIRST_WRITE`]).
    pub(crate) late_us: Vec<f64>,
    /// The first event's trip: upstream write → client read.
    pub(crate) trip_us: Vec<f64>,
    /// The pacer's wake-up that wrote each first event.
    pub(crate) first_wake: Vec<u64>,
    /// Events received.
    pub(crate) events: u64,
}

impl Samples {
    pub(crate) fn absorb(&mut self, o: Samples) {
        self.ttft_us.extend(o.ttft_us);
        self.itl_us.extend(o.itl_us);
        self.req_us.extend(o.req_us);
        self.late_us.extend(o.late_us);
        self.trip_us.extend(o.trip_us);
        self.first_wake.extend(o.first_wake);
        self.events += o.events;
    }
}

/// An order of `n` targets, to be repeated, in which every target comes right after every
/// other one exactly once: a closed walk over all ordered pairs (Hierholzer's algorithm on the
/// complete directed graph). What ran before a request changes its latency: after `direct` the
/// proxies' core has been idle for a whole stream (~84 ms) and wakes cold; after another proxy
/// it was busy a moment ago. A plain rotation puts the same proxy after `direct` every time
/// (it once cost tokentap ~60 µs of TTFT at C=1 against an identical copy of itself placed
/// later); this order gives every target the same share of each predecessor.
pub(crate) fn carryover_order(n: usize) -> Vec<usize> {
    if n < 3 {
        return (0..n).collect();
    }
    let mut unused: Vec<Vec<usize>> = (0..n)
        .map(|v| (0..n).filter(|&w| w != v).rev().collect())
        .collect();
    let (mut stack, mut walk) = (vec![0], Vec::new());
    while let Some(&v) = stack.last() {
        match unused[v].pop() {
            Some(w) => stack.push(w),
            None => walk.extend(stack.pop()),
        }
    }
    walk.reverse();
    walk.pop(); // the walk is closed: its last step returns to the first target
    walk
}

/// The load generator's HTTP/1.1 client: one keep-alive connection, its requests in turn, each
/// response read straight off the socket. The pooled client used before (hyper-util's) handed
/// every chunk from a connection task to the request's task: two wake-ups and a channel per
/// event, on the core the upstream shares. Without it, direct's request leg p50 at C=1 went from
/// 55 to 21 µs and its chunks/s at C=64 from 1.2–1.4 M to 2.1–2.4 M. (What cleaned up the tails
/// at C=64 was not this but spreading the clients' starts: see [`closed_loop`].)
pub(crate) struct Conn {
    pub(crate) addr: SocketAddr,
    pub(crate) sock: Option<TcpStream>,
    pub(crate) buf: Vec<u8>,
}

impl Conn {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            sock: None,
            buf: Vec::with_capacity(1 << 16),
        }
    }
}

/// With OVERHEAD_POST=1 the load generator's requests are POSTs with a chat-completion body, as
/// an LLM client sends (tokentap then reads and inspects the body); else bodyless GETs.
pub(crate) fn post_body() -> Option<&'static str> {
    static BODY: std::sync::LazyLock<Option<&'static str>> = std::sync::LazyLock::new(|| {
        std::env::var("OVERHEAD_POST").is_ok_and(|v| v == "1").then_some(
            r#"{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,"temperature":0,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarise the trade-offs of running a measuring proxy in front of an inference server, in three sentences."}]}"#,
        )
    });
    *BODY
}

/// One streamed request: TTFT (the first event complete) and the gaps between events, in µs,
/// each event timed by the read that completed it (events that arrive in one read are 0 apart).
/// Counting events, not chunks, keeps the figures independent of how a proxy re-chunks.
pub(crate) async fn one(c: &mut Conn, path: &str, s: &mut Samples) -> usize {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let t0 = Instant::now();
    let req = match post_body() {
        Some(body) => format!(
            "POST {path}?id={id} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            c.addr,
            body.len()
        ),
        None => format!("GET {path}?id={id} HTTP/1.1\r\nhost: {}\r\n\r\n", c.addr),
    };
    let mut sock = match c.sock.take() {
        Some(sock) => sock,
        None => {
            let Ok(sock) = TcpStream::connect(c.addr).await else {
                return 0;
            };
            sock.set_nodelay(true).unwrap();
            sock
        }
    };
    if sock.write_all(req.as_bytes()).await.is_err() {
        return 0;
    }
    c.buf.clear();
    // tokentap's own HTTP/1.1 response codec (src/proxy/h1.rs): head, framing and body decoding.
    let mut dec: Option<(h1::Decoder, bool)> = None;
    let mut body = bytes::BytesMut::new();
    let (mut bytes, mut seen) = (0, 0);
    let mut prev = t0;
    let mut arrival_taken = false;
    let mut first_read = None;
    // One timer per request, not per read: the load generator's own cost stays per event.
    let stuck = tokio::time::sleep(STUCK);
    tokio::pin!(stuck);
    let complete = loop {
        if c.buf.capacity() - c.buf.len() < 4096 {
            c.buf.reserve(1 << 16);
        }
        // An error ends the response as an end of file would.
        let got = tokio::select! {
            biased;
            r = sock.read_buf(&mut c.buf) => r.unwrap_or_default(),
            () = &mut stuck => {
                STUCK_REQUESTS.fetch_add(1, Ordering::Relaxed);
                break false;
            }
        };
        let now = Instant::now();
        if !arrival_taken {
            // The request has reached the upstream by the time anything comes back.
            if let Some(at) = ARRIVALS.lock().unwrap().remove(&id) {
                s.req_us.push((at - t0).as_secs_f64() * 1e6);
            }
            arrival_taken = true;
        }
        if dec.is_none() {
            match h1::parse_head(&c.buf) {
                Ok(Some(head)) => {
                    let Ok((framing, reuse)) = h1::framing(&http::Method::GET, &head) else {
                        break false;
                    };
                    c.buf.drain(..head.len);
                    dec = Some((h1::Decoder::new(framing), reuse));
                }
                Ok(None) => {}
                Err(_) => break false,
            }
        }
        let done = match dec.as_mut() {
            Some((d, _)) => {
                body.clear();
                let Ok(used) = d.decode(&c.buf, &mut body) else {
                    break false;
                };
                c.buf.drain(..used);
                bytes += body.len();
                let done = d.is_done() || (got == 0 && d.on_eof());
                while seen < bytes / EVENT.len() {
                    match seen {
                        0 => {
                            s.ttft_us.push((now - t0).as_secs_f64() * 1e6);
                            first_read = Some(now);
                        }
                        _ => s.itl_us.push((now - prev).as_secs_f64() * 1e6),
                    }
                    prev = now;
                    seen += 1;
                }
                done
            }
            None => false,
        };
        if done {
            break true;
        }
        if got == 0 {
            break false;
        }
    };
    if complete && dec.is_some_and(|(_, reuse)| reuse) {
        c.sock = Some(sock);
    }
    if let Some((due, written, wake)) = FIRST_WRITE.lock().unwrap().remove(&id) {
        s.first_wake.push(wake);
        s.late_us
            .push(written.saturating_duration_since(due).as_secs_f64() * 1e6);
        if let Some(read) = first_read {
            s.trip_us
                .push(read.saturating_duration_since(written).as_secs_f64() * 1e6);
        }
    }
    s.events += seen as u64;
    seen
}

/// A paced stream's length: 20 ms to the first event, then 1 ms apart.
pub(crate) const PACED_STREAM: Duration = Duration::from_millis(20 + EVENTS as u64 - 1);

/// `conc` clients, each making its requests one after another, `requests` measured in all.
///
/// In step (`spread` false), all start together, and identical streams keep them in step for the
/// whole cell: `conc` requests reach the proxy at once and, 20 ms later, `conc` first events —
/// a burst, where the median stream waits behind half the others. Spread, client *k* starts
/// *k*/`conc` of a stream later, as independent users would, and every client keeps making
/// (unmeasured) requests until all have their samples, so each sample sees `conc` streams.
pub(crate) async fn closed_loop(
    addr: SocketAddr,
    path: &'static str,
    conc: usize,
    requests: usize,
    spread: bool,
) -> Samples {
    let next = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let per_client = requests.div_ceil(conc.max(1));
    let mut tasks = Vec::new();
    for k in 0..conc {
        let (next, finished) = (next.clone(), finished.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::new(addr);
            if spread {
                tokio::time::sleep(PACED_STREAM * k as u32 / conc as u32).await;
            }
            // One unmeasured request first: the client's connection is open before sampling.
            // Its events count (the proxy's CPU for it is in the cell's), its times do not.
            let mut warm = Samples::default();
            one(&mut c, path, &mut warm).await;
            let mut s = Samples {
                events: warm.events,
                ..Samples::default()
            };
            if !spread {
                while next.fetch_add(1, Ordering::Relaxed) < requests as u64 {
                    one(&mut c, path, &mut s).await;
                }
                return s;
            }
            for _ in 0..per_client {
                one(&mut c, path, &mut s).await;
            }
            finished.fetch_add(1, Ordering::Relaxed);
            while finished.load(Ordering::Relaxed) < conc as u64 {
                let mut more = Samples::default();
                one(&mut c, path, &mut more).await;
                s.events += more.events;
            }
            s
        }));
    }
    let mut all = Samples::default();
    for t in tasks {
        all.absorb(t.await.unwrap());
    }
    all
}

/// Full speed for `secs`: requests/s and events (chunks)/s.
/// Full speed for `secs`: (requests, chunks, elapsed seconds).
pub(crate) async fn throughput(addr: SocketAddr, conc: usize, secs: f64) -> (u64, u64, f64) {
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let reqs = Arc::new(AtomicU64::new(0));
    let chunks = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let (reqs, chunks) = (reqs.clone(), chunks.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::new(addr);
            let mut s = Samples::default();
            while Instant::now() < stop {
                let n = one(&mut c, "/fast", &mut s).await;
                s.itl_us.clear();
                s.ttft_us.clear();
                s.req_us.clear();
                reqs.fetch_add(1, Ordering::Relaxed);
                chunks.fetch_add(n as u64, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (
        reqs.load(Ordering::Relaxed),
        chunks.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64(),
    )
}

/// Nearest-rank percentile (`tokentap::stats`), NaN when there is nothing.
pub(crate) fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    tokentap::stats::pct(v, p).unwrap_or(f64::NAN)
}

/// Open `n` slow streams through `addr` (raw sockets, first event read), return the proxy's RSS.
pub(crate) async fn slow_streams(addr: SocketAddr, n: usize, pid: u32) -> (u64, u64) {
    let idle = rss_kb(pid);
    let mut socks = Vec::with_capacity(n);
    for _ in 0..n {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            break;
        };
        if s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .is_err()
        {
            break;
        }
        socks.push(s);
    }
    let mut buf = [0u8; 1024];
    for s in socks.iter_mut() {
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
    }
    let loaded = rss_kb(pid);
    drop(socks);
    (idle, loaded)
}

/// Open `n` slow streams through `addr` over HTTP/2 (prior knowledge, spread over `conns`
/// connections), read each response's first event, return the proxy's RSS before and after and
/// how many streams got their event. The proxy then holds one upstream socket per stream but only
/// `conns` client sockets, so 10,000 streams fit the open-file limit.
pub(crate) async fn slow_streams_h2(
    addr: SocketAddr,
    n: usize,
    conns: usize,
    pid: u32,
) -> (u64, u64, usize) {
    let idle = rss_kb(pid);
    let per = n.div_ceil(conns.max(1));
    let (mut senders, mut drivers) = (Vec::new(), Vec::new());
    // Each stream is read by a task of its own, as a client would.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<bool>();
    let mut readers = tokio::task::JoinSet::new();
    let debug = std::env::var("OVERHEAD_DEBUG").is_ok();
    'conns: for c in 0..conns {
        let Ok(tcp) = TcpStream::connect(addr).await else {
            break;
        };
        // 500 streams' first events can land before their readers run: raise h2's budget for
        // small unread DATA frames (default 32 KiB a connection) so the client keeps them.
        let Ok((mut send, conn)) = h2::client::Builder::new()
            .data_frame_budget(64 << 20)
            .handshake::<_, Bytes>(tcp)
            .await
        else {
            break;
        };
        drivers.push(tokio::spawn(conn));
        for _ in 0..per.min(n.saturating_sub(c * per)) {
            send = match send.ready().await {
                Ok(s) => s,
                Err(_) => break 'conns,
            };
            let req = hyper::Request::get("http://x/slow").body(()).unwrap();
            let Ok((resp, _)) = send.send_request(req, true) else {
                break 'conns;
            };
            let tx = tx.clone();
            readers.spawn(async move {
                let resp = match tokio::time::timeout(Duration::from_secs(20), resp).await {
                    Ok(Ok(r)) => r,
                    e => {
                        if debug {
                            eprintln!("h2 stream: {e:?}");
                        }
                        let _ = tx.send(false);
                        return;
                    }
                };
                let served = resp.status() == 200;
                let mut body = resp.into_body();
                let first = tokio::time::timeout(Duration::from_secs(20), body.data()).await;
                let _ = tx.send(served && matches!(first, Ok(Some(Ok(_)))));
                drop(tx);
                // Hold the stream open until the phase is over (the task is aborted).
                std::future::pending::<()>().await;
                drop(body);
            });
        }
        senders.push(send);
    }
    drop(tx);
    let mut got = 0;
    for _ in 0..readers.len() {
        match rx.recv().await {
            Some(ok) => got += usize::from(ok),
            None => break,
        }
    }
    let loaded = rss_kb(pid);
    readers.abort_all();
    while readers.join_next().await.is_some() {}
    drop(senders);
    for d in drivers {
        d.abort();
    }
    (idle, loaded, got)
}
