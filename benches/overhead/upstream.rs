//! The bench's upstream: an in-process SSE server on its own threads, its events written at
//! their exact instants by a pacer thread, so its timing does not depend on the proxy under test.

use super::*;

pub(crate) const EVENTS: usize = 64;

/// When the upstream had each request's head, by the request's `id` query parameter: the request
/// leg (client send → upstream arrival) is measured in one process, on one clock.
pub(crate) static ARRIVALS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<u64, Instant>>,
> = std::sync::LazyLock::new(Default::default);
pub(crate) static NEXT_ID: AtomicU64 = AtomicU64::new(0);
/// When the pacer wrote each paced request's first event, when it was due, and in which of the
/// pacer's wake-ups (request id → (due, written, wake-up number)): the upstream's own timing
/// error, which lands in TTFT, the start of the first event's trip through the proxy, and how
/// many first events shared a wake-up.
pub(crate) static FIRST_WRITE: std::sync::LazyLock<std::sync::Mutex<FirstWrites>> =
    std::sync::LazyLock::new(Default::default);
pub(crate) type FirstWrites = std::collections::HashMap<u64, (Instant, Instant, u64)>;
/// Requests the load generator gave up on, unfinished after `STUCK` (a paced stream takes 84 ms):
/// the bench must end by itself even if a proxy stalls a stream.
pub(crate) static STUCK_REQUESTS: AtomicU64 = AtomicU64::new(0);
pub(crate) const STUCK: Duration = Duration::from_secs(30);
pub(crate) const EVENT: &str = "data: {\"id\":\"chatcmpl-overhead\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"}}]}\n\n";

/// The upstream: `/paced` = first event 20 ms after the request, then 1 ms apart; `/fast` = all
/// at once; `/slow` = one event then silence for a minute.
///
/// It runs on its own threads, at real-time priority when allowed, and a paced stream's events
/// are written by a pacer thread at their exact instants (see [`pacer`]): the upstream's timing
/// must not depend on the path under test. With tokio timers on the clients' runtime it did: tokio
/// parks for a whole number of milliseconds counted from the last wake-up, so every wake-up
/// between two events (a frame arriving through a proxy, another request arriving) pushed the next
/// event later by up to a millisecond, and a proxy's own timing came back as added ITL and TTFT.
pub(crate) fn upstream() -> SocketAddr {
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
pub(crate) fn realtime_if_allowed() -> bool {
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
pub(crate) static UPSTREAM_RT: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// One event as a chunk of a chunked body.
pub(crate) fn sse_chunk() -> String {
    format!("{:x}\r\n{EVENT}\r\n", EVENT.len())
}

/// One paced stream handed to the pacer: its socket (a second handle on the connection's socket),
/// its next event's instant and how many are left; `done` gets the socket back, or nothing if a
/// write failed.
pub(crate) struct Paced {
    pub(crate) id: Option<u64>,
    pub(crate) sock: std::net::TcpStream,
    pub(crate) next: Instant,
    pub(crate) left: usize,
    pub(crate) done: tokio::sync::oneshot::Sender<Option<std::net::TcpStream>>,
}

/// How close two paced events' instants must be for the pacer to write them in one wake-up
/// (`OVERHEAD_COALESCE_US`, default 20 µs). An event due within this of the wake-up goes out
/// early by at most this much.
pub(crate) fn coalesce() -> Duration {
    Duration::from_micros(env_num("OVERHEAD_COALESCE_US").map_or(20, |us| us as u64))
}

/// Writes every paced stream's events at their instants: it sleeps until the earliest one is due
/// (exactly: the wait is in nanoseconds, and a new stream arriving recomputes it), writes all that
/// are due, and ends each stream with the chunked terminator.
pub(crate) fn pacer(rx: std::sync::mpsc::Receiver<Paced>) {
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

pub(crate) async fn serve_upstream(l: TcpListener, jobs: std::sync::mpsc::Sender<Paced>) {
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
