//! The client-facing listener: accept loop, optional TLS, HTTP/1.1 and HTTP/2 on one port,
//! graceful drain. Takes a bound listener and a shutdown future (tests bind 127.0.0.1:0).
//!
//! A new connection takes the current config generation's header timeout and TLS certificate;
//! each of its requests takes the current generation when it arrives (`proxy::Live`).
//!
//! On shutdown: stop accepting, let in-flight requests finish for the grace period (the current
//! generation's `timeouts.shutdown_grace_ms`), then cut what is left — each cut stream is still
//! recorded (`shutdown_cut`).
//!
//! A plain connection's protocol is told by peeking at its first bytes (HTTP/2's preface or
//! not), and hyper's HTTP/1.1 or HTTP/2 server then reads it from its first byte: hyper-util's
//! `auto`, which reads those bytes itself and hands them back, would make hyper's first read
//! one of 24 bytes and its read buffer twice its 8 KiB (docs/overhead.md, "Memory per
//! stream"). TLS connections, and a preface split over segments, still go through `auto`. What
//! every HTTP/1.1 connection holds for its life is kept small: its task holds the HTTP/1.1
//! connection inline, and the rarer HTTP/2 and TLS ones boxed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use crate::proxy::{Live, Proxy};
use crate::rxstamp::Stamped;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP/1.1 server's settings, on hyper's builder or `auto`'s (the same methods).
macro_rules! h1_settings {
    ($b:expr, $header_read:expr) => {
        $b.timer(TokioTimer::new())
            .header_read_timeout($header_read)
            .max_buf_size(256 * 1024)
    };
}

/// The HTTP/2 server's settings, likewise.
macro_rules! h2_settings {
    ($b:expr) => {
        $b.timer(TokioTimer::new())
            .max_concurrent_streams(1024)
            .max_pending_accept_reset_streams(Some(64))
            .max_local_error_reset_streams(Some(256))
            .max_header_list_size(256 * 1024)
            .keep_alive_interval(Some(Duration::from_secs(30)))
    };
}

/// A config generation's servers: HTTP/1.1 and HTTP/2 for a plain connection whose protocol
/// was peeked at, `auto` (either, told by reading) for the others.
struct Builders {
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    auto: auto::Builder<TokioExecutor>,
}

fn builders(header_read: Duration) -> Builders {
    let mut h1 = http1::Builder::new();
    h1_settings!(h1, header_read);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2_settings!(h2);
    let mut auto = auto::Builder::new(TokioExecutor::new());
    h1_settings!(auto.http1(), header_read);
    h2_settings!(auto.http2());
    Builders { h1, h2, auto }
}

/// HTTP/2's connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A plain connection's protocol, told by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sniffed {
    /// Not HTTP/2's preface (or the connection closed before a byte): HTTP/1.1.
    Http1,
    /// HTTP/2's preface, whole.
    Http2,
    /// A start of the preface, not all of it yet: left to `auto`, which reads on.
    Unsure,
}

/// What the first bytes `peeked` say.
fn sniffed(peeked: &[u8]) -> Sniffed {
    if peeked.is_empty() || !H2_PREFACE.starts_with(peeked) {
        Sniffed::Http1
    } else if peeked.len() == H2_PREFACE.len() {
        Sniffed::Http2
    } else {
        Sniffed::Unsure
    }
}

/// Each connection's drain signal, held by the accept loop: one oneshot per connection, so a
/// connection polls only its own receiver. (hyper-util's `GracefulShutdown` shares one watch
/// channel: every poll of every connection takes a lock that all connections share.) Senders of
/// connections that have ended are pruned as the list grows, so it stays the size of the live
/// connections.
#[derive(Default)]
struct Drains {
    senders: Vec<oneshot::Sender<()>>,
    prune_at: usize,
}

