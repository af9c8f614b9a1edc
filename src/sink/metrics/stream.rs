//! The metrics of streaming integrity: how each stream arrived (`streamed`, `coalesced`,
//! `buffered`), every token's relay through a tapped gateway, compressed bodies whose
//! measurement stopped, and the clock that stamped them (the kernel's lag, its fallbacks).

use std::sync::OnceLock;

use metrics::{KeyName, Label, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::{Metrics, META};
use crate::meter::delivery::Verdict;
use crate::meter::{Clock, RequestRecord};

pub const STREAM_DELIVERY: &str = "tokentap_stream_delivery_total";
pub const GATEWAY_RELAY: &str = "tokentap_gateway_token_relay_seconds";
pub const DECODE_STOPPED: &str = "tokentap_decode_stopped_total";
pub const STAMP_LAG: &str = "tokentap_stamp_lag_seconds";
pub const CLOCK_FALLBACKS: &str = "tokentap_clock_fallbacks_total";

/// Stamp-lag buckets (seconds): an idle host's microseconds to a starved one's hundreds of
/// milliseconds.
pub const LAG_BUCKETS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Describe this file's metrics.
pub(super) fn describe(r: &PrometheusRecorder) {
    let text = SharedString::const_str;
    r.describe_counter(
        KeyName::from_const_str(STREAM_DELIVERY),
        None,
        text("Streams with content, by route and how they arrived from the upstream: streamed (event by event), coalesced (a few events per read, or several tokens per event), buffered (held and let go in bursts)."),
    );
    r.describe_histogram(
        KeyName::from_const_str(GATEWAY_RELAY),
        Some(Unit::Seconds),
        text("Each token's relay through a tapped gateway: its arrival outside the gateway minus its arrival inside, by route (the outer one)."),
    );
    r.describe_counter(
        KeyName::from_const_str(DECODE_STOPPED),
        None,
        text("Compressed responses whose measurement stopped, by route and reason: bound (decoded past its bound: a bomb), corrupt, unsupported (a coding tokentap does not decode). The client got every byte."),
    );
    r.describe_histogram(
        KeyName::from_const_str(STAMP_LAG),
        Some(Unit::Seconds),
        text("Per stream, by route: the kernel's arrival of the read that held the first token to tokentap's read of it (the host's scheduling delay)."),
    );
    r.describe_counter(
        KeyName::from_const_str(CLOCK_FALLBACKS),
        None,
        text("Requests stamped with tokentap's own clock for want of the kernel's receive stamps while they are on (the default on Linux; record clock: process), by route."),
    );
}

/// A route's per-request stream metrics, registered at their first use on it (a route that
/// never streamed shows no delivery series) and then kept, so a request's end registers
/// nothing (registering looks the key up in the recorder's registry: labels built, hashed and
/// compared, for every request).
#[derive(Default)]
pub(super) struct StreamHandles {
    /// `tokentap_stream_delivery_total`, one per `Verdict::ALL`.
    delivery: OnceLock<Vec<(Verdict, metrics::Counter)>>,
    stamp_lag: OnceLock<metrics::Histogram>,
    fallbacks: OnceLock<metrics::Counter>,
}

impl Metrics {
    /// A finished request's delivery verdict and, when its body could not be decoded, why;
    /// `h` holds its route's handles.
    pub(super) fn observe_stream(&self, rec: &RequestRecord, h: &StreamHandles) {
        let route = || Label::new("route", rec.route.clone());
        if let Some(d) = &rec.delivery {
            // Every verdict exists once a route streamed (at 0): a share of buffered streams
            // is then 0, not "no data", on dashboards and in the alert's ratio.
            let all = h.delivery.get_or_init(|| {
                Verdict::ALL
                    .iter()
                    .map(|&v| {
                        let l = vec![route(), Label::new("verdict", v.as_str())];
                        let c = self
                            .recorder
                            .register_counter(&Self::key(STREAM_DELIVERY, l), &META);
                        (v, c)
                    })
                    .collect()
            });
            for (v, c) in all {
                c.increment(u64::from(*v == d.verdict));
            }
        }
        if let Some(why) = &rec.decode_error {
            let reason = if why.contains("over the bound") {
                "bound"
            } else if why.contains("not decoded") {
                "unsupported"
            } else {
                "corrupt"
            };
            let l = vec![route(), Label::new("reason", reason)];
            self.recorder
                .register_counter(&Self::key(DECODE_STOPPED, l), &META)
                .increment(1);
        }
        if let Some(ms) = rec.stamp_lag_ms {
            h.stamp_lag
                .get_or_init(|| {
                    self.recorder
                        .register_histogram(&Self::key(STAMP_LAG, vec![route()]), &META)
                })
                .record(ms / 1000.0);
        }
        // A fallback: stamps were asked for and this record's were not all the kernel's.
        if rec.clock == Clock::Process && crate::rxstamp::enabled() {
            h.fallbacks
                .get_or_init(|| {
                    self.recorder
                        .register_counter(&Self::key(CLOCK_FALLBACKS, vec![route()]), &META)
                })
                .increment(1);
        }
    }

    /// Every token's relay through a gateway (ms), on the outer route.
    pub fn observe_relay(&self, route: &str, ms: &[f64]) {
        let h = self.recorder.register_histogram(
            &Self::key(GATEWAY_RELAY, vec![Label::new("route", route.to_owned())]),
            &META,
        );
        for v in ms {
            h.record(v / 1000.0);
        }
    }
}
