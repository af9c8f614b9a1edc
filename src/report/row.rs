//! What the report reads of a record: a few numbers and short strings, borrowed from the line
//! where they need no unescaping. Every other field of the line is skipped unparsed. The same
//! defaults as [`RequestRecord`] (the schema is additive): only `outcome` and `e2e_ms` are
//! required, as there.

use std::borrow::Cow;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;

use crate::meter::delivery::Verdict;
use crate::meter::{
    GatewayTap, JoinBy, Outcome, RelayVerdict, RequestRecord, TapSide, TtftSplit, Unjoined,
};
use crate::openai::Api;

pub use super::model::Class;

/// A JSON string, borrowed from the line unless it had escapes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

impl Text<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ExpRow<'a> {
    #[serde(borrow)]
    pub arm: Text<'a>,
    #[serde(default, borrow)]
    pub pair_id: Option<Text<'a>>,
}

/// A gateway tap's part of a record; of the peer only whether there is one.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct TapRow {
    pub side: TapSide,
    #[serde(default, deserialize_with = "present")]
    pub peer: bool,
    #[serde(default)]
    pub join: Option<JoinBy>,
    #[serde(default)]
    pub unjoined: Option<Unjoined>,
    #[serde(default)]
    pub admission_ms: Option<f64>,
    #[serde(default)]
    pub relay_ms: Option<f64>,
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    #[serde(default)]
    pub relay_max_ms: Option<f64>,
    #[serde(default)]
    pub relay_verdict: Option<RelayVerdict>,
}

/// How a stream arrived: its verdict and largest burst.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct DeliveryRow {
    pub verdict: Verdict,
    #[serde(default)]
    pub max_events_per_read: u64,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<serde::de::IgnoredAny>::deserialize(d)?.is_some())
}

/// The fields of a record that some figure of the report uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Row<'a> {
    #[serde(default, borrow)]
    pub ts: Text<'a>,
    #[serde(default, borrow)]
    pub id: Text<'a>,
    /// The tap across pods: the join id received (inner side), whether one was sent (outer
    /// side), and the host's boot id beside them.
    #[serde(default, borrow)]
    pub join_id: Option<Text<'a>>,
    #[serde(default)]
    pub join_sent: bool,
    #[serde(default, borrow)]
    pub boot_id: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub route: Text<'a>,
    #[serde(default, borrow)]
    pub method: Text<'a>,
    #[serde(default, borrow)]
    pub endpoint: Text<'a>,
    /// The status the client received (0: none sent, or an old log without it).
    #[serde(default)]
    pub status: u16,
    #[serde(default)]
    pub stream: bool,
    #[serde(default, borrow)]
    pub experiment: Option<ExpRow<'a>>,
    /// The shape the record names; absent in logs written before the field existed (or by
    /// another tool): [`Row::api`] then classes it by its method and endpoint.
    #[serde(default)]
    pub api: Option<Api>,
    #[serde(default, borrow)]
    pub key_id: Option<Text<'a>>,
    pub outcome: Outcome,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    #[serde(default)]
    pub ttfo_ms: Option<f64>,
    #[serde(default)]
    pub tpot_ms: Option<f64>,
    pub e2e_ms: f64,
    #[serde(default)]
    pub upstream_headers_ms: Option<f64>,
    #[serde(default)]
    pub in_flight: u64,
    #[serde(default, borrow)]
    pub bucket: Option<Text<'a>>,
    #[serde(default)]
    pub gateway_overhead_ms: Option<f64>,
    #[serde(default)]
    pub concurrency: Option<u64>,
    #[serde(default)]
    pub request_rate: Option<f64>,
    #[serde(default)]
    pub client_queue_ms: Option<f64>,
    #[serde(default)]
    pub client_lag_ms: Option<f64>,
    #[serde(default)]
    pub turn: Option<u64>,
    #[serde(default)]
    pub run: Option<u64>,
    #[serde(default)]
    pub scheduled_ms: Option<f64>,
    #[serde(default)]
    pub ttft_split: Option<TtftSplit>,
    #[serde(default)]
    pub gateway_tap: Option<TapRow>,
    #[serde(default)]
    pub delivery: Option<DeliveryRow>,
    #[serde(default)]
    pub itl_p50_ms: Option<f64>,
    #[serde(default)]
    pub itl_p99_ms: Option<f64>,
    #[serde(default)]
    pub itl_max_ms: Option<f64>,
    #[serde(default, borrow)]
    pub finish_reason: Option<Text<'a>>,
}

