//! The client-facing listener: accept loop, optional TLS, HTTP/1.1 and HTTP/2 on one port,
//! graceful drain. Takes a bound listener and a shutdown future (tests bind 127.0.0.1:0).
//!
//! A new connection takes the current config generation's header timeout and TLS certificate;
//! each of its requests takes the current generation when it arrives (`proxy::Live`).
//!
//! On shutdown: stop accepting, let in-flight requests finish for the grace period (the current
//! generation's `timeouts.shutdown_grace_ms`), then cut what is left — each cut stream is still
//! recorded (`shutdown_cut`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::proxy::{Live, Proxy};
use crate::rxstamp::Stamped;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn builder(header_read: Duration) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read)
        .max_buf_size(256 * 1024);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(1024)
        .max_pending_accept_reset_streams(Some(64))
        .max_local_error_reset_streams(Some(256))
        .max_header_list_size(256 * 1024)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    b
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

/// Serve one connection to its end; once `drain` fires, let it finish the request in flight
/// and close (`graceful_shutdown`, polled on until it is done).
async fn serve<T>(
    io: T,
    service: Proxy,
    builder: &auto::Builder<TokioExecutor>,
    drain: oneshot::Receiver<()>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut drain = Some(drain);
    let _ = std::future::poll_fn(|cx| {
        if let Some(rx) = drain.as_mut() {
            if Pin::new(rx).poll(cx).is_ready() {
                drain = None;
                conn.as_mut().graceful_shutdown();
            }
        }
        conn.as_mut().poll(cx)
    })
    .await;
}

/// One accepted connection, in its own task: everything per connection (socket options, the
/// TLS handshake, HTTP) happens here, so that the accept loop goes straight back to accepting.
async fn connection(
    stream: tokio::net::TcpStream,
    service: Proxy,
    builder: Arc<auto::Builder<TokioExecutor>>,
    drain: oneshot::Receiver<()>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let _ = stream.set_nodelay(true);
    let (stream, latest) = Stamped::new(stream);
    let service = service.stamped_by(latest);
    match tls {
        None => serve(stream, service, &builder, drain).await,
        Some(acceptor) => {
            // A slow handshake blocks nobody; a drain that came during it closes the connection
            // once it is an HTTP one.
            let tls =
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => s,
                    _ => return,
                };
            serve(tls, service, &builder, drain).await;
        }
    }
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
    let mut builder = Arc::new(builder(header_read(&live)));
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
            builder = Arc::new(self::builder(header_read(&live)));
        }
        conns.spawn(connection(
            stream,
            proxy.for_peer(peer.ip()),
            builder.clone(),
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
    use super::Drains;

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
