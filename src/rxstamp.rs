//! The kernel's receive timestamps: when the last TCP segment of a read arrived, mapped onto
//! tokentap's monotonic clock, so a request's instants do not move with the time a busy process
//! took to read its bytes.
//!
//! On Linux a socket asked for `SO_TIMESTAMPNS` gets, with every `recvmsg`, one control message:
//! the software receive stamp (`CLOCK_REALTIME`) of the last segment the read took. The stamp is
//! mapped onto the monotonic clock by an offset between the two clocks, sampled once per second
//! of stamps on each thread (see docs/records.md for the error this adds): a read reads no clock.
//! Elsewhere, or where the socket refuses the option, a read has no stamp and its caller stamps
//! it as before (`Instant::now()`).
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

/// The process clock: on the record's path its one door (clippy's `disallowed-methods` refuses
/// `Instant::now` elsewhere). For instants no read stamps: a chunk handed on, a deadline, a
/// record's end. A read's instant is its kernel stamp where there is one (`Stamped`).
#[allow(clippy::disallowed_methods)] // the door itself
pub fn now() -> Instant {
    Instant::now()
}

/// Whether sockets are asked for stamps: unknown until first asked (then read from
/// `TOKENTAP_KERNEL_STAMPS`), on, or off. On by default on Linux, where their cost is within
/// the run-to-run noise of the full-speed bench (docs/overhead.md); off elsewhere (no kernel
/// there gives them, so every request would be a fallback).
static STATE: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// A stamp further back than this is not believed (the wall clock was stepped between the
/// segment's arrival and the read): the read falls back to the process's clock.
const MAX_LAG: Duration = Duration::from_secs(60);

/// The offset between the two clocks is sampled again once a stamp is this far from the last
/// sample: it changes only when the wall clock is stepped (both clocks are slewed alike).
const RESAMPLE: Duration = Duration::from_secs(1);

/// Ask no socket for stamps from now on (every read then stamps with the process's clock).
pub fn disable() {
    STATE.store(OFF, Ordering::Relaxed);
}

/// Ask every new socket for stamps from now on, whatever the environment says.
pub fn enable() {
    STATE.store(ON, Ordering::Relaxed);
}

/// Are sockets asked for stamps? `TOKENTAP_KERNEL_STAMPS=0` turns them off, `=1` on (also
/// where the kernel gives none: each request is then a counted fallback); unset, or any other
/// value, they are on on Linux and off elsewhere. [`enable`] and [`disable`] override it.
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = asked(std::env::var_os("TOKENTAP_KERNEL_STAMPS").as_deref());
            STATE.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// What `TOKENTAP_KERNEL_STAMPS` asks for: `0` off, `1` on, else the default (on on Linux).
fn asked(v: Option<&std::ffi::OsStr>) -> bool {
    match v {
        Some(v) if v == "0" => false,
        Some(v) if v == "1" => true,
        _ => cfg!(target_os = "linux"),
    }
}

/// Ask a listening socket for stamps before its first connection, and wait (at most
/// `STAMPING_WAIT`) until the kernel stamps arriving segments: it turns that on only once some
/// socket has asked, and then a moment later (from a work queue). Accepted sockets inherit the
/// option. Returns whether the kernel stamps (false when the stamps are off).
///
/// Called on the socket before it listens (`listen::bind_stamped`, the proxy's listener), so
/// no connection is taken into the accept queue while the kernel turns stamping on: a request
/// head that arrived then would have no stamp, and its record would say `clock: process`.
/// Called on a socket already listening, it still waits, but what arrives meanwhile waits in
/// the accept queue unstamped.
///
/// The wait (a loopback probe with blocking sockets and sleeps) runs on the blocking pool, not
/// on the runtime's threads. Once the kernel stamps, the probe's first byte says so: a second
/// call costs a loopback round trip.
pub async fn prepare(socket: &impl std::os::fd::AsFd) -> bool {
    if !(enabled() && sys::enable(socket)) {
        return false;
    }
    tokio::task::spawn_blocking(|| sys::await_stamping(STAMPING_WAIT))
        .await
        .unwrap_or(false)
}

