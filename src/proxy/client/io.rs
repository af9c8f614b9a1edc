//! One upstream connection (plain TCP or TLS) and its read buffer, held only while it holds
//! unread bytes: a read that finds nothing (`Pending`) with the buffer empty hands it back to
//! its thread's spares, and the next read takes one from there. A stream waiting for its next
//! token then holds no buffer, and a thread's reads at full speed go through the same few warm
//! buffers (docs/overhead.md, "Memory per stream").

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::proxy::h1;
use crate::rxstamp::{Arrival, Stamped, Stamper};

/// A new read buffer: enough for a slow stream's events.
const READ_BUF: usize = 4 * 1024;
/// A read that fills the buffer doubles it, up to this (bulk transfers).
const READ_BUF_BULK: usize = 64 * 1024;
/// Buffers kept per thread between reads; one larger than `READ_BUF_BULK` (grown for a long
/// head) is not kept.
const SPARES: usize = 8;

thread_local! {
    /// This thread's read buffers between reads (each zeroed once, when made).
    static SPARE: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A read buffer: one of this thread's spares, or a new one.
fn take_spare() -> Vec<u8> {
    SPARE
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| vec![0; READ_BUF])
}

/// Hand a read buffer back to this thread's spares (dropped when they are full).
fn give_spare(buf: Vec<u8>) {
    if buf.is_empty() || buf.len() > READ_BUF_BULK {
        return;
    }
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARES {
            s.push(buf);
        }
    });
}

/// A connection, plain or TLS: both with the kernel's receive stamps where it gives them.
pub(super) enum Conn {
    Plain(TcpStream, Stamper),
    Tls(
        Box<TlsStream<Stamped>>,
        std::sync::Arc<crate::rxstamp::Latest>,
    ),
}

impl Conn {
    pub(super) fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s, _) => s,
            Conn::Tls(s, _) => s.get_ref().0.tcp(),
        }
    }

    /// Did the peer close (or send something unasked) while the connection sat in the pool?
    pub(super) fn is_stale(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut byte = [0u8; 1];
        let mut rb = ReadBuf::new(&mut byte);
        !matches!(self.tcp().poll_peek(&mut cx, &mut rb), Poll::Pending)
    }

    /// Read once; with the kernel's stamp of the read's last segment when `want`. Under TLS it
    /// is the stamp of the last socket read, the one that completed the records read.
    fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        want: bool,
    ) -> Poll<io::Result<Option<Arrival>>> {
        match self {
            Conn::Plain(s, stamper) => stamper.poll_read(s, cx, buf, want),
            Conn::Tls(s, latest) => Pin::new(s.as_mut())
                .poll_read(cx, buf)
                .map_ok(|()| latest.get().filter(|_| want)),
        }
    }

    pub(super) async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(s, _) => s.write_all(bytes).await,
            Conn::Tls(s, _) => {
                s.write_all(bytes).await?;
                s.flush().await
            }
        }
    }
}

/// A connection and its read buffer (`buf[start..end]` holds unread bytes; `buf` is empty,
/// with no capacity, while it is lent back).
pub struct Io {
    pub(super) conn: Conn,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes ever read on this exchange (0 = the upstream said nothing yet).
    pub(super) got: usize,
    /// The kernel's stamp of the last read, when it gave one.
    pub(super) arrival: Option<Arrival>,
    /// Reads want their stamp (not while draining a response nobody measures).
    pub(super) want_stamps: bool,
}

impl Io {
    pub(super) fn new(conn: Conn) -> Self {
        Io {
            conn,
            buf: Vec::new(),
            start: 0,
            end: 0,
            got: 0,
            arrival: None,
            want_stamps: true,
        }
    }

    pub(super) fn filled(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Hand the read buffer back to the thread's spares if it holds no unread bytes.
    pub(super) fn park(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            give_spare(std::mem::take(&mut self.buf));
        }
    }

