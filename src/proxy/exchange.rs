//! One request from admission to its record. An `Exchange` is made once, when the request is
//! routed, moved by value through the pipeline, and ended exactly once:
//! - [`Exchange::reject`]: tokentap answers itself (the record is made there);
//! - [`Exchange::respond`]: the upstream's body, metered, becomes the client's; the record is
//!   made when that body ends;
//! - dropped unanswered: the client went away (hyper dropped the request's future).
//!
//! NB: there is no other way to dispose of one, so a request cannot end without its record. The
//! key it carries is fingerprinted when the record is made, off the request's path, then dropped.
//!
//! What its record will say is set, and read back, only through methods that name it
//! ([`Exchange::routed`], [`Exchange::request_says`], [`Exchange::join_sent`], …): its fields
//! are private, and no caller holds its `Facts` or its `State`.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use tokio::time::Instant;

use super::client::UpstreamBody;
use super::ending::{verdict, Ending};
use super::error::{BodyError, ProxyError};
use super::routes::Route;
use super::state::{Slot, State};
use super::timeout::TimeoutBody;
use crate::keys::Secret;
use crate::meter::{
    BodyEnd, Experiment, Facts, GatewayTap, JoinBy, Meter, MeteredBody, Observer, RelayVerdict,
    RequestRecord, TapSide, Unjoined, Verdict,
};
use crate::openai::RequestInfo;
use crate::tap::{Joiner, Link};

/// A request's part in a gateway tap, once its body was read.
enum TapPart {
    /// Outer side, waiting in (or joined through) its gateway route's joiner.
    Outer(Arc<Joiner>, Arc<Link>),
    /// Inner side, joined.
    Inner(Arc<Link>, JoinBy),
    /// Either side, left unjoined.
    Unjoined(TapSide, Unjoined),
}

/// The metered upstream body, inside the deadlines.
pub type Metered = MeteredBody<UpstreamBody, Exchange>;

/// Run once the record is made, with its verdict (the paired experiment's copy).
pub type After = Box<dyn FnOnce(&Verdict) + Send>;

struct Inner {
    state: Arc<State>,
    route: Arc<Route>,
    facts: Facts,
    meter: Meter,
    /// The client's key, when its `key_id` is made with the record. Never written anywhere.
    key: Option<Secret<Vec<u8>>>,
    /// The status of the upstream's response head, once it came.
    head: Option<u16>,
    /// Its place under the admission (or shadow) cap, held for its life.
    slot: Option<Slot>,
    after: Option<After>,
    tap: Option<TapPart>,
    /// The request id tokentap made for it, returned in the client's response headers (boxed:
    /// it is let go with the response head, and inline it would stay in every stream's
    /// exchange).
    made_id: Option<Box<super::ids::Made>>,
    ended: bool,
}

/// A request in progress (see the module docs).
pub struct Exchange(Box<Inner>);

impl Exchange {
    /// A request the head of which arrived at `t0`, admitted on `route` (counted in flight).
    pub fn begin(
        state: Arc<State>,
        route: Arc<Route>,
        t0: Instant,
        mut facts: Facts,
        key: Option<Secret<Vec<u8>>>,
    ) -> Exchange {
        facts.in_flight = route.admit();
        Exchange(Box::new(Inner {
            state,
            route,
            facts,
            meter: Meter::new(t0),
            key,
            head: None,
            slot: None,
            after: None,
            tap: None,
            made_id: None,
            ended: false,
        }))
    }

    /// The route it is on.
    pub fn route(&self) -> &Arc<Route> {
        &self.0.route
    }

    pub fn t0(&self) -> Instant {
        self.0.meter.timeline.t0
    }

    /// The request body has been read whole.
    pub fn body_read(&mut self, bytes: usize) {
        self.0.meter.timeline.body_read = Some(crate::rxstamp::now());
        self.0.facts.request_bytes = bytes as u64;
    }

    /// The request was written upstream whole.
    pub fn sent(&mut self, at: Instant) {
        self.0.meter.timeline.sent = Some(at);
    }

    /// This request's id (its record's `id`).
    pub fn id(&self) -> u64 {
        self.0.facts.stamp.id
    }

