//! One request from admission to its record. An `Exchange` is made once, when the request is
//! routed, moved by value through the pipeline, and ended exactly once:
//! - [`Exchange::reject`]: tokentap answers itself (the record is made there);
//! - [`Exchange::respond`]: the upstream's body, metered, becomes the client's; the record is
//!   made when that body ends;
//! - dropped unanswered: the client went away (hyper dropped the request's future).
//!
//! NB: there is no other way to dispose of one, so a request cannot end without its record. The
//! key it carries is fingerprinted when the record is made, off the request's path, then dropped.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::Response;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::client::UpstreamBody;
use super::ending::{verdict, Ending};
use super::routes::Route;
use super::timeout::TimeoutBody;
use super::{ProxyBody, ProxyError, State};
use crate::keys::Secret;
use crate::meter::{BodyEnd, Facts, Meter, MeteredBody, Observer, RequestRecord, Stamp, Verdict};

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
    /// Held for the request's life; released when it ends.
    permit: Option<OwnedSemaphorePermit>,
    after: Option<After>,
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
            permit: None,
            after: None,
            ended: false,
        }))
    }

    /// A new request's facts: when it came, its method and path.
    pub fn facts_for(stamp: Stamp, method: &http::Method, path: &str) -> Facts {
        Facts::new(stamp, method.as_str(), path)
    }

    pub fn facts(&mut self) -> &mut Facts {
        &mut self.0.facts
    }

    pub fn route(&self) -> &Arc<Route> {
        &self.0.route
    }

    pub fn state(&self) -> &Arc<State> {
        &self.0.state
    }

    pub fn t0(&self) -> Instant {
        self.0.meter.timeline.t0
    }

    /// The request body has been read whole.
    pub fn body_read(&mut self, bytes: usize) {
        self.0.meter.timeline.body_read = Some(Instant::now());
        self.0.facts.request_bytes = bytes as u64;
    }

    /// Hold an admission permit until the request ends.
    pub fn hold(&mut self, permit: OwnedSemaphorePermit) {
        self.0.permit = Some(permit);
    }

    /// Run `f` with the verdict once the record is made.
    pub fn after(&mut self, f: After) {
        self.0.after = Some(f);
    }

    /// tokentap answers itself: the client gets `err` as JSON and the record is made now.
    pub fn reject(mut self, err: ProxyError) -> Response<ProxyBody> {
        let resp = err.to_response();
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
        let inner = &mut *self.0;
        inner.meter.timeline.headers = Some(Instant::now());
        inner.head = Some(parts.status.as_u16());
        inner.facts.gateway_overhead_ms = parts
            .headers
            .get("x-litellm-overhead-duration-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite());
        inner.meter.expect_body(
            parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(http::HeaderValue::as_bytes),
            limits.max_sse_event_bytes,
            limits.max_response_json_bytes,
        );
        crate::headers::response_headers(&mut parts.headers);
        let metered =
            MeteredBody::new(body, self).on_stream_complete(UpstreamBody::pool_after_drop);
        let body = TimeoutBody::new(metered, idle, deadline);
        Response::from_parts(parts, ProxyBody::Metered { body })
    }

    /// The one ending: verdict, record, metrics and stats, then out of the in-flight count.
    fn finish(&mut self, ending: Ending<'_>) {
        let i = &mut *self.0;
        if std::mem::replace(&mut i.ended, true) {
            return;
        }
        let cut = i.state.shutdown_cut.load(Ordering::Relaxed);
        let v = verdict(&ending, i.head, &mut i.meter, cut);
        let stamp = i.facts.stamp;
        let mut facts = std::mem::replace(&mut i.facts, Facts::new(stamp, "", ""));
        if let Some(key) = i.key.take() {
            facts.key_id = facts
                .key_id
                .or_else(|| Some(i.state.keys.id_of(key.expose())));
        }
        let after = i.after.take();
        let rec = RequestRecord::assemble(
            facts,
            &mut i.meter,
            v.clone(),
            Instant::now(),
            &i.route.name,
            &i.state.config.buckets,
        );
        i.route.stats.observe(&rec, i.meter.itl_samples());
        i.state.sink.write(rec, i.meter.itl_samples());
        // Last: a request leaves the in-flight count only once its record is queued (the
        // shutdown waits on this count before it closes the log).
        i.route.release();
        drop(i.permit.take());
        if let Some(after) = after {
            after(&v);
        }
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
