//! bench's connections, read with the kernel's receive stamps as the proxy reads its own: every
//! read leaves the stamp of its last segment in the connection's [`Latest`], which hyper's pool
//! hands to each response on that connection (`Connected::extra`), and the response's body reads
//! it when a frame comes (`MeteredBody::stamped_by`). A token's instant is then when its segment
//! arrived, not when bench's worker got to it: the C first tokens of a round that arrive
//! together are no longer stamped one after another, as the workers read them.
//!
//! The request's side too: a request's `t0` is when the write that carried its head began (the
//! connection's [`Written`]: the first write after the connection's last read), as the proxy's
//! `t0` is the head's arrival; read before the write, since on loopback the write itself delivers
//! the segment and can return a while after the peer has it. The time bench took between setting
//! out and that write (its body built, hyper's pool, its connection's task getting a turn: with C
//! requests set out at once, the last waits for the C − 1 before it) is bench's own, and in no
//! figure of the server's. A new connection's handshake is in none either, as in the proxy's.
//!
//! The limit: hyper reads a connection on the connection's own task. When the worker is later
//! than the gap to the next event, that task may read the next segment before the worker reads
//! the stamp; the frame then takes the later arrival, which is still no later than bench's own
//! clock would have said. With the stamps off (`TOKENTAP_KERNEL_STAMPS=0`, or a kernel that
//! gives none) a frame is stamped with the process's clock, as before.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Uri;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tower::Service;

use crate::rxstamp::{Arrival, Latest, Stamped};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Opens bench's connections: the plain connector's, each wrapped in a [`Stamped`].
#[derive(Clone)]
pub struct Connector(HttpConnector);

impl Connector {
    pub fn new(plain: HttpConnector) -> Self {
        Connector(plain)
    }
}

impl Service<Uri> for Connector {
    type Response = TokioIo<Conn>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<Conn>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let (io, latest) = Stamped::new(connecting.await?.into_inner());
            Ok(TokioIo::new(Conn {
                io,
                stamps: Stamps {
                    read: latest,
                    written: Arc::default(),
                },
            }))
        })
    }
}

/// A connection's stamps, as its responses carry them (an extension).
#[derive(Clone)]
pub struct Stamps {
    read: Arc<Latest>,
    written: Arc<Written>,
}

/// When the write that carried a connection's last request head began: the first write after
/// the connection's last read (HTTP/1 sends one request at a time on a connection, its head
/// first, and reads its answer before the next).
pub struct Written {
    head: Mutex<Option<Instant>>,
    /// A read came since the last head (or none was written yet): the next write is the next
    /// request's head. An atomic, so that a read, the per-chunk path, takes no lock.
    answered: AtomicBool,
}

impl Default for Written {
    fn default() -> Self {
        Written {
            head: Mutex::new(None),
            answered: AtomicBool::new(true),
        }
    }
}

impl Written {
    fn wrote(&self, at: Instant) {
        if self.answered.swap(false, Ordering::Relaxed) {
            if let Ok(mut h) = self.head.lock() {
                *h = Some(at);
            }
        }
    }

