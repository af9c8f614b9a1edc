//! End-to-end overhead of a proxy on the same streaming load, interleaved so drift cancels:
//! direct to an in-process SSE upstream, through tokentap, and (when installed) through nginx
//! and HAProxy. Prints added TTFT and ITL, throughput, proxy CPU per 1,000 chunks and memory.
//!
//!   scripts/overhead.sh            # installs nginx + haproxy, pins cores, runs this
//!   cargo bench --bench overhead   # whatever proxies are on PATH
//!
//! Env: OVERHEAD_PROXY_CPU (core for the proxies, via taskset); OVERHEAD_STREAMS (slow streams
//! for the memory phase, default 9000 — a proxy holds two sockets per stream and the open-file
//! limit here is a hard 20000; 0 skips it); OVERHEAD_QUICK=1 (fewer rounds); OVERHEAD_PROXIES
//! (comma list, default `tokentap,nginx,haproxy`); OVERHEAD_TOKENTAP_LOG=off (tokentap without
//! its request log, to see what the log costs); OVERHEAD_DEBUG=1 (process family, CPU readings);
//! OVERHEAD_KEEP=1 (keep the scratch directory with tokentap's own records of the run);
//! OVERHEAD_LATENCY_C / OVERHEAD_FULL_C (comma lists of concurrencies for the paced and the
//! full-speed cells, default `1,8,64` and `64,256`; empty skips); OVERHEAD_ROUNDS (paced rounds:
//! per target, 32 requests each at C=1 and one closed-loop slice each at C>1, rounded up to whole
//! cycles of the order);
//! OVERHEAD_SPREAD_C (the concurrencies also run with the clients' starts spread over a stream,
//! default `8,64`; see `closed_loop`); OVERHEAD_TAILS=1 (each paced cell's TTFT tail per target,
//! and its first events split: how late the upstream wrote them, and their trip from the
//! upstream's write to the client's read);
//! OVERHEAD_H2_STREAMS (tokentap's slow streams with HTTP/2 clients, default 10000; 0 skips);
//! OVERHEAD_TOKENTAP=<path> (the tokentap to measure; scripts/overhead.sh sets it to its
//! `cargo build --release`, see `tokentap_bin`);
//! OVERHEAD_COALESCE_US (the upstream pacer writes events due within this many µs of each other
//! in one wake-up, default 20; see `coalesce`);
//! OVERHEAD_TOKENTAP_B=<path to another tokentap binary> (a second build as target
//! `tokentap-b`: an A/B of two builds in one interleaved run). `tcp-relay`, `hyper-only` and
//! `hyper-tt` in OVERHEAD_PROXIES add three reference proxies (see `baseline`); OVERHEAD_POST=1
//! (the paced and full-speed requests are POSTs with a chat-completion body, see `post_body`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokentap::proxy::h1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "overhead/baseline.rs"]
mod baseline;

const EVENTS: usize = 64;

/// When the upstream had each request's head, by the request's `id` query parameter: the request
/// leg (client send → upstream arrival) is measured in one process, on one clock.
static ARRIVALS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<u64, Instant>>> =
    std::sync::LazyLock::new(Default::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
/// When the pacer wrote each paced request's first event, when it was due, and in which of the
/// pacer's wake-ups (request id → (due, written, wake-up number)): the upstream's own timing
/// error, which lands in TTFT, the start of the first event's trip through the proxy, and how
/// many first events shared a wake-up.
static FIRST_WRITE: std::sync::LazyLock<std::sync::Mutex<FirstWrites>> =
    std::sync::LazyLock::new(Default::default);
type FirstWrites = std::collections::HashMap<u64, (Instant, Instant, u64)>;
/// Requests the load generator gave up on, unfinished after `STUCK` (a paced stream takes 84 ms):
/// the bench must end by itself even if a proxy stalls a stream.
static STUCK_REQUESTS: AtomicU64 = AtomicU64::new(0);
const STUCK: Duration = Duration::from_secs(30);
const EVENT: &str = "data: {\"id\":\"chatcmpl-overhead\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"}}]}\n\n";