impl Drains {
    fn add(&mut self) -> oneshot::Receiver<()> {
        if self.senders.len() >= self.prune_at {
            self.senders.retain(|tx| !tx.is_closed());
            self.prune_at = (self.senders.len() * 2).max(64);
        }
        let (tx, rx) = oneshot::channel();
        self.senders.push(tx);
        rx
    }

    /// Tell every live connection to finish its request in flight and close.
    fn drain(self) {
        for tx in self.senders {
            let _ = tx.send(());
        }
    }
}

pin_project_lite::pin_project! {
    /// A connection served to its end; once `drain` fires, told to finish the request in flight
    /// and close (`shutdown`: the connection's `graceful_shutdown`), and polled on until it is
    /// done. A future of its own, not an `async fn`, so that the connection is held once.
    struct Drained<C> {
        #[pin]
        conn: C,
        drain: Option<oneshot::Receiver<()>>,
        shutdown: fn(Pin<&mut C>),
    }
}

impl<C> Drained<C> {
    fn new(conn: C, drain: oneshot::Receiver<()>, shutdown: fn(Pin<&mut C>)) -> Self {
        Drained {
            conn,
            drain: Some(drain),
            shutdown,
        }
    }
}

impl<C: Future> Future for Drained<C> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if let Some(rx) = this.drain.as_mut() {
            if Pin::new(rx).poll(cx).is_ready() {
                *this.drain = None;
                (this.shutdown)(this.conn.as_mut());
            }
        }
        this.conn.poll(cx).map(|_| ())
    }
}

/// Serve a connection whose protocol is read by `auto` (TLS, or a split preface).
async fn serve_auto<T>(io: T, service: Proxy, builders: Arc<Builders>, drain: oneshot::Receiver<()>)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = builders.auto.serve_connection(TokioIo::new(io), service);
    Drained::new(conn, drain, |c| c.graceful_shutdown()).await;
}

/// A plain HTTP/1.1 connection served by hyper.
type Http1 = http1::Connection<TokioIo<Stamped>, Proxy>;

