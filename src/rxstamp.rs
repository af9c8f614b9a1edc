//! The kernel's receive timestamps: when the last TCP segment of a read arrived, mapped onto
//! tokentap's monotonic clock, so a request's instants do not move with the time a busy process
//! took to read its bytes.
//!
//! On Linux a socket asked for `SO_TIMESTAMPNS` gets, with every `recvmsg`, one control message:
//! the software receive stamp (`CLOCK_REALTIME`) of the last segment the read took. The stamp is
//! mapped onto the monotonic clock by an offset sampled at each read: `lag = SystemTime::now() −
//! stamp`, read right after `recvmsg`, then `Instant::now() − lag` (see docs/records.md for the
//! error this adds). Elsewhere, or where the socket refuses the option, a read has no stamp and
//! its caller stamps it as before (`Instant::now()`).
//!
//! - [`Stamper`]: one socket's reads (the upstream client's connection);
//! - [`Stamped`]: a `TcpStream` whose reads leave their stamp in a [`Latest`] (the listener's
//!   connections, read by hyper through TLS or not).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Whether sockets are asked for stamps: unknown until first asked (then read from
/// `TOKENTAP_KERNEL_STAMPS`), on, or off. Off by default: the stamps cost CPU per read
/// (docs/overhead.md), so an operator turns them on where the host competes for the CPU.
static STATE: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// A stamp further back than this is not believed (the wall clock was stepped between the
/// segment's arrival and the read): the read falls back to the process's clock.
const MAX_LAG: Duration = Duration::from_secs(60);

/// Ask no socket for stamps from now on (every read then stamps with the process's clock).
pub fn disable() {
    STATE.store(OFF, Ordering::Relaxed);
}

/// Ask every new socket for stamps from now on, whatever the environment says.
pub fn enable() {
    STATE.store(ON, Ordering::Relaxed);
}

/// Are sockets asked for stamps? On when `TOKENTAP_KERNEL_STAMPS` is `1` (or [`enable`] was
/// called), off otherwise.
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = std::env::var_os("TOKENTAP_KERNEL_STAMPS").is_some_and(|v| v == "1");
            STATE.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// Ask the listening socket for stamps before its first connection: the kernel stamps arriving
/// segments only once some socket has asked (it turns that on a moment later), so without this
/// the first request heads after start would come unstamped. Accepted sockets inherit the option.
pub fn prepare(listener: &tokio::net::TcpListener) {
    if enabled() {
        sys::enable(listener);
    }
}

/// When a read's last segment arrived, on the monotonic clock, and how long before the read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub at: Instant,
    /// Between the kernel's arrival and tokentap's read: the scheduling delay.
    pub lag: Duration,
}

/// The kernel's stamp (`CLOCK_REALTIME`) on the monotonic clock, the offset sampled now.
fn on_timeline(stamp: SystemTime) -> Option<Arrival> {
    let wall = SystemTime::now();
    let now = Instant::now();
    // A stamp ahead of the wall clock (slewed between the two): no lag.
    let lag = wall.duration_since(stamp).unwrap_or_default();
    if lag > MAX_LAG {
        return None;
    }
    Some(Arrival {
        at: now.checked_sub(lag).unwrap_or(now),
        lag,
    })
}

/// One socket's reads with their stamps.
pub struct Stamper {
    on: bool,
    /// The control message's room: one `cmsghdr` and one `timespec` (32 bytes on 64-bit
    /// Linux), reused by every read.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    cmsg: [u8; 64],
}

impl Stamper {
    /// Ask `tcp` for receive stamps; a socket that refuses has none.
    pub fn new(tcp: &TcpStream) -> Self {
        Stamper {
            on: enabled() && sys::enable(tcp),
            cmsg: [0; 64],
        }
    }

    /// Does this socket give stamps?
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Read once, as `AsyncRead::poll_read`; with the stamp of the read's last segment when
    /// `want` and the socket gives one (the control message is not parsed otherwise).
    pub fn poll_read(
        &mut self,
        tcp: &mut TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        want: bool,
    ) -> Poll<io::Result<Option<Arrival>>> {
        if !self.on {
            return Pin::new(tcp).poll_read(cx, buf).map_ok(|()| None);
        }
        sys::poll_recv(tcp, cx, buf, want.then_some(&mut self.cmsg))
            .map_ok(|stamp| stamp.and_then(on_timeline))
    }
}

/// The stamp of a connection's last read that had one (`None`: the last read had none).
#[derive(Debug, Default)]
pub struct Latest(Mutex<Option<Arrival>>);

impl Latest {
    pub fn get(&self) -> Option<Arrival> {
        self.0.lock().map_or(None, |g| *g)
    }