/// The upstream: `/paced` = first event 20 ms after the request, then 1 ms apart; `/fast` = all
/// at once; `/slow` = one event then silence for a minute.
///
/// It runs on its own threads, at real-time priority when allowed, and a paced stream's events
/// are written by a pacer thread at their exact instants (see [`pacer`]): the upstream's timing
/// must not depend on the path under test. With tokio timers on the clients' runtime it did: tokio
/// parks for a whole number of milliseconds counted from the last wake-up, so every wake-up
/// between two events (a frame arriving through a proxy, another request arriving) pushed the next
/// event later by up to a millisecond, and a proxy's own timing came back as added ITL and TTFT.
fn upstream() -> SocketAddr {
    let (jobs, rx) = std::sync::mpsc::channel();
    let (pacer_rt, pacer_ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = pacer_rt.send(realtime_if_allowed());
        pacer(rx)
    });
    let (tx, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt_ok = realtime_if_allowed();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send((l.local_addr().unwrap(), rt_ok)).unwrap();
            serve_upstream(l, jobs).await;
        });
    });
    let (addr, rt_ok) = ready.recv().unwrap();
    UPSTREAM_RT.store(
        rt_ok && pacer_ready.recv().unwrap_or(false),
        Ordering::Relaxed,
    );
    addr
}

/// Real-time priority for the calling thread, when allowed (root): the upstream then runs the
/// moment an event is due, as it would on its own machine, instead of queueing behind the clients
/// that share its core; its sleeps also lose the kernel's timer slack (50 µs by default).
fn realtime_if_allowed() -> bool {
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return false;
    };
    let Some(tid) = link.file_name().and_then(|t| t.to_str()).map(str::to_owned) else {
        return false;
    };
    Command::new("chrt")
        .args(["-f", "-p", "10", &tid])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Both upstream threads (the server and the pacer) run at real-time priority.
static UPSTREAM_RT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One event as a chunk of a chunked body.
fn sse_chunk() -> String {
    format!("{:x}\r\n{EVENT}\r\n", EVENT.len())
}

/// One paced stream handed to the pacer: its socket (a second handle on the connection's socket),
/// its next event's instant and how many are left; `done` gets the socket back, or nothing if a
/// write failed.
struct Paced {
    id: Option<u64>,
    sock: std::net::TcpStream,
    next: Instant,
    left: usize,
    done: tokio::sync::oneshot::Sender<Option<std::net::TcpStream>>,
}

/// How close two paced events' instants must be for the pacer to write them in one wake-up
/// (`OVERHEAD_COALESCE_US`, default 20 µs). An event due within this of the wake-up goes out
/// early by at most this much.
fn coalesce() -> Duration {
    Duration::from_micros(env_num("OVERHEAD_COALESCE_US").map_or(20, |us| us as u64))
}