/// How long `prepare` waits for the kernel to stamp.
const STAMPING_WAIT: Duration = Duration::from_millis(200);

/// When a read's last segment arrived, on the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub at: Instant,
}

/// The two clocks read together: a stamp on the wall clock is as far from `mono` as it is from
/// `wall`.
#[derive(Debug, Clone, Copy)]
struct Base {
    wall: SystemTime,
    mono: Instant,
}

impl Base {
    fn now() -> Self {
        Base {
            // The wall clock, read beside the monotonic one to map stamps onto it.
            #[allow(clippy::disallowed_methods)]
            wall: SystemTime::now(),
            mono: now(),
        }
    }

    /// `stamp` on the monotonic clock, when it is within `near` of this sample.
    fn map(&self, stamp: SystemTime, near: Duration) -> Option<Instant> {
        match stamp.duration_since(self.wall) {
            Ok(ahead) if ahead <= near => self.mono.checked_add(ahead),
            Ok(_) => None,
            Err(e) if e.duration() <= near => self.mono.checked_sub(e.duration()),
            Err(_) => None,
        }
    }
}

/// The kernel's stamp (`CLOCK_REALTIME`) on the monotonic clock, by `base` while the stamp is
/// within a second of it, else by a new sample (kept in `base`). A stamp a minute older than
/// the wall clock is not believed; one ahead of it (slewed between the two reads) is now.
fn on_timeline(base: &mut Option<Base>, stamp: SystemTime) -> Option<Arrival> {
    if let Some(at) = base.as_ref().and_then(|b| b.map(stamp, RESAMPLE)) {
        return Some(Arrival { at });
    }
    let b = Base::now();
    *base = Some(b);
    let at = match stamp.duration_since(b.wall) {
        Ok(_) => b.mono,
        Err(_) => b.map(stamp, MAX_LAG)?,
    };
    Some(Arrival { at })
}

thread_local! {
    /// The clocks' offset, sampled at this thread's first stamp and once per second of stamps
    /// (the offset is the process's: any socket's stamp maps by it). Per thread, not per
    /// socket: a socket a stream waits on holds nothing for it (docs/overhead.md, "Memory per
    /// stream").
    static BASE: std::cell::Cell<Option<Base>> = const { std::cell::Cell::new(None) };
}

/// `stamp` on the monotonic clock by this thread's sample of the clocks' offset.
fn mapped(stamp: SystemTime) -> Option<Arrival> {
    BASE.with(|cell| {
        let mut base = cell.get();
        let at = on_timeline(&mut base, stamp);
        cell.set(base);
        at
    })
}

/// One socket's reads with their stamps.
///
/// NB: one byte: the control message's room is on the reading function's stack and the
/// clocks' offset is per thread (`BASE`), so the socket of a stream that waits holds nothing
/// for its stamps.
pub struct Stamper {
    on: bool,
}

