//! The metrics of the listeners, for what no record can see: the connections waiting in a
//! listener's accept queue before tokentap takes them, and the handshakes the kernel dropped
//! because a queue was full (the client then waits a second or more for a retransmit, before
//! any request head, so before any TTFT starts). Read from `/proc` at each scrape
//! (`crate::listen::Watch`); absent where there is no `/proc`.

use metrics::{KeyName, Label, Recorder, SharedString};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::{Metrics, META};
use crate::listen::Sample;

pub const LISTEN_QUEUE: &str = "tokentap_listen_queue_connections";
pub const LISTEN_BACKLOG: &str = "tokentap_listen_backlog_connections";
pub const LISTEN_OVERFLOWS: &str = "tokentap_listen_overflows_total";
pub const LISTEN_DROPS: &str = "tokentap_listen_drops_total";

/// Describe this file's metrics.
pub(super) fn describe(r: &PrometheusRecorder) {
    let text = SharedString::const_str;
    r.describe_gauge(
        KeyName::from_const_str(LISTEN_QUEUE),
        None,
        text("Connections in the listener's accept queue at the scrape, by listener (proxy, admin): handshakes the kernel completed that tokentap has not yet accepted (rx_queue of the listening socket in /proc/net/tcp)."),
    );
    r.describe_gauge(
        KeyName::from_const_str(LISTEN_BACKLOG),
        None,
        text("The listener's accept-queue limit, by listener: listen.backlog (the proxy's) or the system's maximum, capped by net.core.somaxconn. A full queue drops handshakes."),
    );
    r.describe_counter(
        KeyName::from_const_str(LISTEN_OVERFLOWS),
        None,
        text("Host-wide (every listener on the host, not only tokentap's), counted since tokentap started: handshake packets (a SYN or the client's last ACK) dropped because a listener's accept queue was full (TcpExt ListenOverflows in /proc/net/netstat). Each costs its client a retransmit, 1 s or more, before its request reaches the listener."),
    );
    r.describe_counter(
        KeyName::from_const_str(LISTEN_DROPS),
        None,
        text("Host-wide (every listener on the host, not only tokentap's), counted since tokentap started: handshake packets dropped at a listener for any reason, the overflows among them (TcpExt ListenDrops in /proc/net/netstat)."),
    );
}

impl Metrics {
    /// One sample of the listeners and the host's listen counters into the exposition.
    pub fn observe_listeners(&self, s: &Sample) {
        let r = &self.recorder;
        for (w, depth) in &s.listeners {
            let l = || vec![Label::new("listener", w.name)];
            if let Some(d) = depth {
                r.register_gauge(&Self::key(LISTEN_QUEUE, l()), &META)
                    .set(f64::from(*d));
            }
            if let Some(b) = w.backlog.effective {
                r.register_gauge(&Self::key(LISTEN_BACKLOG, l()), &META)
                    .set(f64::from(b));
            }
        }
        if let Some(h) = s.host {
            r.register_counter(&Self::key(LISTEN_OVERFLOWS, vec![]), &META)
                .absolute(h.overflows);
            r.register_counter(&Self::key(LISTEN_DROPS, vec![]), &META)
                .absolute(h.drops);
        }
    }
}