    fn read(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    fn get(&self) -> Option<Instant> {
        self.head.lock().map_or(None, |h| *h)
    }
}

/// When the request that `resp` answers went out: the write that carried its head (none when
/// the connection was not one of [`Connector`]'s).
pub fn written(resp: &http::Response<Incoming>) -> Option<Instant> {
    resp.extensions().get::<Stamps>()?.written.get()
}

/// One of bench's connections.
pub struct Conn {
    io: Stamped,
    stamps: Stamps,
}

impl Conn {
    /// One write, its start noted when it handed bytes to the kernel. The clock is read before
    /// the call: on loopback the write itself delivers the segment, and can return a while after
    /// the peer has it.
    fn write(
        &mut self,
        call: impl FnOnce(Pin<&mut Stamped>, &mut Context<'_>) -> Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let at = crate::rxstamp::now();
        let wrote = call(Pin::new(&mut self.io), cx);
        if matches!(wrote, Poll::Ready(Ok(n)) if n > 0) {
            self.stamps.written.wrote(at);
        }
        wrote
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        Connected::new().extra(self.stamps.clone())
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let got = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.stamps.written.read();
        }
        got
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().write(|io, cx| io.poll_write(cx, buf), cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write(|io, cx| io.poll_write_vectored(cx, bufs), cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A response's body with its connection's stamps.
pub struct Body {
    inner: Incoming,
    stamps: Option<Stamps>,
}

impl Body {
    /// `resp`'s body, with the stamps of the connection it came on (none when the connection
    /// was not one of [`Connector`]'s).
    pub fn of(resp: http::Response<Incoming>) -> Body {
        let stamps = resp.extensions().get::<Stamps>().cloned();
        Body {
            inner: resp.into_body(),
            stamps,
        }
    }

    /// The kernel's arrival of the connection's last read (`MeteredBody::stamped_by`).
    pub fn arrival(&self) -> Option<Arrival> {
        self.stamps.as_ref().and_then(|s| s.read.get())
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::bench::request::{Req, Sent};
    use crate::bench::runner::Target;
    use crate::openai::Api;

    /// An upstream on a thread of its own, for one request: the head and the role event at
    /// once, the first token 50 ms later, the rest 500 ms after that. `got` says it has the
    /// request.
    fn upstream(got: Arc<AtomicBool>) -> std::net::SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then a body of content-length bytes.
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") || !has_body(&seen) {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the client closed early");
                seen.extend_from_slice(&buf[..n]);
            }
            got.store(true, Ordering::SeqCst);
            let chunk = |e: &str| {
                let data = format!("data: {e}\n\n");
                format!("{:x}\r\n{data}\r\n", data.len())
            };
            let token = |t: &str, end: &str| {
                chunk(&format!(
                    r#"{{"choices":[{{"index":0,"delta":{{"content":"{t}"}},"finish_reason":{end}}}]}}"#
                ))
            };
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\n\r\n";
            let role =
                chunk(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#);
            s.write_all(format!("{head}{role}").as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(token("a", "null").as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(500));
            let end = format!("{}{}0\r\n\r\n", token("b", "\"stop\""), chunk("[DONE]"));
            s.write_all(end.as_bytes()).unwrap();
        });
        addr
    }

    /// Whether `seen` holds a whole request: its head and content-length bytes after it.
    fn has_body(seen: &[u8]) -> bool {
        let Some(p) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&seen[..p]).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        seen.len() >= p + 4 + len
    }

    fn req() -> Req {
        Req {
            concurrency: Some(1),
            ..Req::plain("m".into(), Api::Chat, "hi", 2, "b")
        }
    }

    /// bench's worker (the test's only thread) is held for 200 ms after it set out, before its
    /// request is written: t0 is the write, so the hold is in no figure (read from setting out,
    /// TTFT would be at least the hold).
    #[tokio::test]
    async fn a_request_is_timed_from_the_write_that_sent_it() {
        crate::rxstamp::enable();
        let got = Arc::new(AtomicBool::new(false));
        let addr = upstream(got.clone());
        let live = Arc::new(crate::bench::live::Live::default());
        let t = Target::new(&format!("http://{addr}"), None, Vec::new())
            .unwrap()
            .with_live(Some(live.clone()));
        let t = Arc::new(t);
        let before = std::time::SystemTime::now();
        let one = tokio::spawn(async move {
            let r = t
                .one(&req(), Sent::default(), &AtomicBool::new(false))
                .await;
            (r, std::time::SystemTime::now())
        });
        // Until the worker has set out (its first poll counts it sent, then waits on the
        // connect): then the thread is held, and nothing is written meanwhile.
        while !live
            .page()
            .contains("tokentap_bench_requests_sent_total 1\n")
        {
            tokio::task::yield_now().await;
        }
        assert!(
            !got.load(Ordering::SeqCst),
            "the request went out before the hold"
        );
        std::thread::sleep(Duration::from_millis(200));
        let (r, ended) = one.await.unwrap();
        let ttft = r.ttft_ms.unwrap();
        assert!((45.0..150.0).contains(&ttft), "ttft {ttft}: {r:?}");
        // `ts` is the write's wall time: after the hold, and `ts + e2e` is the end.
        let ts = humantime::parse_rfc3339(&r.ts).unwrap();
        let waited = ts.duration_since(before).unwrap();
        assert!(
            waited >= Duration::from_millis(195),
            "ts {waited:?} after setting out"
        );
        let end = ts + Duration::from_secs_f64(r.e2e_ms / 1000.0);
        assert!(
            end <= ended,
            "{:?} after the end",
            end.duration_since(ended)
        );
    }

    /// bench's worker (the test's only thread) is held for 300 ms while the first token
    /// arrives, 50 ms after the request: the kernel's stamp keeps TTFT at the arrival. Read
    /// with the process's clock it would be at least the hold.
    #[tokio::test]
    async fn a_held_worker_times_the_first_token_at_its_arrival() {
        crate::rxstamp::enable();
        let got = Arc::new(AtomicBool::new(false));
        let addr = upstream(got.clone());
        let t = Arc::new(Target::new(&format!("http://{addr}"), None, Vec::new()).unwrap());
        let req = req();
        let one =
            tokio::spawn(
                async move { t.one(&req, Sent::default(), &AtomicBool::new(false)).await },
            );
        while !got.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        std::thread::sleep(Duration::from_millis(300));
        let r = one.await.unwrap();
        let ttft = r.ttft_ms.unwrap();
        assert!((45.0..150.0).contains(&ttft), "ttft {ttft}: {r:?}");
        // The lag is the hold's: from the token's arrival to the worker's read of it.
        let lag = r.stamp_lag_ms.unwrap();
        assert!(lag > 150.0, "lag {lag}");
        assert_eq!(r.output_tokens, Some(2), "{r:?}");
    }
}
