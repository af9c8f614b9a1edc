//! Listening sockets: bound with an accept queue as long as the system allows (or as configured),
//! and what the kernel says about them — each listener's accept-queue depth and the host's
//! listen overflows — read from `/proc` on Linux, off the data path (at a scrape).
//!
//! Why the backlog matters: a connection whose handshake finds the accept queue full is dropped
//! by the kernel (its SYN, or its last ACK), and the client waits for a retransmit: a second,
//! then three. mio (under tokio's `TcpListener::bind`) listens with 128. Every listener
//! tokentap opens goes through [`bind`]: the admin's, the sim's and its hop's; the proxy's through
//! [`bind_stamped`], which has the kernel's receive stamps on before it listens.
//!
//! Never on the data path: nothing here runs per connection or per request. Elsewhere than
//! Linux there is no `/proc`: [`accept_queue`] and [`tcp_ext`] say nothing (`None`), and the
//! metrics built on them are absent.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// The backlog asked for when the system's maximum cannot be read (Linux's own default for
/// `net.core.somaxconn` since 5.4; the kernel caps any backlog at its maximum anyway).
pub const FALLBACK_BACKLOG: u32 = 4096;

/// The largest backlog `listen(2)` takes (an `int`).
pub const MAX_BACKLOG: u32 = i32::MAX as u32;

/// The system's maximum backlog: `net.core.somaxconn` (Linux), `None` where it cannot be read.
pub fn system_max() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok()?;
    text.trim().parse().ok().filter(|n| *n > 0)
}

/// What a listener asked for and what it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// Passed to `listen(2)`: the configured value, else the system's maximum.
    pub asked: u32,
    /// The accept queue's limit: `asked` capped by the system's maximum; `None` where that
    /// maximum cannot be read (the kernel caps it all the same).
    pub effective: Option<u32>,
}

impl Backlog {
    /// The backlog for a configured value (`None`: the system's maximum).
    pub fn resolve(configured: Option<u32>) -> Backlog {
        Self::with_max(configured, system_max())
    }

    fn with_max(configured: Option<u32>, max: Option<u32>) -> Backlog {
        let asked = configured
            .or(max)
            .unwrap_or(FALLBACK_BACKLOG)
            .clamp(1, MAX_BACKLOG);
        Backlog {
            asked,
            effective: max.map(|m| asked.min(m)),
        }
    }
}

/// A bound, listening socket and its backlog.
pub struct Bound {
    pub listener: TcpListener,
    pub backlog: Backlog,
}

/// Bind `addr` and listen with `backlog` (SO_REUSEADDR on, as tokio's own `bind`). Must be called
/// within a tokio runtime.
pub fn bind(addr: SocketAddr, backlog: Backlog) -> io::Result<Bound> {
    let listener = bound(addr)?.listen(backlog.asked)?;
    Ok(Bound { listener, backlog })
}

/// Bind `addr` and listen with `backlog`, as [`bind`], with the kernel's receive stamps asked
/// for and on before the socket listens (`rxstamp::prepare`): every connection it accepts has
/// its request heads stamped from the first. The proxy's listener.
pub async fn bind_stamped(addr: SocketAddr, backlog: Backlog) -> io::Result<Bound> {
    let socket = bound(addr)?;
    // Whether the kernel gives stamps is told when serving starts (`server::run`).
    let _ = crate::rxstamp::prepare(&socket).await;
    let listener = socket.listen(backlog.asked)?;
    Ok(Bound { listener, backlog })
}