    /// Read once into the free end of the buffer (taking one first, or compacting or growing it
    /// if full); a read that finds nothing parks the buffer. `Ready(Ok(0))` is end of stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.is_empty() {
            // Parked: a plain socket that is not ready keeps it parked. hyper polls a streaming
            // body several times per event, and most polls find nothing: they take no spare and
            // hand none back. (TLS may hold read bytes the socket no longer shows.)
            if let Conn::Plain(s, _) = &self.conn {
                ready!(s.poll_read_ready(cx))?;
            }
            self.buf = take_spare();
        }
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < h1::MAX_HEAD {
                self.buf.resize(self.buf.len() * 2, 0);
            } else {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "line longer than the read buffer",
                )));
            }
        }
        let room = self.buf.len() - self.end;
        let mut rb = ReadBuf::new(&mut self.buf[self.end..]);
        match self.conn.poll_read(cx, &mut rb, self.want_stamps) {
            Poll::Ready(Ok(arrival)) => {
                let n = rb.filled().len();
                self.arrival = arrival;
                self.end += n;
                self.got += n;
                if n == room && self.buf.len() < READ_BUF_BULK {
                    self.buf.resize(self.buf.len() * 2, 0);
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                self.park();
                Poll::Pending
            }
        }
    }

    pub(super) async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(io: &mut Io) -> Poll<io::Result<usize>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        io.poll_fill(&mut cx)
    }

    /// A connection waiting for bytes holds no read buffer; one with unread bytes keeps its own,
    /// and the next read takes a spare again.
    #[tokio::test(flavor = "current_thread")]
    async fn a_waiting_connection_holds_no_read_buffer() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut peer, _) = l.accept().await.unwrap();
        let stamper = Stamper::new(&tcp);
        let mut io = Io::new(Conn::Plain(tcp, stamper));
        assert_eq!(io.buf.capacity(), 0, "a new connection has no buffer");
        assert!(poll(&mut io).is_pending());
        assert_eq!(
            io.buf.capacity(),
            0,
            "nothing to read: the buffer was handed back"
        );

        peer.write_all(b"data: 1\n\n").await.unwrap();
        let n = std::future::poll_fn(|cx| io.poll_fill(cx)).await.unwrap();
        assert_eq!(io.filled(), b"data: 1\n\n");
        io.consume(n - 2);
        assert!(poll(&mut io).is_pending());
        assert_eq!(io.filled(), b"\n\n", "unread bytes stay, with their buffer");
        assert!(io.buf.len() >= READ_BUF);
        io.consume(2);
        assert!(poll(&mut io).is_pending());
        assert_eq!(io.buf.capacity(), 0, "read to the end: handed back");

        peer.write_all(b"more").await.unwrap();
        std::future::poll_fn(|cx| io.poll_fill(cx)).await.unwrap();
        assert_eq!(io.filled(), b"more");
    }

    /// A poll that finds the socket not ready takes no buffer: with no spares on the thread,
    /// none is made (hyper polls a streaming body several times per event).
    #[tokio::test(flavor = "current_thread")]
    async fn a_poll_that_finds_nothing_takes_no_buffer() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut peer, _) = l.accept().await.unwrap();
        let stamper = Stamper::new(&tcp);
        let mut io = Io::new(Conn::Plain(tcp, stamper));
        SPARE.with(|s| s.borrow_mut().clear());
        for _ in 0..3 {
            assert!(poll(&mut io).is_pending());
        }
        assert_eq!(SPARE.with(|s| s.borrow().len()), 0, "no buffer was made");
        assert_eq!(io.buf.capacity(), 0);

        peer.write_all(b"data: 1\n\n").await.unwrap();
        let n = std::future::poll_fn(|cx| io.poll_fill(cx)).await.unwrap();
        assert_eq!(
            io.filled(),
            b"data: 1\n\n",
            "woken by the bytes, it reads them"
        );
        io.consume(n);
        assert!(poll(&mut io).is_pending());
        assert_eq!(
            SPARE.with(|s| s.borrow().len()),
            1,
            "read to the end: handed back"
        );
    }

    /// The spares are bounded in number, and a buffer grown past the bulk size is not kept.
    #[test]
    fn spares_are_bounded() {
        for _ in 0..SPARES + 4 {
            give_spare(vec![0; READ_BUF]);
        }
        give_spare(vec![0; READ_BUF_BULK * 2]);
        give_spare(Vec::new());
        let kept = SPARE.with(|s| s.borrow().len());
        assert_eq!(kept, SPARES);
        assert!(SPARE.with(|s| s.borrow().iter().all(|b| b.len() == READ_BUF)));
        let taken = take_spare();
        assert_eq!(taken.len(), READ_BUF);
        assert_eq!(SPARE.with(|s| s.borrow().len()), SPARES - 1);
    }
}