    /// What routing learned of the client before it judged it: the key's id, when the arm
    /// depended on it (else it is made with the record), and the `x-tokentap-join` id, when the
    /// route trusts its sender.
    pub fn routed(&mut self, key_id: Option<String>, join_id: Option<u64>) {
        let f = &mut self.0.facts;
        f.key_id = key_id;
        f.join_id = join_id;
    }

    /// The experiment arm (and pair) it was routed to, if any.
    pub fn in_experiment(&mut self, experiment: Option<Experiment>) {
        self.0.facts.experiment = experiment.map(Box::new);
    }

    /// What the request body says (model, stream, max_tokens).
    pub fn request_says(&mut self, info: RequestInfo) {
        let f = &mut self.0.facts;
        f.stream = info.stream;
        f.max_tokens = info.max_tokens;
        f.model = info.model;
    }

    /// The route's `model_map` sent the request upstream for `model`.
    pub fn model_mapped(&mut self, model: String) {
        self.0.facts.upstream_model = Some(model);
    }

    /// The route sent this request's id upstream in `x-tokentap-join`.
    pub fn join_sent(&mut self) {
        self.0.facts.join_sent = true;
    }

    /// The `x-tokentap-join` id received from a sender the route trusts.
    pub fn join_id(&self) -> Option<u64> {
        self.0.facts.join_id
    }

    /// tokentap's own `traceparent`, when the upstream is to continue its span (opt-in:
    /// `otlp.forward_traceparent`) and the request's trace is sampled.
    pub fn traceparent(&self) -> Option<String> {
        let i = &*self.0;
        let forward = i
            .state
            .config
            .otlp
            .as_ref()
            .is_some_and(|o| o.forward_traceparent);
        if !forward {
            return None;
        }
        i.facts
            .trace
            .as_ref()
            .filter(|t| t.sampled())
            .map(|t| t.traceparent())
    }

    /// `timeouts.connect_ms` of its config generation (what the client's connect waits).
    pub fn connect_timeout(&self) -> Duration {
        self.0.state.config.timeouts.connect
    }

    /// Outer side of a gateway tap: wait in `joiner` for the inner side.
    pub fn tap_outer(&mut self, joiner: &Arc<Joiner>, fp: Option<u64>) {
        let i = &mut *self.0;
        i.tap = Some(
            match joiner.open(i.facts.stamp.id, i.meter.timeline.t0, fp) {
                Ok(link) => {
                    i.meter.token_times = Some(Default::default());
                    TapPart::Outer(joiner.clone(), link)
                }
                Err(why) => TapPart::Unjoined(TapSide::Outer, why),
            },
        );
    }

    /// Inner side of a gateway tap: join the outer side, by the header's `token` or by `fp`.
    pub fn tap_inner(&mut self, joiner: &Joiner, token: Option<u64>, fp: Option<u64>) {
        let i = &mut *self.0;
        let (id, t0) = (i.facts.stamp.id, i.meter.timeline.t0);
        i.tap = Some(match joiner.join(id, t0, token, fp) {
            Ok(link) => {
                i.meter.first_token_signal = Some(link.inner_first_token.clone());
                i.meter.token_times = Some(link.inner_tokens.clone());
                let by = link.joined().map_or(JoinBy::Header, |j| j.by);
                TapPart::Inner(link, by)
            }
            Err(why) => TapPart::Unjoined(TapSide::Inner, why),
        });
    }

    /// Hold a place under a cap until the request ends.
    pub fn hold(&mut self, slot: Slot) {
        self.0.slot = Some(slot);
    }

    /// Return this id (made by tokentap, sent upstream) in the client's response headers.
    pub fn return_id(&mut self, made: super::ids::Made) {
        self.0.made_id = Some(Box::new(made));
    }

    /// Put the id tokentap made, if any, into the client's response headers.
    fn put_made_id(&mut self, headers: &mut http::HeaderMap) {
        if let Some((name, value)) = self.0.made_id.take().map(|m| *m) {
            headers.insert(name, value);
        }
    }

    /// Run `f` with the verdict once the record is made.
    pub fn after(&mut self, f: After) {
        self.0.after = Some(f);
    }

