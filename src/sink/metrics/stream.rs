//! The metrics of streaming integrity: how each stream arrived (`streamed`, `coalesced`,
//! `buffered`), every token's relay through a tapped gateway, and compressed bodies whose
//! measurement stopped.

use metrics::{KeyName, Label, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::{Metrics, META};
use crate::meter::delivery::Verdict;
use crate::meter::RequestRecord;

pub const STREAM_DELIVERY: &str = "tokentap_stream_delivery_total";
pub const GATEWAY_RELAY: &str = "tokentap_gateway_token_relay_seconds";
pub const DECODE_STOPPED: &str = "tokentap_decode_stopped_total";

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
}

impl Metrics {
    /// A finished request's delivery verdict and, when its body could not be decoded, why.
    pub(super) fn observe_stream(&self, rec: &RequestRecord) {
        let route = || Label::new("route", rec.route.clone());
        if let Some(d) = &rec.delivery {
            // Every verdict exists once a route streamed (at 0): a share of buffered streams
            // is then 0, not "no data", on dashboards and in the alert's ratio.
            for v in Verdict::ALL {
                let l = vec![route(), Label::new("verdict", v.as_str())];
                self.recorder
                    .register_counter(&Self::key(STREAM_DELIVERY, l), &META)
                    .increment(u64::from(v == d.verdict));
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