impl Stamper {
    /// Ask `tcp` for receive stamps; a socket that refuses has none.
    pub fn new(tcp: &TcpStream) -> Self {
        Stamper {
            on: enabled() && sys::enable(tcp),
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
        // One `cmsghdr` and one `timespec` (32 bytes on 64-bit Linux).
        let mut cmsg = [0u8; 64];
        sys::poll_recv(tcp, cx, buf, want.then_some(&mut cmsg))
            .map_ok(|stamp| stamp.and_then(mapped))
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
    use std::cell::RefCell;
    use std::io::{self, Write};
    use std::os::fd::{AsRawFd, RawFd};
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

    /// Send a byte to ourselves over loopback TCP until its read carries a stamp (the kernel
    /// stamps every socket's segments alike once it stamps any), for at most `wait`.
    pub(super) fn await_stamping(wait: Duration) -> bool {
        let probe = || -> io::Result<bool> {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            enable(&listener);
            let mut tx = std::net::TcpStream::connect(listener.local_addr()?)?;
            let (rx, _) = listener.accept()?;
            rx.set_read_timeout(Some(wait))?;
            let until = crate::rxstamp::now() + wait;
            let mut cmsg = [0u8; 64];
            let mut byte = [0u8; 1];
            loop {
                tx.write_all(b"s")?;
                if recv(rx.as_raw_fd(), &mut byte, Some(&mut cmsg))?
                    .1
                    .is_some()
                {
                    return Ok(true);
                }
                if crate::rxstamp::now() >= until {
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        probe().unwrap_or(false)
    }

    thread_local! {
        /// Where a read into uninitialized memory (hyper's buffer) lands first: safe code
        /// reads only into initialized memory, and copying what was read costs less than
        /// zeroing the whole room at every read.
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    /// One `recvmsg` into `buf`'s free room; the kernel's stamp when `cmsg` is given and holds
    /// one.
    ///
    /// A read that took less than the room drained the socket: its readiness is cleared then,
    /// as tokio's own `TcpStream` reads do, so the next poll waits for the next segment instead
    /// of asking the kernel once more for nothing (a `recvmsg` answered `EAGAIN` after every
    /// event, before the event was handed on; and the pool's check of an idle connection would
    /// find it ready and ask the kernel too). `try_io` clears it when its closure says
    /// `WouldBlock`, and only if no new readiness came meanwhile (tokio's tick): the closure
    /// keeps what it read in `done` and says so.
    pub(super) fn poll_recv(
        tcp: &TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        mut cmsg: Option<&mut [u8; 64]>,
    ) -> Poll<io::Result<Option<SystemTime>>> {
        let fd = tcp.as_raw_fd();
        let take = buf.remaining().min(MAX_READ);
        // The free room is initialized already (a caller's own buffer): read straight into it.
        let direct = buf.initialized().len() >= buf.filled().len() + take;
        loop {
            ready!(tcp.poll_read_ready(cx))?;
            let mut done = None;
            let got = tcp.try_io(Interest::READABLE, || {
                let got = if direct {
                    let got = recv(fd, buf.initialize_unfilled_to(take), cmsg.as_deref_mut())?;
                    buf.advance(got.0);
                    got
                } else {
                    SCRATCH.with_borrow_mut(|scratch| {
                        if scratch.len() < take {
                            scratch.resize(take, 0);
                        }
                        let got = recv(fd, &mut scratch[..take], cmsg.as_deref_mut())?;
                        buf.put_slice(&scratch[..got.0]);
                        Ok::<_, io::Error>(got)
                    })?
                };
                if got.0 > 0 && got.0 < take {
                    done = Some(got);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(got)
            });
            match (got, done) {
                (_, Some((n, stamp))) | (Ok((n, stamp)), None) => {
                    return Poll::Ready(Ok(stamp.filter(|_| n > 0)))
                }
                (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => continue,
                (Err(e), None) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// One `recvmsg` into `room`: how many bytes, and the stamp when `cmsg` is given and the
    /// kernel put one in it.
    fn recv(
        fd: RawFd,
        room: &mut [u8],
        cmsg: Option<&mut [u8; 64]>,
    ) -> io::Result<(usize, Option<SystemTime>)> {
        let want = cmsg.is_some();
        let mut iov = [io::IoSliceMut::new(room)];
        let msg = recvmsg::<()>(fd, &mut iov, cmsg.map(|c| &mut c[..]), MsgFlags::empty())
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
        let stamp = stamp.and_then(|ts| {
            let secs = u64::try_from(ts.tv_sec()).ok()?;
            let nanos = u32::try_from(ts.tv_nsec()).ok()?;
            UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
        });
        Ok((msg.bytes, stamp))
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

    pub(super) fn await_stamping(_: std::time::Duration) -> bool {
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
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use super::*;

    #[test]
    fn the_environment_turns_them_off_or_on_and_linux_has_them_by_default() {
        use std::ffi::OsStr;
        assert!(!asked(Some(OsStr::new("0"))));
        assert!(asked(Some(OsStr::new("1"))));
        assert_eq!(asked(None), cfg!(target_os = "linux"));
        assert_eq!(asked(Some(OsStr::new("yes"))), cfg!(target_os = "linux"));
    }

    /// A connected pair on loopback: (ours, the peer's).
    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ours = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (ours, l.accept().await.unwrap().0)
    }

    /// One stamped read into `room` bytes, waiting for it.
    async fn read(stamper: &mut Stamper, tcp: &mut TcpStream, room: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; room];
        let mut buf = ReadBuf::new(&mut bytes);
        std::future::poll_fn(|cx| stamper.poll_read(tcp, cx, &mut buf, true))
            .await
            .unwrap();
        buf.filled().to_vec()
    }

    fn ready_now(tcp: &TcpStream) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        tcp.poll_read_ready(&mut cx).is_ready()
    }

    /// A read that took less than its room drained the socket: the socket is no longer ready,
    /// so the next read waits for the next segment instead of asking the kernel for nothing,
    /// and that segment still wakes it. A read that filled its room stays ready.
    #[tokio::test(flavor = "current_thread")]
    async fn a_read_that_drains_the_socket_leaves_it_waiting_for_the_next_segment() {
        use tokio::io::AsyncWriteExt;
        let (mut tcp, mut peer) = pair().await;
        let mut stamper = Stamper::new(&tcp);
        peer.write_all(b"data: 1\n\n").await.unwrap();
        assert_eq!(read(&mut stamper, &mut tcp, 64).await, b"data: 1\n\n");
        assert!(!ready_now(&tcp), "drained by a short read: not ready");

        peer.write_all(b"data: 2\n\n").await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), read(&mut stamper, &mut tcp, 64));
        assert_eq!(
            next.await.unwrap(),
            b"data: 2\n\n",
            "the next segment wakes it"
        );

        peer.write_all(&[7u8; 100]).await.unwrap();
        tcp.readable().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(read(&mut stamper, &mut tcp, 10).await, [7u8; 10]);
        assert!(
            ready_now(&tcp),
            "a full read may have left bytes: still ready"
        );
        assert_eq!(read(&mut stamper, &mut tcp, 200).await, [7u8; 90]);
        assert!(!ready_now(&tcp));
    }

    #[test]
    fn a_stamp_maps_onto_the_monotonic_clock_by_the_sampled_offset() {
        let mut base = None;
        let before = Instant::now();
        let a = on_timeline(&mut base, SystemTime::now() - Duration::from_millis(5)).unwrap();
        let after = Instant::now();
        assert!(a.at <= before, "5 ms back is before the call");
        assert!(after - a.at >= Duration::from_millis(5) && after - a.at < Duration::from_secs(1));
        // The sample is kept: a later stamp maps by the same offset, reading no clock.
        let b = base.unwrap();
        let later = on_timeline(&mut base, b.wall + Duration::from_millis(300)).unwrap();
        assert_eq!(later.at, b.mono + Duration::from_millis(300));
        assert_eq!(
            base.unwrap().mono,
            b.mono,
            "within a second of the sample: not re-sampled"
        );
        // Two seconds on: sampled again.
        let on = on_timeline(&mut base, b.wall + Duration::from_secs(2));
        assert!(on.is_some());
        assert_ne!(base.unwrap().mono, b.mono, "re-sampled");
        // Ahead of the wall clock (slewed between the two reads): now.
        let mut fresh = None;
        let ahead = on_timeline(&mut fresh, SystemTime::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(ahead.at, fresh.unwrap().mono);
        // Older than a minute: the wall clock was stepped; not believed.
        let old = SystemTime::now() - Duration::from_secs(61);
        assert!(on_timeline(&mut None, old).is_none());
        assert!(
            on_timeline(&mut base, old).is_none(),
            "a kept sample does not vouch for it"
        );
    }
}