    /// tokentap answers itself: the client gets `err` as JSON and the record is made now.
    pub fn reject(mut self, err: ProxyError) -> Response<ProxyBody> {
        let mut resp = err.to_response();
        self.put_made_id(resp.headers_mut());
        self.finish(Ending::Local(&err));
        resp.map(|body| ProxyBody::Local { body })
    }

    /// The upstream answered: its body, under the route's idle and total deadlines and
    /// metered, becomes the client's. The record is made when that body ends.
    pub fn respond(
        mut self,
        resp: Response<UpstreamBody>,
        deadline: Option<Instant>,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = resp.into_parts();
        let cfg = &self.0.state.config;
        let (idle, limits) = (cfg.timeouts.idle, cfg.limits);
        let upstream_id = super::ids::read(&parts.headers, &cfg.request_id.headers);
        self.put_made_id(&mut parts.headers);
        let inner = &mut *self.0;
        inner.facts.upstream_request_id = upstream_id;
        // The read that completed the head, by the kernel's stamp when it gave one.
        let headers_at = body.arrival().map_or_else(crate::rxstamp::now, |a| a.at);
        inner.meter.timeline.headers = Some(headers_at);
        inner.head = Some(parts.status.as_u16());
        inner.facts.gateway_overhead_ms = parts
            .headers
            .get("x-litellm-overhead-duration-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite());
        inner.meter.path_api = crate::openai::Api::from_path(&inner.facts.endpoint);
        inner.meter.expect_body(
            parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(http::HeaderValue::as_bytes),
            limits.max_sse_event_bytes,
            limits.max_response_json_bytes,
        );
        inner.meter.expect_encoding(
            parts
                .headers
                .get(http::header::CONTENT_ENCODING)
                .map(http::HeaderValue::as_bytes),
        );
        crate::headers::response_headers(&mut parts.headers);
        let metered = MeteredBody::new(body, self)
            .on_stream_complete(UpstreamBody::pool_after_drop)
            .stamped_by(UpstreamBody::arrival);
        let body = TimeoutBody::new(metered, idle, deadline);
        Response::from_parts(parts, ProxyBody::Metered { body })
    }

    /// The one ending: verdict, record, metrics and stats, then out of the in-flight count.
    fn finish(&mut self, ending: Ending<'_>) {
        let i = &mut *self.0;
        if std::mem::replace(&mut i.ended, true) {
            return;
        }
        let cut = i.state.shared.shutdown_cut.load(Ordering::Relaxed);
        let v = verdict(&ending, i.head, &mut i.meter, cut);
        let stamp = i.facts.stamp;
        let mut facts = std::mem::replace(&mut i.facts, Facts::new(stamp, "", ""));
        if let Some(key) = i.key.take() {
            facts.key_id = facts
                .key_id
                .or_else(|| Some(i.state.keys.id_of(key.expose())));
        }
        let after = i.after.take();
        let trace = facts.trace.take();
        let mut rec = RequestRecord::assemble(
            facts,
            &mut i.meter,
            v.clone(),
            crate::rxstamp::now(),
            &i.route.name,
            &i.state.config.buckets,
        );
        // The meter has caught up (assemble settles it): its first token is final.
        let mut relay = Vec::new();
        rec.gateway_tap = i.tap.take().map(|t| tap_record(t, &i.meter, &mut relay));
        if !relay.is_empty() {
            i.state.sink().relay(&rec.route, &relay);
        }
        i.route.stats.observe(&rec, i.meter.itl_samples());
        if let Some(t) = trace {
            rec.trace_id = Some(crate::meter::trace::hex(&t.trace_id));
            rec.span_id = Some(crate::meter::trace::hex(&t.span_id));
            let upstream = i.route.target.as_ref().map(|t| t.config.upstream.clone());
            i.state.sink().span(&rec, *t, upstream, stamp.at);
        }
        i.state.sink().write(rec, i.meter.itl_samples());
        // Last: a request leaves the in-flight count only once its record is queued (the
        // shutdown waits on this count before it closes the log).
        i.route.release();
        drop(i.slot.take());
        if let Some(after) = after {
            after(&v);
        }
    }
}

/// The record's `gateway_tap`; an outer side leaves the joiner here, with each token's relay
/// through the gateway in `relay` (ms).
fn tap_record(t: TapPart, meter: &Meter, relay: &mut Vec<f64>) -> GatewayTap {
    let mut g = GatewayTap {
        side: TapSide::Outer,
        peer: None,
        join: None,
        unjoined: None,
        admission_ms: None,
        relay_ms: None,
        ttft_ms: None,
        relay_p50_ms: None,
        relay_max_ms: None,
        held_tokens: None,
        relay_verdict: None,
    };
    match t {
        TapPart::Unjoined(side, why) => {
            g.side = side;
            g.unjoined = Some(why);
        }
        TapPart::Inner(link, by) => {
            g.side = TapSide::Inner;
            if let Ok(mut t) = link.inner_tokens.lock() {
                t.done = true;
            }
            g.peer = Some(crate::tap::token(link.outer_id));
            g.join = Some(by);
        }
        TapPart::Outer(joiner, link) => {
            g.unjoined = joiner.close(&link);
            if let Some(j) = link.joined() {
                let signed = |a: Instant, b: Instant| match b.checked_duration_since(a) {
                    Some(d) => crate::meter::duration_ms(d),
                    None => -crate::meter::duration_ms(a.saturating_duration_since(b)),
                };
                g.peer = Some(crate::tap::token(j.inner_id));
                g.join = Some(j.by);
                let admission = signed(link.outer_t0, j.inner_t0);
                g.admission_ms = Some(admission);
                let inner_ft = link.inner_first_token.get().copied();
                if let (Some(outer), Some(inner)) = (meter.timeline.first_token, inner_ft) {
                    let relay = signed(inner, outer);
                    // The outer side's first token cannot come before the inner side's.
                    if relay >= 0.0 {
                        g.relay_ms = Some(relay);
                        g.ttft_ms = Some(admission + relay);
                    }
                }
                token_relay(&mut g, &link, meter, relay);
            }
        }
    }
    g
}

/// Every token's relay through the gateway, when the two sides align (crate::tap::relay).
fn token_relay(g: &mut GatewayTap, link: &crate::tap::Link, meter: &Meter, out: &mut Vec<f64>) {
    let (Some(Ok(outer)), Ok(inner)) = (
        meter.token_times.as_ref().map(|t| t.lock()),
        link.inner_tokens.lock(),
    ) else {
        return;
    };
    match crate::tap::relay::relay(&inner, &outer.times) {
        Ok(None) => {}
        Ok(Some(r)) => {
            g.relay_p50_ms = Some(r.p50_ms);
            g.relay_max_ms = Some(r.max_ms);
            g.held_tokens = Some(r.held_tokens);
            g.relay_verdict = Some(if r.held_tokens >= crate::tap::relay::HELD_MIN_TOKENS {
                RelayVerdict::Held
            } else {
                RelayVerdict::Relayed
            });
            *out = r.ms;
        }
        Err(_) => g.relay_verdict = Some(RelayVerdict::Unaligned),
    }
}

impl Observer for Exchange {
    fn meter(&mut self) -> &mut Meter {
        &mut self.0.meter
    }

    fn end(mut self, end: BodyEnd<'_>) {
        self.finish(Ending::Body(end));
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.finish(Ending::Abandoned);
    }
}

pin_project_lite::pin_project! {
    /// The body of every response the proxy returns.
    #[project = ProxyBodyProj]
    pub enum ProxyBody {
        Metered { #[pin] body: TimeoutBody<Metered> },
        Local { #[pin] body: Full<Bytes> },
    }
}

#[warn(clippy::missing_trait_methods)]
impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.project() {
            ProxyBodyProj::Metered { body } => body.poll_frame(cx),
            ProxyBodyProj::Local { body } => match body.poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => Poll::Ready(Some(Ok(f))),
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Metered { body } => body.is_end_stream(),
            ProxyBody::Local { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Metered { body } => body.size_hint(),
            ProxyBody::Local { body } => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    /// A request's exchange is held for its whole stream (docs/overhead.md, "Memory per
    /// stream"): what few requests have (the id tokentap made, until the response head; an
    /// experiment; a trace) is boxed, not inline in every one (it was 1,480 bytes).
    #[test]
    fn an_exchange_holds_little() {
        let size = std::mem::size_of::<super::Inner>();
        assert!(size <= 1320, "an exchange is {size} bytes");
    }
}
