//! The proxy: a tower stack per request (`stack`: route header → routing and arm choice →
//! admission → deadlines → forward), one [`Exchange`] per request from routing to its record,
//! the routes as values (`routes`), and the pooled upstream client (`client`, `h1`).
//!
//! Never mutates forwarded bytes, except the fields a route's config rewrites. The response body
//! is owned by the client's response: when the client goes away the upstream request is dropped
//! at once.
//!
//! - `ending`: the one verdict (status, outcome, error) of every ending;
//! - `timeout`: the response body's idle and total deadlines.

pub mod client;
mod ending;
pub mod error;
mod exchange;
mod forward;
pub mod h1;
pub mod routes;
pub mod stack;
mod timeout;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::keys::KeyIdentity;
use crate::sink::Sink;
pub use error::ProxyError;
pub use exchange::Exchange;
pub use routes::{Route, Routes};
pub use stack::Proxy;
pub use timeout::BodyError;

/// Everything requests share.
pub struct State {
    pub config: Arc<Config>,
    pub sink: Arc<Sink>,
    pub routes: Routes,
    /// Key fingerprints and aliases.
    pub keys: KeyIdentity,
    /// `limits.max_concurrent` permits.
    pub limit: Arc<Semaphore>,
    /// Shadow copies in flight (experiment mirror/paired).
    pub shadow: Arc<Semaphore>,
    /// Experiment copies skipped because `max_shadow_in_flight` were already running.
    pub shadow_skipped: AtomicU64,
    /// Arm choice and pair ids (seeded).
    pub rng: Mutex<fastrand::Rng>,
    /// Set when the shutdown grace period is over: streams dropped after this were cut by us.
    pub shutdown_cut: AtomicBool,
}

impl State {
    pub fn new(config: Arc<Config>, sink: Arc<Sink>) -> Result<State, client::ClientError> {
        Ok(State {
            routes: Routes::new(&config.routes, config.timeouts.connect)?,
            keys: KeyIdentity::new(config.key_aliases.clone()),
            limit: Arc::new(Semaphore::new(config.limits.max_concurrent)),
            shadow: Arc::new(Semaphore::new(config.experiment.max_shadow_in_flight)),
            shadow_skipped: AtomicU64::new(0),
            rng: Mutex::new(fastrand::Rng::with_seed(config.experiment.seed)),
            shutdown_cut: AtomicBool::new(false),
            config,
            sink,
        })
    }

    /// Wait (at most `limit`) until every admitted request has its record queued: a finished
    /// stream's record is made by a task spawned after its last write, which may still be
    /// pending when its connection has closed. True when none is left.
    pub async fn settle(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.routes.in_flight() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        true
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