pin_project_lite::pin_project! {
    /// One accepted connection, in its own task: everything per connection (socket options,
    /// the TLS handshake, HTTP) happens here, so that the accept loop goes straight back to
    /// accepting. A plain connection's protocol is peeked at, and hyper serves it from its
    /// first byte; a drain that comes before that byte closes it.
    ///
    /// NB: a future of its own, not an `async fn`, so that the task is the size of what a
    /// plain HTTP/1.1 connection holds for its life (hyper's connection, held once), and the
    /// HTTP/2, TLS and split-preface paths are boxed (docs/overhead.md, "Memory per stream").
    #[project = TaskProj]
    enum Task {
        Accepted { accepted: Option<Accepted> },
        Sniffing { pending: Option<Pending> },
        Http1 { #[pin] conn: Drained<Http1> },
        Boxed { future: Pin<Box<dyn Future<Output = ()> + Send>> },
        Done,
    }
}

/// A connection as accepted.
struct Accepted {
    stream: tokio::net::TcpStream,
    service: Proxy,
    builders: Arc<Builders>,
    drain: oneshot::Receiver<()>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// A plain connection whose first bytes are awaited.
struct Pending {
    stream: Stamped,
    service: Proxy,
    builders: Arc<Builders>,
    drain: oneshot::Receiver<()>,
}

fn connection(
    stream: tokio::net::TcpStream,
    service: Proxy,
    builders: Arc<Builders>,
    drain: oneshot::Receiver<()>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Task {
    Task::Accepted {
        accepted: Some(Accepted {
            stream,
            service,
            builders,
            drain,
            tls,
        }),
    }
}

impl Accepted {
    /// Its socket options and stamps; a TLS connection goes to its handshake, a plain one to
    /// the peek at its first bytes.
    fn start(self) -> Task {
        let Accepted {
            stream,
            service,
            builders,
            drain,
            tls,
        } = self;
        let _ = stream.set_nodelay(true);
        let (stream, latest) = Stamped::new(stream);
        let service = service.stamped_by(latest);
        match tls {
            Some(acceptor) => Task::Boxed {
                future: Box::pin(secure(stream, acceptor, service, builders, drain)),
            },
            None => Task::Sniffing {
                pending: Some(Pending {
                    stream,
                    service,
                    builders,
                    drain,
                }),
            },
        }
    }
}

impl Pending {
    /// Peek at the first bytes (they stay in the socket for hyper to read); `None` when a
    /// drain came first, or the peek failed.
    fn poll_sniff(&mut self, cx: &mut Context<'_>) -> Poll<Option<Sniffed>> {
        if Pin::new(&mut self.drain).poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        let mut room = [0u8; H2_PREFACE.len()];
        let mut buf = ReadBuf::new(&mut room);
        match ready!(self.stream.tcp().poll_peek(cx, &mut buf)) {
            Ok(_) => Poll::Ready(Some(sniffed(buf.filled()))),
            Err(_) => Poll::Ready(None),
        }
    }

    /// hyper's server for what the first bytes said.
    fn serve(self, sniffed: Sniffed) -> Task {
        let Pending {
            stream,
            service,
            builders,
            drain,
        } = self;
        let io = TokioIo::new(stream);
        match sniffed {
            Sniffed::Http1 => {
                let conn = builders.h1.serve_connection(io, service);
                Task::Http1 {
                    conn: Drained::new(conn, drain, |c| c.graceful_shutdown()),
                }
            }
            Sniffed::Http2 => {
                let conn = builders.h2.serve_connection(io, service);
                Task::Boxed {
                    future: Box::pin(Drained::new(conn, drain, |c| c.graceful_shutdown())),
                }
            }
            Sniffed::Unsure => Task::Boxed {
                future: Box::pin(serve_auto(io.into_inner(), service, builders, drain)),
            },
        }
    }
}

impl Future for Task {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let next = match self.as_mut().project() {
                TaskProj::Accepted { accepted } => match accepted.take() {
                    Some(a) => a.start(),
                    None => Task::Done,
                },
                TaskProj::Sniffing { pending } => {
                    let sniffed = match pending.as_mut() {
                        Some(p) => ready!(p.poll_sniff(cx)),
                        None => None,
                    };
                    match (sniffed, pending.take()) {
                        (Some(s), Some(p)) => p.serve(s),
                        _ => Task::Done,
                    }
                }
                TaskProj::Http1 { conn } => return conn.poll(cx),
                TaskProj::Boxed { future } => return future.as_mut().poll(cx),
                TaskProj::Done => return Poll::Ready(()),
            };
            self.set(next);
        }
    }
}

/// A TLS connection: the handshake (at most `TLS_HANDSHAKE_TIMEOUT`), then `auto`. A slow
/// handshake blocks nobody; a drain that came during it closes the connection once it is an
/// HTTP one.
async fn secure(
    stream: Stamped,
    acceptor: tokio_rustls::TlsAcceptor,
    service: Proxy,
    builders: Arc<Builders>,
    drain: oneshot::Receiver<()>,
) {
    let tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        _ => return,
    };
    serve_auto(tls, service, builders, drain).await;
}

