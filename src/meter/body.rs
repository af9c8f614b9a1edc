//! `MeteredBody`: wraps the upstream response body, stamps and observes every frame, and hands
//! the same frame on at once. It never copies, re-frames or holds data.
//!
//! The request is finalized exactly once, on whichever ending comes first: end of body, a body
//! error, `is_end_stream()` turning true (the consumer may never poll again), a timeout, or the
//! body being dropped (the client went away — the upstream body is dropped with it).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::{Ctx, Meter, Outcome};
use crate::sink::Sink;

/// Why a body ended, as the finalizer sees it.
#[derive(Debug)]
pub enum End {
    /// The body ended cleanly; the outcome follows from status and what the stream said.
    Complete,
    /// An outcome decided by the caller (proxy-generated responses, body errors, timeouts).
    Outcome(Outcome, String),
    /// Dropped before the end: the client went away (or shutdown cut it).
    Dropped,
}

/// A request in progress: everything needed to write its record.
pub struct Inflight {
    pub ctx: Ctx,
    pub meter: Meter,
    pub sink: Arc<Sink>,
    /// Held for the request's life; released when it is finalized.
    pub permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Run once the record is written, with the status and outcome (paired experiment copies).
    pub after: Option<Box<dyn FnOnce(u16, Outcome) + Send>>,
}

/// Owns the in-progress request and finalizes it exactly once (at the latest on drop).
pub struct Finalizer(Option<Box<Inflight>>);

impl Finalizer {
    pub fn new(inflight: Inflight) -> Self {
        Finalizer(Some(Box::new(inflight)))
    }

    pub fn get_mut(&mut self) -> Option<&mut Inflight> {
        self.0.as_deref_mut()
    }

    /// Take the request out (to hand it to a body); the finalizer is then inert.
    pub fn take(&mut self) -> Option<Box<Inflight>> {
        self.0.take()
    }

    pub fn from_box(b: Box<Inflight>) -> Self {
        Finalizer(Some(b))
    }

    pub fn finish(&mut self, end: End) {
        if let Some(inflight) = self.0.take() {
            let Inflight {
                ctx,
                meter,
                sink,
                permit,
                after,
            } = *inflight;
            let (status, outcome) = sink.finish(ctx, meter, end, Instant::now());
            drop(permit);
            if let Some(after) = after {
                after(status, outcome);
            }
        }
    }
}

impl Drop for Finalizer {
    fn drop(&mut self) {
        self.finish(End::Dropped);
    }
}

/// What a metered body tells the body it wraps.
pub trait StreamHint {
    /// The stream is complete for its consumer (`[DONE]` was seen); what follows is framing.
    fn complete(self: Pin<&mut Self>);
}

/// Errors a metered body can yield to the client connection (which then cuts the stream).
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("upstream body error: {0}")]
    Upstream(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("upstream sent nothing for {0:?}")]
    Idle(Duration),
    #[error("response exceeded the total time limit")]
    Total,
}

pin_project_lite::pin_project! {
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        fin: Finalizer,
        idle: Duration,
        idle_timer: Pin<Box<Sleep>>,
        last_activity: Instant,
        deadline: Option<Pin<Box<Sleep>>>,
    }
}

impl<B> MeteredBody<B> {
    /// `deadline`: the instant the whole request must be over by (total timeout), if any.
    pub fn new(
        inner: B,
        inflight: Box<Inflight>,
        idle: Duration,
        deadline: Option<Instant>,
    ) -> Self {
        let now = Instant::now();
        Self {
            inner,
            fin: Finalizer::from_box(inflight),
            idle,
            idle_timer: Box::pin(tokio::time::sleep_until(now + idle)),
            last_activity: now,
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
        }
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes> + StreamHint,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if this.fin.get_mut().is_none() {
            // Already finalized (a timeout ended it); nothing more is passed on.
            return Poll::Ready(None);
        }
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let now = Instant::now();
                *this.last_activity = now;
                if let (Some(data), Some(inf)) = (frame.data_ref(), this.fin.get_mut()) {
                    let was_done = inf.meter.done;
                    inf.meter.on_data(data, now);
                    if inf.meter.done && !was_done {
                        this.inner.as_mut().complete();
                    }
                }
                if this.inner.is_end_stream() {
                    this.fin.finish(End::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let e: Box<dyn std::error::Error + Send + Sync> = e.into();
                this.fin.finish(End::Outcome(
                    Outcome::UpstreamReset,
                    format!("upstream body: {e}"),
                ));
                Poll::Ready(Some(Err(BodyError::Upstream(e))))
            }
            Poll::Ready(None) => {
                this.fin.finish(End::Complete);
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let Some(deadline) = this.deadline.as_mut() {
                    if deadline.as_mut().poll(cx).is_ready() {
                        this.fin
                            .finish(End::Outcome(Outcome::Timeout, "total timeout".into()));
                        return Poll::Ready(Some(Err(BodyError::Total)));
                    }
                }
                // The idle timer is re-armed lazily: per chunk we only store the time.
                loop {
                    ready!(this.idle_timer.as_mut().poll(cx));
                    let due = *this.last_activity + *this.idle;
                    if Instant::now() >= due {
                        this.fin
                            .finish(End::Outcome(Outcome::Timeout, "idle timeout".into()));
                        return Poll::Ready(Some(Err(BodyError::Idle(*this.idle))));
                    }
                    this.idle_timer.as_mut().reset(due);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.fin.0.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