/// Writes every paced stream's events at their instants: it sleeps until the earliest one is due
/// (exactly: the wait is in nanoseconds, and a new stream arriving recomputes it), writes all that
/// are due, and ends each stream with the chunked terminator.
fn pacer(rx: std::sync::mpsc::Receiver<Paced>) {
    let coalesce = coalesce();
    use std::io::Write;
    use std::sync::mpsc::RecvTimeoutError;
    let chunk = sse_chunk();
    let mut streams: Vec<Paced> = Vec::new();
    let mut wake: u64 = 0;
    let write = |sock: &mut std::net::TcpStream, mut bytes: &[u8]| -> bool {
        // The socket is non-blocking (it is tokio's too); a full send buffer is waited out.
        let give_up = Instant::now() + Duration::from_secs(5);
        while !bytes.is_empty() {
            match sock.write(bytes) {
                Ok(0) => return false,
                Ok(n) => bytes = &bytes[n..],
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < give_up =>
                {
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(_) => return false,
            }
        }
        true
    };
    loop {
        // Events due within `coalesce` of now go out together: one wake-up for streams whose
        // instants nearly coincide (at C=64 one wake-up per event cost more than the core had).
        let now = Instant::now() + coalesce;
        wake += 1;
        let mut i = 0;
        while i < streams.len() {
            if streams[i].next > now {
                i += 1;
                continue;
            }
            let p = &mut streams[i];
            let written = Instant::now();
            let mut ok = write(&mut p.sock, chunk.as_bytes());
            if let (EVENTS, Some(id)) = (p.left, p.id) {
                FIRST_WRITE
                    .lock()
                    .unwrap()
                    .insert(id, (p.next, written, wake));
            }
            p.left -= 1;
            p.next += Duration::from_millis(1);
            if p.left == 0 || !ok {
                ok = ok && write(&mut p.sock, b"0\r\n\r\n");
                let p = streams.swap_remove(i);
                let _ = p.done.send(ok.then_some(p.sock));
                continue;
            }
            i += 1;
        }
        let got = match streams.iter().map(|p| p.next).min() {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
        };
        match got {
            Ok(p) => streams.push(p),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

async fn serve_upstream(l: TcpListener, jobs: std::sync::mpsc::Sender<Paced>) {
    while let Ok((mut s, _)) = l.accept().await {
        let _ = s.set_nodelay(true);
        let jobs = jobs.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut tmp = [0u8; 8192];
            // The pacer's handle on this connection's socket, made at its first paced request.
            let mut paced_sock: Option<std::net::TcpStream> = None;
            loop {
                let head_end = loop {
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                    match s.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                };
                let arrived = Instant::now();
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                buf.drain(..head_end);
                // A request body (OVERHEAD_POST=1) is read whole and dropped.
                let body_len = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                while buf.len() < body_len {
                    match s.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
                buf.drain(..body_len);
                let mode = head.split(' ').nth(1).unwrap_or("/fast").to_owned();
                let id = mode.split("id=").nth(1).and_then(|v| v.parse::<u64>().ok());
                if let Some(id) = id {
                    ARRIVALS.lock().unwrap().insert(id, arrived);
                }
                let chunk = sse_chunk();
                if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n").await.is_err() {
                        return;
                    }
                if mode.contains("fast") {
                    let all = chunk.repeat(EVENTS) + "0\r\n\r\n";
                    if s.write_all(all.as_bytes()).await.is_err() {
                        return;
                    }
                    continue;
                }
                if mode.contains("slow") {
                    // Silence until the proxy hangs up (or a minute): the socket is freed
                    // as soon as the proxy lets go, so the next proxy's phase has the fds.
                    let _ = s.write_all(chunk.as_bytes()).await;
                    let mut sink = [0u8; 64];
                    let _ = tokio::time::timeout(Duration::from_secs(60), s.read(&mut sink)).await;
                    return;
                }
                let start = Instant::now();
                let sock = match paced_sock.take() {
                    Some(sock) => sock,
                    None => {
                        let std = s.into_std().unwrap();
                        let second = std.try_clone().unwrap();
                        s = TcpStream::from_std(std).unwrap();
                        second
                    }
                };
                let (done, back) = tokio::sync::oneshot::channel();
                let job = Paced {
                    id,
                    sock,
                    next: start + Duration::from_millis(20),
                    left: EVENTS,
                    done,
                };
                if jobs.send(job).is_err() {
                    return;
                }
                // The client reads the whole stream before it sends the next request.
                match back.await {
                    Ok(Some(sock)) => paced_sock = Some(sock),
                    _ => return,
                }
            }
        });
    }
}

struct Proxy {
    name: &'static str,
    addr: SocketAddr,
    child: Option<Child>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            // TERM first: nginx's and HAProxy's masters stop their workers on it; a KILL would
            // orphan them.
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            for _ in 0..50 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A process and its direct children (found by parent pid in /proc).
fn family(pid: u32) -> Vec<u32> {
    let mut v = vec![pid];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|x| x.1.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u32>().ok());
            if ppid == Some(pid) {
                v.push(p);
            }
        }
    }
    v
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.is_file())
        .or_else(|| {
            ["/usr/sbin", "/sbin"]
                .iter()
                .map(|d| Path::new(d).join(cmd))
                .find(|p| p.is_file())
        })
}

fn spawn(cmd: &Path, args: &[String]) -> Child {
    let mut c = match std::env::var("OVERHEAD_PROXY_CPU") {
        Ok(cpu) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu).arg(cmd);
            c
        }
        Err(_) => Command::new(cmd),
    };
    c.args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn proxy")
}

async fn wait_up(addr: SocketAddr) {
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{addr} never came up");
}

/// The tokentap under test: `OVERHEAD_TOKENTAP` (scripts/overhead.sh sets it to a copy of
/// `cargo build --release`), else the binary cargo built for this bench. That one is not the
/// release build: a bench build unifies the dev-dependencies' features into tokentap's, and
/// tokio's `test-util` (the unit tests' paused clock) puts a lock in every read of the runtime's
/// clock.
fn tokentap_bin() -> PathBuf {
    std::env::var_os("OVERHEAD_TOKENTAP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tokentap")))
}

/// A tokentap in front of `up`, logging to `dir` (unless OVERHEAD_TOKENTAP_LOG=off).
fn start_tokentap(
    name: &'static str,
    tt: PathBuf,
    up: SocketAddr,
    dir: &Path,
    log_name: &str,
) -> Proxy {
    start_served(name, tt, &[], up, dir, log_name)
}

/// `bin` run as `bin <pre…> serve --upstream … --listen … --admin off --log …`: tokentap, or
/// this bench binary as a reference proxy (which ignores the last two).
fn start_served(
    name: &'static str,
    bin: PathBuf,
    pre: &[&str],
    up: SocketAddr,
    dir: &Path,
    log_name: &str,
) -> Proxy {
    let port = free_port();
    let log = match std::env::var("OVERHEAD_TOKENTAP_LOG") {
        Ok(v) if v == "off" => v,
        _ => dir.join(log_name).display().to_string(),
    };
    let args: Vec<String> = pre
        .iter()
        .chain(&[
            "serve",
            "--upstream",
            &format!("http://{up}"),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin",
            "off",
            "--log",
        ])
        .map(|s| s.to_string())
        .chain(std::iter::once(log))
        .collect();
    Proxy {
        name,
        addr: format!("127.0.0.1:{port}").parse().unwrap(),
        child: Some(spawn(&bin, &args)),
    }
}