/// Serve until `shutdown` resolves, then drain for the grace period and cut what is left.
///
/// The loop only accepts and spawns: a burst of connections is taken off the kernel's accept
/// queue as fast as `accept(2)` returns them (its backlog is the listener's, see
/// `crate::listen`).
pub async fn run(listener: TcpListener, live: Arc<Live>, shutdown: impl Future<Output = ()>) {
    if crate::rxstamp::enabled() && !crate::rxstamp::prepare(&listener).await {
        tracing::warn!(
            "the kernel gives no receive stamps here: instants are taken with tokentap's own \
             clock (records say clock: process; tokentap_clock_fallbacks_total counts them)"
        );
    }
    let header_read = |live: &Live| live.state().config.timeouts.header_read;
    let mut generation = live.number();
    let mut builders = Arc::new(builders(header_read(&live)));
    let proxy = Proxy::new(live.clone());
    let mut drains = Drains::default();
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while conns.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if live.number() != generation {
            generation = live.number();
            builders = Arc::new(self::builders(header_read(&live)));
        }
        conns.spawn(connection(
            stream,
            proxy.for_peer(peer.ip()),
            builders.clone(),
            drains.add(),
            live.tls(),
        ));
    }
    drop(listener);
    let grace = live.state().config.timeouts.shutdown_grace;
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "shutting down: draining in-flight requests"
    );
    drains.drain();
    tokio::select! {
        () = async { while conns.join_next().await.is_some() {} } => {}
        () = tokio::time::sleep(grace) => {
            tracing::warn!("shutdown grace period over: cutting the remaining streams");
            live.shared.shutdown_cut.store(true, Ordering::Relaxed);
        }
    }
    // Connections still open are cut here; dropping them finalizes their requests.
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request path never taken: the tests here only build futures.
    struct NoStack;

    impl crate::proxy::stack::Current for NoStack {
        fn stack(&self) -> crate::proxy::stack::Stack {
            unreachable!("no request is served here")
        }
    }

    /// What every HTTP/1.1 connection holds for its life stays small (docs/overhead.md, "Memory
    /// per stream"): its task (hyper's connection, some 700 bytes, held once; as an `async fn`
    /// it was 1,184 bytes, and with the HTTP/2 and TLS paths inline 4.5 KiB), the box hyper
    /// keeps for the service's future (an answer given at once is boxed: inline it made the
    /// box 600 bytes), and the box it keeps for the response body (472 bytes with the sockets'
    /// stamp buffers and the chunked decoder's trailers inline).
    #[tokio::test(flavor = "current_thread")]
    async fn a_plain_connection_holds_little() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (_tx, rx) = oneshot::channel();
        let service = Proxy::new(Arc::new(NoStack));
        let task = connection(
            tcp,
            service,
            Arc::new(builders(Duration::from_secs(1))),
            rx,
            None,
        );
        let size = std::mem::size_of_val(&task);
        assert!(
            size <= 736,
            "a plain connection's task future is {size} bytes"
        );
        type ServiceFuture =
            <Proxy as hyper::service::Service<http::Request<hyper::body::Incoming>>>::Future;
        let size = std::mem::size_of::<ServiceFuture>();
        assert!(size <= 64, "the service's future is {size} bytes");
        let size = std::mem::size_of::<Option<crate::proxy::ProxyBody>>();
        assert!(size <= 288, "the response body is {size} bytes");
    }

    #[test]
    fn the_preface_is_told_from_its_first_bytes() {
        assert_eq!(sniffed(b""), Sniffed::Http1);
        assert_eq!(sniffed(b"GET / HTTP/1.1\r\n"), Sniffed::Http1);
        assert_eq!(
            sniffed(b"POST /v1/chat/completions HTTP/1.1"),
            Sniffed::Http1
        );
        assert_eq!(sniffed(b"PRO"), Sniffed::Http1);
        assert_eq!(sniffed(b"P"), Sniffed::Unsure);
        assert_eq!(sniffed(b"PRI * HTTP/2.0\r\n"), Sniffed::Unsure);
        assert_eq!(sniffed(H2_PREFACE), Sniffed::Http2);
    }

    /// Ended connections' senders do not pile up: the list stays near the live count.
    #[test]
    fn drains_of_ended_connections_are_pruned() {
        let mut d = Drains::default();
        let mut live = Vec::new();
        for i in 0..10_000 {
            let rx = d.add();
            if i % 100 == 0 {
                live.push(rx);
            }
        }
        assert_eq!(live.len(), 100);
        assert!(
            d.senders.len() < 2 * 64 + 2 * live.len(),
            "{}",
            d.senders.len()
        );
        d.drain();
        for mut rx in live {
            assert!(
                rx.try_recv().is_ok(),
                "a live connection was not told to drain"
            );
        }
    }
}
