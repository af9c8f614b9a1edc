//! The proxy: a tower stack per request (`stack`: route header → routing and arm choice →
//! admission → deadlines → forward), one [`Exchange`] per request from routing to its record,
//! the routes as values (`routes`), and the pooled upstream client (`client`, `h1`).
//!
//! Never mutates forwarded bytes, except the fields a route's config rewrites. The response body
//! is owned by the client's response: when the client goes away the upstream request is dropped
//! at once.
//!
//! - `ending`: the one verdict (status, outcome, error) of every ending;
//! - `ids`: the client's request id (read, or made) and the upstream's;
//! - `timeout`: the response body's idle and total deadlines;
//! - `live`: the config generation new requests take, swapped by a reload; requests in flight
//!   keep the [`State`] they began on.

pub mod client;
mod ending;
pub mod error;
mod exchange;
mod forward;
pub mod h1;
mod ids;
pub mod live;
pub mod routes;
pub mod stack;
mod timeout;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;

use crate::config::Config;
use crate::keys::KeyIdentity;
use crate::sink::Sink;
pub use error::ProxyError;
pub use exchange::Exchange;
pub use live::Live;
pub use routes::{Route, Routes};
pub use stack::Proxy;
pub use timeout::BodyError;

/// What outlives a config generation: the sink, the caps and counters that span reloads, the
/// shutdown flag.
pub struct Shared {
    pub sink: Arc<Sink>,
    /// Requests admitted under `limits.max_concurrent`, over every generation.
    pub admitted: Arc<AtomicUsize>,
    /// Shadow copies in flight (experiment mirror/paired), over every generation.
    pub shadows: Arc<AtomicUsize>,
    /// Experiment copies skipped because `max_shadow_in_flight` were already running.
    pub shadow_skipped: AtomicU64,
    /// Set when the shutdown grace period is over: streams dropped after this were cut by us.
    pub shutdown_cut: AtomicBool,
}

impl Shared {
    pub fn new(sink: Arc<Sink>) -> Shared {
        Shared {
            sink,
            admitted: Arc::default(),
            shadows: Arc::default(),
            shadow_skipped: AtomicU64::new(0),
            shutdown_cut: AtomicBool::new(false),
        }
    }
}

/// A place under a cap shared by every generation (so a reload that lowers the cap counts the
/// requests still running on the old config); given back when dropped.
pub struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A place, if fewer than `max` are taken.
    pub fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        if count.fetch_add(1, Ordering::AcqRel) >= max {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(count.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One config generation: everything its requests share. A reload makes a new one; requests
/// keep theirs until their record is made.
pub struct State {
    pub config: Arc<Config>,
    pub shared: Arc<Shared>,
    pub routes: Routes,
    /// Key fingerprints and aliases.
    pub keys: KeyIdentity,
    /// Arm choice and pair ids (seeded).
    pub rng: Mutex<fastrand::Rng>,
}

impl State {
    /// A generation of `config`; a reload passes the generation it replaces, whose same-named
    /// routes hand over their counters, live stats and gateway joiners.
    pub fn new(
        config: Arc<Config>,
        shared: Arc<Shared>,
        previous: Option<&State>,
    ) -> Result<State, client::ClientError> {
        Ok(State {
            routes: Routes::new(
                &config.routes,
                config.timeouts.connect,
                previous.map(|p| &p.routes),
            )?,
            keys: KeyIdentity::new(config.key_aliases.clone()),
            rng: Mutex::new(fastrand::Rng::with_seed(config.experiment.seed)),
            config,
            shared,
        })
    }

    pub fn sink(&self) -> &Sink {
        &self.shared.sink
    }
}

pin_project_lite::pin_project! {
    /// The body of every response the proxy returns.
    #[project = ProxyBodyProj]
    pub enum ProxyBody {
        Metered { #[pin] body: timeout::TimeoutBody },
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