async fn start_proxies(up: SocketAddr, dir: &Path) -> Vec<Proxy> {
    let mut v = Vec::new();
    let only =
        std::env::var("OVERHEAD_PROXIES").unwrap_or_else(|_| "tokentap,nginx,haproxy".into());
    v.push(start_tokentap(
        "tokentap",
        tokentap_bin(),
        up,
        dir,
        "tokentap.jsonl",
    ));
    // A second tokentap build, for an A/B of two builds in one run (same order, same load).
    if let Some(b) = std::env::var_os("OVERHEAD_TOKENTAP_B") {
        v.push(start_tokentap(
            "tokentap-b",
            PathBuf::from(b),
            up,
            dir,
            "tokentap-b.jsonl",
        ));
    }
    if let Some(nginx) = which("nginx").filter(|_| only.contains("nginx")) {
        let port = free_port();
        let d = dir.display();
        let conf = format!(
            "worker_processes 1; daemon off; error_log {d}/nginx.err warn; pid {d}/nginx.pid;\n\
             events {{ worker_connections 19500; }}\n\
             http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
               upstream up {{ server {up}; keepalive 1024; }}\n\
               server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; proxy_request_buffering off; }} }} }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let args = vec![
            "-c".into(),
            dir.join("nginx.conf").display().to_string(),
            "-p".into(),
            dir.display().to_string(),
        ];
        v.push(Proxy {
            name: "nginx",
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            child: Some(spawn(&nginx, &args)),
        });
    }
    if let Some(haproxy) = which("haproxy").filter(|_| only.contains("haproxy")) {
        let port = free_port();
        let conf = format!(
            "global\n  maxconn 9500\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n\
             frontend f\n  bind 127.0.0.1:{port}\n  option http-no-delay\n  default_backend b\nbackend b\n  option http-no-delay\n  server s1 {up}\n"
        );
        std::fs::write(dir.join("haproxy.cfg"), conf).unwrap();
        let args = vec![
            "-db".into(),
            "-f".into(),
            dir.join("haproxy.cfg").display().to_string(),
        ];
        v.push(Proxy {
            name: "haproxy",
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            child: Some(spawn(&haproxy, &args)),
        });
    }
    // The reference proxies, only when named in OVERHEAD_PROXIES: this binary, re-run.
    for name in baseline::NAMES {
        if !only.split(',').any(|p| p.trim() == name) {
            continue;
        }
        let exe = std::env::current_exe().unwrap();
        v.push(start_served(
            name,
            exe,
            &[baseline::FLAG, name],
            up,
            dir,
            "unused.jsonl",
        ));
    }
    for p in &v {
        wait_up(p.addr).await;
    }
    v
}

/// CPU seconds used so far (utime + stime) by a process and its children.
fn cpu_s(pid: u32) -> f64 {
    // The process and its children: nginx's and HAProxy's work happens in workers.
    let one = |p: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let after = stat
            .rsplit_once(')')
            .map(|x| x.1.to_owned())
            .unwrap_or_default();
        let f: Vec<&str> = after.split_whitespace().collect();
        let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        ticks / 100.0
    };
    family(pid).into_iter().map(one).sum()
}

/// CPU time so far of every thread of these processes, in ns (the scheduler's own count, not
/// 10 ms ticks: a paced cell uses only tens of milliseconds of a proxy's CPU).
fn cpu_ns(procs: &[u32]) -> u64 {
    let mut sum = 0;
    for p in procs {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            sum += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    sum
}

/// The core the load generator and the upstream run on, when the bench is pinned to one.
fn own_core() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    list.parse().ok()
}

