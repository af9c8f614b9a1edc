//! The response body of one upstream exchange, read straight from the connection by the task
//! that writes it to the client: each poll hands on everything the socket has, de-chunked, as
//! one frame. The connection goes back to the pool only after the response was read to its end,
//! or — when told by [`UpstreamBody::pool_after_drop`] — drained in the background after a
//! consumer that stopped reading at the stream's logical end.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

use super::io::Io;
use super::{Upstream, UpstreamError};
use crate::proxy::h1::{Decoder, Framing};
use crate::rxstamp::Arrival;

/// Largest frame one poll hands on.
const MAX_FRAME: usize = 256 * 1024;
/// A connection whose client left after the stream's end (`[DONE]`) is read to its end in the
/// background for at most this long and this many bytes, then pooled.
const DRAIN_WAIT: Duration = Duration::from_secs(2);
const DRAIN_MAX: usize = 64 * 1024;

/// A response body read straight from the upstream connection.
pub struct UpstreamBody {
    pub(super) io: Option<Io>,
    pub(super) dec: Decoder,
    /// Where the connection goes when the body was read to its end (`None`: not reusable).
    pub(super) pool: Option<Arc<Upstream>>,
    /// An error met after data that was handed on first.
    pub(super) err: Option<UpstreamError>,
    /// The error waits one turn after that data, so the client connection writes the data out
    /// before the error cuts it.
    pub(super) err_waits: bool,
    /// The stream is complete for its consumer: if the body is dropped now, the rest of the
    /// response is drained in the background and the connection kept.
    pub(super) drain: bool,
    /// The kernel's stamp of the last read (the last segment of the last frame handed on).
    pub(super) arrival: Option<Arrival>,
}

impl UpstreamBody {
    /// The stream is complete for its consumer (e.g. `[DONE]` was seen), so what is left is
    /// framing: when this body is dropped before its end, read the rest in the background and
    /// keep the connection. Without this call a body dropped early closes its connection.
    pub fn pool_after_drop(self: Pin<&mut Self>) {
        self.get_mut().drain = true;
    }

    /// When the last frame's last segment arrived, by the kernel's stamp (`None`: the read
    /// had no stamp; the caller stamps it with the process's clock).
    pub fn arrival(&self) -> Option<Arrival> {
        self.arrival
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if !self.drain || self.err.is_some() {
            return; // the connection closes with `io` (a client that left mid-stream)
        }
        let (Some(io), Some(pool)) = (self.io.take(), self.pool.take()) else {
            return;
        };
        let dec = std::mem::replace(&mut self.dec, Decoder::new(Framing::Empty));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(drain(io, dec, pool));
        }
    }
}

/// Read what is left of a response and pool the connection, within `DRAIN_WAIT`/`DRAIN_MAX`.
async fn drain(mut io: Io, mut dec: Decoder, pool: Arc<Upstream>) {
    io.want_stamps = false;
    let rest = async {
        let mut discard = BytesMut::new();
        let mut total = 0;
        loop {
            if !io.filled().is_empty() {
                let n = dec.decode(io.filled(), &mut discard).ok()?;
                io.consume(n);
                total += discard.len();
                discard.clear();
                if dec.is_done() {
                    return Some(io);
                }
                if total > DRAIN_MAX {
                    return None;
                }
            }
            match io.fill().await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    };
    if let Ok(Some(io)) = tokio::time::timeout(DRAIN_WAIT, rest).await {
        pool.pool.put(io);
    }
}

impl UpstreamBody {
    /// The body is over: the connection goes back to the pool (or is closed).
    pub(super) fn release(&mut self) {
        let io = self.io.take();
        if let (Some(io), Some(pool)) = (io, self.pool.take()) {
            pool.pool.put(io);
        }
    }
}

#[warn(clippy::missing_trait_methods)]
impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = UpstreamError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        let this = self.get_mut();
        if this.err_waits {
            this.err_waits = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut out = BytesMut::new();
        // Everything buffered and everything the socket has now, up to MAX_FRAME: one frame.
        let reading = !this.dec.is_done() && this.err.is_none();
        while let (true, Some(io)) = (reading, this.io.as_mut()) {
            if !io.filled().is_empty() {
                if out.capacity() == 0 {
                    out.reserve(io.filled().len());
                }
                match this.dec.decode(io.filled(), &mut out) {
                    Ok(n) => io.consume(n),
                    Err(e) => {
                        this.err = Some(e.into());
                        break;
                    }
                }
                if this.dec.is_done() {
                    break;
                }
            }
            if out.len() >= MAX_FRAME {
                break;
            }
            match io.poll_fill(cx) {
                Poll::Ready(Ok(0)) => {
                    if !this.dec.on_eof() {
                        this.err = Some(UpstreamError::ClosedMidBody);
                    }
                    break;
                }
                Poll::Ready(Ok(_)) => this.arrival = io.arrival,
                Poll::Ready(Err(e)) => {
                    this.err = Some(UpstreamError::Read(e));
                    break;
                }
                Poll::Pending => break,
            }
        }
        if this.dec.is_done() && this.err.is_none() {
            // Before the last frame leaves: its consumer may never poll again.
            this.release();
        }
        if !out.is_empty() {
            this.err_waits = this.err.is_some();
            return Poll::Ready(Some(Ok(Frame::data(out.freeze()))));
        }
        if let Some(e) = this.err.take() {
            this.io = None;
            return Poll::Ready(Some(Err(e)));
        }
        if this.dec.is_done() || this.io.is_none() {
            return Poll::Ready(this.dec.take_trailers().map(|t| Ok(Frame::trailers(t))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.dec.is_done() && self.err.is_none() && self.io.is_none() && !self.dec.has_trailers()
    }

    fn size_hint(&self) -> SizeHint {
        match self.dec.remaining() {
            Some(n) if self.err.is_none() => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}