/// A socket bound to `addr` (SO_REUSEADDR on, as tokio's own `bind`), not yet listening.
fn bound(addr: SocketAddr) -> io::Result<TcpSocket> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// Bind an address given as text (`host:port`, resolved; the first address that binds wins),
/// with the system's maximum backlog: the sim's and the demo's listeners.
pub async fn bind_str(addr: &str) -> io::Result<TcpListener> {
    let backlog = Backlog::resolve(None);
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        match bind(a, backlog) {
            Ok(b) => return Ok(b.listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on")))
}

/// Connections waiting in the accept queue of the listener on `addr` (the kernel has completed
/// their handshake; tokentap has not yet taken them): `rx_queue` of its LISTEN line in
/// `/proc/net/tcp` (or `tcp6`). `None` where there is no such file or no such listener.
pub fn accept_queue(addr: SocketAddr) -> Option<u32> {
    let table = match addr {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = listening_lines(table).ok()?;
    depth_in(&text, addr)
}

/// The lines of a `/proc/net/tcp` table up to its first socket that is not listening: the kernel
/// lists the listening sockets first, so a host with many connections costs no more to read.
fn listening_lines(path: &str) -> io::Result<String> {
    use std::io::BufRead;
    let mut out = String::new();
    let mut lines = io::BufReader::new(std::fs::File::open(path)?).lines();
    if let Some(head) = lines.next() {
        out.push_str(&head?);
        out.push('\n');
    }
    for line in lines {
        let line = line?;
        if line.split_whitespace().nth(3) != Some(LISTEN) {
            break;
        }
        out.push_str(&line);
        out.push('\n');
    }
    Ok(out)
}

/// The state column of a listening socket (`TCP_LISTEN`).
const LISTEN: &str = "0A";

/// `addr` as `/proc/net/tcp` writes a local address: the address's 32-bit words in the host's
/// byte order, in hex, then `:` and the port in hex.
fn proc_form(addr: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr {
        SocketAddr::V4(a) => vec![a.ip().octets()],
        SocketAddr::V6(a) => a
            .ip()
            .octets()
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let mut s: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    s.push_str(&format!(":{:04X}", addr.port()));
    s
}

/// The accept-queue depth of the listener on `addr` in a `/proc/net/tcp` table's text.
fn depth_in(table: &str, addr: SocketAddr) -> Option<u32> {
    let want = proc_form(addr);
    table.lines().skip(1).find_map(|line| {
        let mut f = line.split_whitespace();
        let local = f.nth(1)?;
        let state = f.nth(1)?;
        let queues = f.next()?;
        if state != LISTEN || !local.eq_ignore_ascii_case(&want) {
            return None;
        }
        let rx = queues.split(':').nth(1)?;
        u32::from_str_radix(rx, 16).ok()
    })
}

/// The host's listen counters (`TcpExt:` in `/proc/net/netstat`), counted since boot across every
/// listener on the host, not only tokentap's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpExt {
    /// `ListenOverflows`: handshakes dropped because a listener's accept queue was full.
    pub overflows: u64,
    /// `ListenDrops`: every drop at a listener (the overflows among them).
    pub drops: u64,
}

impl TcpExt {
    /// What was counted since `base` (saturating: the counters only grow).
    pub fn since(self, base: TcpExt) -> TcpExt {
        TcpExt {
            overflows: self.overflows.saturating_sub(base.overflows),
            drops: self.drops.saturating_sub(base.drops),
        }
    }
}

/// The host's listen counters now; `None` where `/proc/net/netstat` cannot be read.
pub fn tcp_ext() -> Option<TcpExt> {
    parse_tcp_ext(&std::fs::read_to_string("/proc/net/netstat").ok()?)
}

/// `TcpExt:` names and values from `/proc/net/netstat`'s text (a line of names, then a line of
/// values).
fn parse_tcp_ext(text: &str) -> Option<TcpExt> {
    let mut rows = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (rows.next()?, rows.next()?);
    let value = |name: &str| {
        let i = names.split_whitespace().position(|n| n == name)?;
        values.split_whitespace().nth(i)?.parse().ok()
    };
    Some(TcpExt {
        overflows: value("ListenOverflows")?,
        drops: value("ListenDrops")?,
    })
}

/// One of tokentap's listeners, as its metrics name it.
#[derive(Debug, Clone, Copy)]
pub struct Watched {
    /// `proxy` or `admin`: the metrics' `listener` label.
    pub name: &'static str,
    pub addr: SocketAddr,
    pub backlog: Backlog,
}

/// Listeners to watch, and the host's counters when watching began.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    pub listeners: Vec<Watched>,
    base: Option<TcpExt>,
}

/// One sample: each listener's accept-queue depth (`None` where it could not be read) and the
/// host's counters since watching began.
#[derive(Debug, Clone)]
pub struct Sample {
    pub listeners: Vec<(Watched, Option<u32>)>,
    pub host: Option<TcpExt>,
}

impl Watch {
    /// Watch `listeners` from now on.
    pub fn new(listeners: Vec<Watched>) -> Watch {
        Watch {
            listeners,
            base: tcp_ext(),
        }
    }

    /// Read `/proc` now (a few pages; never call it per connection).
    pub fn sample(&self) -> Sample {
        Sample {
            listeners: self
                .listeners
                .iter()
                .map(|w| (*w, accept_queue(w.addr)))
                .collect(),
            host: self.base.and_then(|b| Some(tcp_ext()?.since(b))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_is_the_system_maximum_unless_configured_and_capped_by_it() {
        let b = Backlog::with_max(None, Some(4096));
        assert_eq!((b.asked, b.effective), (4096, Some(4096)));
        let b = Backlog::with_max(Some(300), Some(4096));
        assert_eq!((b.asked, b.effective), (300, Some(300)));
        let b = Backlog::with_max(Some(10_000), Some(4096));
        assert_eq!((b.asked, b.effective), (10_000, Some(4096)));
        let b = Backlog::with_max(None, None);
        assert_eq!((b.asked, b.effective), (FALLBACK_BACKLOG, None));
    }

    #[test]
    fn a_listeners_depth_is_read_from_its_listen_line() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 298 1\n\
           1: 0100007F:24E8 00000000:0000 0A 00000000:000000C9 00:00000000 00000000     0        0 299 1\n\
           2: 0100007F:24E8 0100007F:9C40 01 00000000:00000010 00:00000000 00000000     0        0 300 1\n";
        let at = |s: &str| depth_in(table, s.parse().unwrap());
        assert_eq!(at("127.0.0.1:9448"), Some(201));
        assert_eq!(at("0.0.0.0:8080"), Some(0));
        assert_eq!(at("127.0.0.1:8080"), None, "another address");
        assert_eq!(at("127.0.0.2:9448"), None);
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue\n\
           0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000007 00:00000000\n";
        if cfg!(target_endian = "little") {
            assert_eq!(depth_in(v6, "[::1]:8080".parse().unwrap()), Some(7));
            assert_eq!(
                proc_form("127.0.0.1:8080".parse().unwrap()),
                "0100007F:1F90"
            );
        }
    }

    #[test]
    fn reading_stops_at_the_first_socket_that_is_not_listening() {
        let path = std::env::temp_dir().join(format!("tokentap-tcp-{}", std::process::id()));
        let head = "  sl  local_address rem_address   st tx_queue rx_queue\n";
        let line = |i: u32, st: &str| {
            format!(
                "{i:4}: 0100007F:{:04X} 00000000:0000 {st} 00000000:00000003\n",
                8000 + i
            )
        };
        let text = [
            head.to_owned(),
            line(0, "0A"),
            line(1, "0A"),
            line(2, "01"),
            line(3, "0A"),
        ];
        std::fs::write(&path, text.concat()).unwrap();
        let got = listening_lines(path.to_str().unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            got,
            [head.to_owned(), line(0, "0A"), line(1, "0A")].concat()
        );
        assert_eq!(depth_in(&got, "127.0.0.1:8001".parse().unwrap()), Some(3));
    }

    #[test]
    fn the_listen_counters_are_read_by_name() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPHPHits\n\
                    TcpExt: 0 529 531 7\n\
                    IpExt: InNoRoutes\nIpExt: 0\n";
        let c = parse_tcp_ext(text).unwrap();
        assert_eq!(
            c,
            TcpExt {
                overflows: 529,
                drops: 531
            }
        );
        assert_eq!(
            c.since(TcpExt {
                overflows: 500,
                drops: 600
            }),
            TcpExt {
                overflows: 29,
                drops: 0
            }
        );
        assert_eq!(parse_tcp_ext("TcpExt: ListenOverflows\n"), None);
    }
}
