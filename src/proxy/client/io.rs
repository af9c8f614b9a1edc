//! One upstream connection (plain TCP or TLS) and its read buffer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::proxy::h1;
use crate::rxstamp::{Arrival, Stamped, Stamper};

/// Read buffer of one upstream connection to start with: enough for a slow stream's events.
const READ_BUF: usize = 4 * 1024;
/// A read that fills the buffer doubles it, up to this (bulk transfers).
const READ_BUF_BULK: usize = 64 * 1024;

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

/// A connection and its read buffer (`buf[start..end]` holds unread bytes).
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
            buf: vec![0; READ_BUF],
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

    /// Read once into the free end of the buffer (compacting or growing it first if full).
    /// `Ready(Ok(0))` is end of stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
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
            Poll::Pending => Poll::Pending,
        }
    }

    pub(super) async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }
}