impl<'a> Row<'a> {
    /// The same view of a record already in memory (bench and the demo hand theirs over).
    pub fn of(r: &'a RequestRecord) -> Row<'a> {
        let t = |s: &'a str| Text(Cow::Borrowed(s));
        Row {
            ts: t(&r.ts),
            id: t(&r.id),
            join_id: r.join_id.as_deref().map(t),
            join_sent: r.join_sent,
            boot_id: r.boot_id.as_deref().map(t),
            route: t(&r.route),
            method: t(&r.method),
            endpoint: t(&r.endpoint),
            status: r.status,
            stream: r.stream,
            experiment: r.experiment.as_ref().map(|e| ExpRow {
                arm: t(&e.arm),
                pair_id: e.pair_id.as_deref().map(t),
            }),
            api: Some(r.api),
            key_id: r.key_id.as_deref().map(t),
            outcome: r.outcome,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cached_tokens: r.cached_tokens,
            reasoning_tokens: r.reasoning_tokens,
            ttft_ms: r.ttft_ms,
            ttfo_ms: r.ttfo_ms,
            tpot_ms: r.tpot_ms,
            e2e_ms: r.e2e_ms,
            upstream_headers_ms: r.upstream_headers_ms,
            in_flight: r.in_flight,
            bucket: r.bucket.as_deref().map(t),
            gateway_overhead_ms: r.gateway_overhead_ms,
            concurrency: r.concurrency,
            request_rate: r.request_rate,
            client_queue_ms: r.client_queue_ms,
            client_lag_ms: r.client_lag_ms,
            turn: r.turn.map(u64::from),
            run: r.run.map(u64::from),
            scheduled_ms: r.scheduled_ms,
            ttft_split: r.ttft_split,
            gateway_tap: r.gateway_tap.as_ref().map(tap_row),
            delivery: r.delivery.as_ref().map(|d| DeliveryRow {
                verdict: d.verdict,
                max_events_per_read: d.max_events_per_read,
            }),
            itl_p50_ms: r.itl_p50_ms,
            itl_p99_ms: r.itl_p99_ms,
            itl_max_ms: r.itl_max_ms,
            finish_reason: r.finish_reason.as_deref().map(t),
        }
    }

    pub fn arm(&self) -> Option<&str> {
        self.experiment.as_ref().map(|e| e.arm.as_str())
    }

    pub fn bucket(&self) -> &str {
        self.bucket.as_ref().map_or("unknown", |b| b.as_str())
    }

    pub fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// A service failure or throttling, of any shape: every outcome but `ok` and
    /// `client_cancelled`, except a client's 4xx (other than 429).
    pub fn is_error(&self) -> bool {
        let client_error = self.status != 429 && (400..=499).contains(&self.status);
        !client_error && !matches!(self.outcome, Outcome::Ok | Outcome::ClientCancelled)
    }

    /// The record's API shape; without `api`, the one its method and endpoint name, as the
    /// proxy would have classed it (the path names the shape; a generating path asked with a
    /// method other than POST generates nothing).
    pub fn api(&self) -> Api {
        match self.api {
            Some(a) => a,
            None => {
                let a = Api::from_path(self.endpoint.as_str());
                let method = self.method.as_str();
                if a.generates() && !method.is_empty() && !method.eq_ignore_ascii_case("POST") {
                    Api::Other
                } else {
                    a
                }
            }
        }
    }

    /// What the record is to the report: see [`Class`].
    pub fn class(&self) -> Class {
        if !self.api().generates() {
            return Class::Other;
        }
        match self.status {
            429 => Class::Throttled,
            400..=499 => Class::ClientError,
            _ => match self.outcome {
                Outcome::Ok => Class::Served,
                Outcome::ClientCancelled => Class::Cancelled,
                _ => Class::Failed,
            },
        }
    }

    /// Per-stream output tok/s, 1000 ÷ TPOT.
    pub fn tok_s(&self) -> Option<f64> {
        self.tpot_ms.filter(|t| *t > 0.0).map(|t| 1000.0 / t)
    }

    pub fn tap_side(&self) -> Option<TapSide> {
        self.gateway_tap.map(|g| g.side)
    }

    /// What a client sent: every record but the inner side of a gateway tap.
    pub fn client_facing(&self) -> bool {
        self.tap_side() != Some(TapSide::Inner)
    }

    /// Concurrency label: bench's level, or the in-flight count bucketed 1, 2, 3–4, 5–8, …
    pub fn level(&self) -> (u64, String) {
        level_of(self.concurrency, self.in_flight)
    }
}

pub fn level_of(concurrency: Option<u64>, in_flight: u64) -> (u64, String) {
    let level = level(concurrency, in_flight);
    if concurrency.is_some() || level <= 2 {
        return (level, level.to_string());
    }
    (level, format!("{}-{}", level / 2 + 1, level))
}

/// The level alone (its label is [`level_of`]'s): no allocation, once per record.
pub fn level(concurrency: Option<u64>, in_flight: u64) -> u64 {
    match concurrency {
        Some(c) => c,
        None => in_flight.max(1).next_power_of_two(),
    }
}

fn tap_row(g: &GatewayTap) -> TapRow {
    TapRow {
        side: g.side,
        peer: g.peer.is_some(),
        join: g.join,
        unjoined: g.unjoined,
        admission_ms: g.admission_ms,
        relay_ms: g.relay_ms,
        ttft_ms: g.ttft_ms,
        relay_max_ms: g.relay_max_ms,
        relay_verdict: g.relay_verdict,
    }
}