    fn set(&self, a: Option<Arrival>) {
        if let Ok(mut g) = self.0.lock() {
            *g = a;
        }
    }
}

/// A client's connection whose every read leaves its stamp in a shared [`Latest`]: what hyper
/// (or TLS under it) read last when it hands on a request head.
pub struct Stamped {
    tcp: TcpStream,
    stamper: Stamper,
    latest: Arc<Latest>,
}

impl Stamped {
    pub fn new(tcp: TcpStream) -> (Self, Arc<Latest>) {
        let latest = Arc::new(Latest::default());
        let stamper = Stamper::new(&tcp);
        (
            Stamped {
                tcp,
                stamper,
                latest: latest.clone(),
            },
            latest,
        )
    }

    /// Does this connection give stamps?
    pub fn is_on(&self) -> bool {
        self.stamper.is_on()
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }
}

impl AsyncRead for Stamped {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match this.stamper.poll_read(&mut this.tcp, cx, buf, true) {
            Poll::Ready(Ok(stamp)) => {
                // Off, there is never a stamp to leave: no lock per read.
                if this.stamper.is_on() && buf.filled().len() > before {
                    this.latest.set(stamp);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io;
    use std::os::fd::AsRawFd;
    use std::task::{ready, Context, Poll};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
    use tokio::io::{Interest, ReadBuf};
    use tokio::net::TcpStream;

    /// One read's largest size.
    const MAX_READ: usize = 64 * 1024;

    pub(super) fn enable(socket: &impl std::os::fd::AsFd) -> bool {
        setsockopt(socket, sockopt::ReceiveTimestampns, &true).is_ok()
    }

    /// One `recvmsg` into `buf`'s free room; the kernel's stamp when `cmsg` is given and holds
    /// one.
    pub(super) fn poll_recv(
        tcp: &TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        mut cmsg: Option<&mut [u8; 64]>,
    ) -> Poll<io::Result<Option<SystemTime>>> {
        let fd = tcp.as_raw_fd();
        let want = cmsg.is_some();
        loop {
            ready!(tcp.poll_read_ready(cx))?;
            // Safe code reads only into initialized memory: a buffer handed over uninitialized
            // (hyper's) is zeroed first, at most `MAX_READ` of it per read.
            let take = buf.remaining().min(MAX_READ);
            let room = buf.initialize_unfilled_to(take);
            let got = tcp.try_io(Interest::READABLE, || {
                let mut iov = [io::IoSliceMut::new(room)];
                let msg = recvmsg::<()>(
                    fd,
                    &mut iov,
                    cmsg.as_deref_mut().map(|c| &mut c[..]),
                    MsgFlags::empty(),
                )
                .map_err(io::Error::from)?;
                let stamp = match want {
                    false => None,
                    true => msg.cmsgs().ok().and_then(|mut all| {
                        all.find_map(|m| match m {
                            ControlMessageOwned::ScmTimestampns(ts) => Some(ts),
                            _ => None,
                        })
                    }),
                };
                Ok((msg.bytes, stamp))
            });
            match got {
                Ok((n, stamp)) => {
                    buf.advance(n);
                    let stamp = stamp.and_then(|ts| {
                        let secs = u64::try_from(ts.tv_sec()).ok()?;
                        let nanos = u32::try_from(ts.tv_nsec()).ok()?;
                        UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
                    });
                    return Poll::Ready(Ok(stamp.filter(|_| n > 0)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;
    use std::task::{Context, Poll};
    use std::time::SystemTime;

    use tokio::io::ReadBuf;
    use tokio::net::TcpStream;

    pub(super) fn enable<S>(_: &S) -> bool {
        false
    }

    pub(super) fn poll_recv(
        _: &TcpStream,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
        _: Option<&mut [u8; 64]>,
    ) -> Poll<io::Result<Option<SystemTime>>> {
        Poll::Ready(Ok(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_maps_onto_the_monotonic_clock_by_its_lag() {
        let before = Instant::now();
        let a = on_timeline(SystemTime::now() - Duration::from_millis(5)).unwrap();
        assert!(a.lag >= Duration::from_millis(5) && a.lag < Duration::from_secs(1));
        assert!(a.at <= before, "5 ms back is before the call");
        // Ahead of the wall clock (slewed between the two reads): no lag, now.
        let ahead = on_timeline(SystemTime::now() + Duration::from_millis(5)).unwrap();
        assert_eq!(ahead.lag, Duration::ZERO);
        // Older than a minute: the wall clock was stepped; not believed.
        assert!(on_timeline(SystemTime::now() - Duration::from_secs(61)).is_none());
    }
}