/// (all, idle, irq + softirq) ticks of one core (or of the machine) from /proc/stat.
fn core_ticks(core: Option<usize>) -> (u64, u64, u64) {
    let name = core.map_or_else(|| "cpu".to_owned(), |c| format!("cpu{c}"));
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
    else {
        return (0, 0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal …
    (v.iter().take(8).sum(), at(3) + at(4), at(5) + at(6))
}

/// How busy the load generator's core was between two readings: (busy %, irq + softirq %).
fn busy_pct(before: (u64, u64, u64), after: (u64, u64, u64)) -> (f64, f64) {
    let all = after.0.saturating_sub(before.0).max(1) as f64;
    let idle = after.1.saturating_sub(before.1) as f64;
    let irq = after.2.saturating_sub(before.2) as f64;
    (100.0 * (all - idle) / all, 100.0 * irq / all)
}

/// Resident memory of a process and its children (nginx and HAProxy may fork), in KiB.
fn rss_kb(pid: u32) -> u64 {
    let one = |p: u32| {
        std::fs::read_to_string(format!("/proc/{p}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("VmRSS:")
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    family(pid).into_iter().map(one).sum()
}

#[derive(Default)]
struct Samples {
    ttft_us: Vec<f64>,
    itl_us: Vec<f64>,
    /// Client send → upstream arrival of the request head.
    req_us: Vec<f64>,
    /// How late the upstream wrote the first event (see [`FIRST_WRITE`]).
    late_us: Vec<f64>,
    /// The first event's trip: upstream write → client read.
    trip_us: Vec<f64>,
    /// The pacer's wake-up that wrote each first event.
    first_wake: Vec<u64>,
    /// Events received.
    events: u64,
}

impl Samples {
    fn absorb(&mut self, o: Samples) {
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
fn carryover_order(n: usize) -> Vec<usize> {
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
struct Conn {
    addr: SocketAddr,
    sock: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Conn {
    fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            sock: None,
            buf: Vec::with_capacity(1 << 16),
        }
    }
}

/// With OVERHEAD_POST=1 the load generator's requests are POSTs with a chat-completion body, as
/// an LLM client sends (tokentap then reads and inspects the body); else bodyless GETs.
fn post_body() -> Option<&'static str> {
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
async fn one(c: &mut Conn, path: &str, s: &mut Samples) -> usize {
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
const PACED_STREAM: Duration = Duration::from_millis(20 + EVENTS as u64 - 1);

/// `conc` clients, each making its requests one after another, `requests` measured in all.
///
/// In step (`spread` false), all start together, and identical streams keep them in step for the
/// whole cell: `conc` requests reach the proxy at once and, 20 ms later, `conc` first events —
/// a burst, where the median stream waits behind half the others. Spread, client *k* starts
/// *k*/`conc` of a stream later, as independent users would, and every client keeps making
/// (unmeasured) requests until all have their samples, so each sample sees `conc` streams.
async fn closed_loop(
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
async fn throughput(addr: SocketAddr, conc: usize, secs: f64) -> (u64, u64, f64) {
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

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Open `n` slow streams through `addr` (raw sockets, first event read), return the proxy's RSS.
async fn slow_streams(addr: SocketAddr, n: usize, pid: u32) -> (u64, u64) {
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
async fn slow_streams_h2(addr: SocketAddr, n: usize, conns: usize, pid: u32) -> (u64, u64, usize) {
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

fn env_num(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// A comma list of concurrencies from the environment (empty: none), else the default.
fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

fn main() {
    // Re-run by `start_proxies` as a reference proxy (see `baseline`).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(baseline::FLAG) {
        return baseline::run(&args[1..]);
    }
    // `cargo test --all-targets` runs bench targets too: only `cargo bench` (which passes
    // --bench) runs the measurement.
    if !std::env::args().any(|a| a == "--bench") {
        // Under `cargo test`: check the interleaving order, then stop.
        for n in 3..8 {
            let order = carryover_order(n);
            let mut pairs: Vec<(usize, usize)> = (0..order.len())
                .map(|k| (order[k], order[(k + 1) % order.len()]))
                .collect();
            pairs.sort();
            let all: Vec<(usize, usize)> = (0..n)
                .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
                .collect();
            assert_eq!(pairs, all, "carryover_order({n}) = {order:?}");
        }
        println!("overhead: run with `cargo bench --bench overhead` or scripts/overhead.sh");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let quick = std::env::var("OVERHEAD_QUICK").is_ok();
        let streams: usize = std::env::var("OVERHEAD_STREAMS").ok().and_then(|v| v.parse().ok()).unwrap_or(9_000);
        let dir = std::env::temp_dir().join(format!("tokentap-overhead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let up = upstream();
        let proxies = start_proxies(up, &dir).await;
        match std::env::var_os("OVERHEAD_TOKENTAP") {
            Some(p) => println!("tokentap: {} (OVERHEAD_TOKENTAP)", Path::new(&p).display()),
            None => println!("tokentap: {} — built for this bench, with the dev-dependencies' features (tokio test-util), not the release build; scripts/overhead.sh measures the release build", tokentap_bin().display()),
        }
        println!("upstream: SSE, {EVENTS} events of {} bytes; paced = 20 ms to the first event, 1 ms apart, written at their instants by a pacer thread (events due within {} µs share a wake-up); upstream threads {}", EVENT.len(), coalesce().as_micros(),
            if UPSTREAM_RT.load(Ordering::Relaxed) { "at real-time priority" } else { "at normal priority (real-time not allowed: events may queue behind the clients)" });
        match post_body() {
            Some(b) => println!("requests: POST with a {}-byte chat-completion body (OVERHEAD_POST=1)", b.len()),
            None => println!("requests: GET, no body (OVERHEAD_POST=1 for POSTs with a chat-completion body)"),
        }
        println!("proxies: {}", proxies.iter().map(|p| p.name).collect::<Vec<_>>().join(", "));

        let pids: Vec<Option<u32>> = std::iter::once(None)
            .chain(proxies.iter().map(|p| p.child.as_ref().map(|c| c.id())))
            .collect();
        // The processes whose CPU counts as the proxy's (nginx's and HAProxy's workers).
        let families: Vec<Vec<u32>> = pids.iter().map(|p| p.map(family).unwrap_or_default()).collect();
        let gen_core = own_core();

        // Latency: interleaved, in an order where every target follows every other one equally
        // often (see `carryover_order`).
        let rounds = env_num("OVERHEAD_ROUNDS").unwrap_or(if quick { 2 } else { 6 });
        let mut targets: Vec<(&str, SocketAddr)> = vec![("direct", up)];
        targets.extend(proxies.iter().map(|p| (p.name, p.addr)));
        let order = carryover_order(targets.len());
        let follow = targets.len().saturating_sub(1).max(1);
        println!("\nadded latency vs direct (µs), paced stream, interleaved so that every target follows every other one equally often; req = client send → upstream has the request");
        println!("{:<10} {:>8} | {:>10} {:>10} | {:>10} {:>10} | {:>10} {:>10} | {:>12}", "proxy", "C", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "req p50", "req p99", "CPU µs/event");
        // Each C > 1 in step, and those in OVERHEAD_SPREAD_C also spread (see `closed_loop`).
        let spread_c = env_list("OVERHEAD_SPREAD_C", &[8, 64]);
        let cells: Vec<(usize, bool)> = env_list("OVERHEAD_LATENCY_C", &[1, 8, 64])
            .into_iter()
            .flat_map(|c| std::iter::once((c, false)).chain((c > 1 && spread_c.contains(&c)).then_some((c, true))))
            .collect();
        for (conc, spread) in cells {
            let cl = if spread { format!("{conc} spread") } else { conc.to_string() };
            let mut acc: Vec<Samples> = targets.iter().map(|_| Samples::default()).collect();
            // A proxy works only on its own requests: its CPU over the whole cell is theirs.
            let cpu0: Vec<u64> = families.iter().map(|f| cpu_ns(f)).collect();
            let gen0 = core_ticks(gen_core);
            let mut after_direct: Vec<Samples> = targets.iter().map(|_| Samples::default()).collect();
            let mut c1_split: Option<Vec<String>> = None;
            if conc == 1 {
                // One at a time: interleave request by request, so drift cancels per request.
                let mut clients: Vec<Conn> = targets.iter().map(|t| Conn::new(t.1)).collect();
                for (i, c) in clients.iter_mut().enumerate() {
                    let mut warm = Samples::default();
                    one(c, "/paced", &mut warm).await;
                    acc[i].events += warm.events;
                }
                for _ in 0..(rounds * 32).div_ceil(follow) {
                    for (k, &i) in order.iter().enumerate() {
                        let prev = order[(k + order.len() - 1) % order.len()];
                        let into = if prev == 0 { &mut after_direct[i] } else { &mut acc[i] };
                        one(&mut clients[i], "/paced", into).await;
                    }
                }
                // Each proxy after direct (its core idle for a whole stream) and after another
                // proxy (busy a moment ago); the table below pools both.
                if targets.len() > 2 {
                    let mut d = acc[0].ttft_us.clone();
                    d.extend(&after_direct[0].ttft_us);
                    let mut dq = acc[0].req_us.clone();
                    dq.extend(&after_direct[0].req_us);
                    let (b, bq) = (pct(&mut d, 0.5), pct(&mut dq, 0.5));
                    let split: Vec<String> = targets.iter().enumerate().skip(1).map(|(i, (name, _))| {
                        let (mut ct, mut cq) = (after_direct[i].ttft_us.clone(), after_direct[i].req_us.clone());
                        let (mut wt, mut wq) = (acc[i].ttft_us.clone(), acc[i].req_us.clone());
                        format!("{name:<10}        1 | after direct: TTFT p50 {:>4.0}, req p50 {:>4.0} | after a proxy: TTFT p50 {:>4.0}, req p50 {:>4.0}",
                            pct(&mut ct, 0.5) - b, pct(&mut cq, 0.5) - bq, pct(&mut wt, 0.5) - b, pct(&mut wq, 0.5) - bq)
                    }).collect();
                    c1_split = Some(split);
                }
                for (a, c) in acc.iter_mut().zip(after_direct) {
                    a.absorb(c);
                }
            }
            for _ in 0..rounds.div_ceil(follow) {
                if conc == 1 {
                    break;
                }
                for &i in &order {
                    let s = closed_loop(targets[i].1, "/paced", conc, (conc * 4).max(16), spread).await;
                    acc[i].absorb(s);
                }
            }
            let cpu_us: Vec<f64> = families.iter().zip(&cpu0).map(|(f, c0)| cpu_ns(f).saturating_sub(*c0) as f64 / 1e3).collect();
            let (mut dt, mut di, mut dr) = (acc[0].ttft_us.clone(), acc[0].itl_us.clone(), acc[0].req_us.clone());
            let base = (pct(&mut dt, 0.5), pct(&mut dt, 0.99), pct(&mut di, 0.5), pct(&mut di, 0.99));
            let req_base = (pct(&mut dr, 0.5), pct(&mut dr, 0.99));
            for (i, (name, _)) in targets.iter().enumerate().skip(1) {
                let (mut t, mut g, mut q) = (acc[i].ttft_us.clone(), acc[i].itl_us.clone(), acc[i].req_us.clone());
                println!(
                    "{name:<10} {cl:>8} | {:>10.0} {:>10.0} | {:>10.0} {:>10.0} | {:>10.0} {:>10.0} | {:>12.2}",
                    pct(&mut t, 0.5) - base.0,
                    pct(&mut t, 0.99) - base.1,
                    pct(&mut g, 0.5) - base.2,
                    pct(&mut g, 0.99) - base.3,
                    pct(&mut q, 0.5) - req_base.0,
                    pct(&mut q, 0.99) - req_base.1,
                    cpu_us[i] / acc[i].events.max(1) as f64
                );
            }
            if std::env::var("OVERHEAD_TAILS").is_ok() {
                for (i, (name, _)) in targets.iter().enumerate() {
                    let (mut t, mut q, mut l, mut r) = (acc[i].ttft_us.clone(), acc[i].req_us.clone(), acc[i].late_us.clone(), acc[i].trip_us.clone());
                    let n = t.len();
                    let tq = [0.9, 0.99, 0.999, 1.0].map(|p| pct(&mut t, p));
                    let slow = q.iter().filter(|v| **v > 1000.0).count();
                    let wakes: std::collections::HashSet<u64> = acc[i].first_wake.iter().copied().collect();
                    let per_wake = acc[i].first_wake.len() as f64 / wakes.len().max(1) as f64;
                    println!("{name:<10} {cl:>8} | tails: TTFT p90 {:.0}, p99 {:.0}, p99.9 {:.0}, max {:.0} µs (absolute, n = {n}); req p99 {:.0}, over 1 ms: {slow}; first event: upstream late p50 {:.0}, p99 {:.0}, trip p50 {:.0}, p99 {:.0}, {per_wake:.2} per pacer wake-up",
                        tq[0], tq[1], tq[2], tq[3], pct(&mut q, 0.99), pct(&mut l, 0.5), pct(&mut l, 0.99), pct(&mut r, 0.5), pct(&mut r, 0.99));
                }
            }
            println!("{:<10} {cl:>8} | {:>10.0} {:>10.0} | {:>10.0} {:>10.0} | {:>10.0} {:>10.0}   (absolute)", "direct", base.0, base.1, base.2, base.3, req_base.0, req_base.1);
            for line in c1_split.into_iter().flatten() {
                println!("{line}");
            }
            // The load generator and the upstream share a core: when it is near full, every
            // target's tail is that core's queue, not the path under test.
            let (busy, irq) = busy_pct(gen0, core_ticks(gen_core));
            println!("{:<10} {cl:>8} | load generator + upstream: {} {busy:.0} % busy over the cell ({irq:.0} % in interrupts)", "",
                gen_core.map_or_else(|| "machine".to_owned(), |c| format!("core {c}")));
            let stuck = STUCK_REQUESTS.swap(0, Ordering::Relaxed);
            if stuck > 0 {
                println!("{:<10} {cl:>8} | {stuck} request(s) unfinished after {STUCK:?} were cut: their samples are missing", "");
            }
        }

        // Throughput and CPU per chunk: each cell in slices, the targets' order rotating per
        // slice, so drift spreads over all of them.
        let slices = if quick { 2 } else { 4 };
        let slice = if quick { 0.75 } else { 1.0 };
        println!("\nfull speed ({slices} interleaved slices of {slice} s per cell, upstream sends all {EVENTS} events at once)");
        println!("{:<10} {:>4} | {:>9} {:>11} | {:>14} {:>10}", "proxy", "C", "req/s", "chunks/s", "CPU µs/chunk", "RSS MiB");
        if std::env::var("OVERHEAD_DEBUG").is_ok() {
            for (p, pid) in proxies.iter().zip(&pids[1..]) {
                eprintln!("{}: pid {pid:?} family {:?}", p.name, pid.map(family));
            }
        }
        for conc in env_list("OVERHEAD_FULL_C", &[64, 256]) {
            // Per target: requests, chunks, seconds, proxy CPU seconds.
            let mut acc = vec![(0u64, 0u64, 0f64, 0f64); targets.len()];
            for r in 0..slices {
                for k in 0..targets.len() {
                    let i = (k + r) % targets.len();
                    let c0 = pids[i].map(cpu_s);
                    let (rq, ch, el) = throughput(targets[i].1, conc, slice).await;
                    let cpu = match (pids[i], c0) {
                        (Some(pid), Some(c0)) => cpu_s(pid) - c0,
                        _ => 0.0,
                    };
                    acc[i].0 += rq;
                    acc[i].1 += ch;
                    acc[i].2 += el;
                    acc[i].3 += cpu;
                }
            }
            for (i, (name, _)) in targets.iter().enumerate() {
                let (rq, ch, el, cpu) = acc[i];
                let (rps, cps) = (rq as f64 / el, ch as f64 / el);
                match pids[i] {
                    None => println!("{name:<10} {conc:>4} | {rps:>9.0} {cps:>11.0} | {:>14} {:>10}", "-", "-"),
                    Some(pid) => {
                        let per_chunk = cpu * 1e6 / (ch as f64).max(1.0);
                        println!("{name:<10} {conc:>4} | {rps:>9.0} {cps:>11.0} | {per_chunk:>14.2} {:>10.1}", rss_kb(pid) as f64 / 1024.0);
                    }
                }
            }
            let stuck = STUCK_REQUESTS.swap(0, Ordering::Relaxed);
            if stuck > 0 {
                println!("{:<10} {conc:>4} | {stuck} request(s) unfinished after {STUCK:?} were cut", "");
            }
        }

        if streams > 0 {
            println!("\nmemory: {streams} concurrent slow streams (one event, then silence)");
            println!("{:<10} | {:>10} {:>12} {:>14}", "proxy", "idle MiB", "loaded MiB", "KiB/stream");
            for p in &proxies {
                let pid = p.child.as_ref().map(|c| c.id()).unwrap_or(0);
                let (idle, loaded) = slow_streams(p.addr, streams, pid).await;
                println!(
                    "{:<10} | {:>10.1} {:>12.1} {:>14.1}",
                    p.name,
                    idle as f64 / 1024.0,
                    loaded as f64 / 1024.0,
                    loaded.saturating_sub(idle) as f64 / streams as f64
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        // tokentap alone, a fresh process (freed memory stays with a process, so one that has
        // run the phases above would reuse it): clients over HTTP/2, so the proxy holds one
        // socket per stream and the full 10,000 fit the open-file limit (nginx and HAProxy are
        // set up for HTTP/1.1 here).
        let h2_streams = env_num("OVERHEAD_H2_STREAMS").unwrap_or(10_000);
        if h2_streams > 0 && proxies.iter().any(|p| p.name == "tokentap") {
            let conns = h2_streams.div_ceil(500);
            println!("\nmemory: {h2_streams} concurrent slow streams over HTTP/2 ({conns} client connections, HTTP/1.1 upstream), a fresh tokentap");
            println!("{:<10} | {:>10} {:>12} {:>14} {:>9}", "proxy", "idle MiB", "loaded MiB", "KiB/stream", "streams");
            let p = start_tokentap("tokentap", tokentap_bin(), up, &dir, "tokentap-h2.jsonl");
            wait_up(p.addr).await;
            // Warm it with one request, as the other phases are.
            let _ = closed_loop(p.addr, "/fast", 1, 1, false).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let pid = p.child.as_ref().map(|c| c.id()).unwrap_or(0);
            let (idle, loaded, got) = slow_streams_h2(p.addr, h2_streams, conns, pid).await;
            println!(
                "{:<10} | {:>10.1} {:>12.1} {:>14.1} {:>9}",
                p.name,
                idle as f64 / 1024.0,
                loaded as f64 / 1024.0,
                loaded.saturating_sub(idle) as f64 / got.max(1) as f64,
                got
            );
        }
        drop(proxies);
        if std::env::var("OVERHEAD_KEEP").is_err() { let _ = std::fs::remove_dir_all(&dir); } else { eprintln!("kept {}", dir.display()); }
    });
}
