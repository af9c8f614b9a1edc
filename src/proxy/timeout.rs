//! The response body's deadlines: `timeouts.idle_ms` between chunks and `timeouts.total_ms` for
//! the whole request. Either cuts the stream with an error the client connection sees, and the
//! body inside is told (`Deadlined::cut`: the meter records `timeout`). It holds no data: frames
//! pass as they come, and it reads no clock per frame (the idle deadline counts from the inner
//! body's own stamp of its last frame).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::error::BodyError;
use crate::meter::{MeteredBody, Observer};

/// A body that can be held to deadlines: it knows when its last frame came, and can be cut.
pub trait Deadlined: Body {
    /// When the last frame came (or the body was made).
    fn last_frame(&self) -> Instant;
    /// A deadline cut the body for `why`.
    fn cut(self: Pin<&mut Self>, why: &BodyError);
}

impl<B, O> Deadlined for MeteredBody<B, O>
where
    B: Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + 'static,
    O: Observer + Send + 'static,
{
    fn last_frame(&self) -> Instant {
        MeteredBody::last_frame(self)
    }

    fn cut(self: Pin<&mut Self>, why: &BodyError) {
        MeteredBody::cut(self, why);
    }
}

pin_project_lite::pin_project! {
    pub struct TimeoutBody<B> {
        #[pin]
        inner: B,
        idle: Duration,
        idle_timer: Pin<Box<Sleep>>,
        deadline: Option<Pin<Box<Sleep>>>,
    }
}

impl<B: Deadlined> TimeoutBody<B> {
    /// `deadline`: the instant the whole request must be over by (total timeout), if any.
    pub fn new(inner: B, idle: Duration, deadline: Option<Instant>) -> Self {
        let first = inner.last_frame() + idle;
        Self {
            inner,
            idle,
            idle_timer: Box::pin(tokio::time::sleep_until(first)),
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
        }
    }
}

#[warn(clippy::missing_trait_methods)]
impl<B> Body for TimeoutBody<B>
where
    B: Deadlined,
    B::Error: Into<BodyError>,
{
    type Data = B::Data;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BodyError>>> {
        let mut this = self.project();
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if let Some(deadline) = this.deadline.as_mut() {
                    if deadline.as_mut().poll(cx).is_ready() {
                        this.inner.as_mut().cut(&BodyError::Total);
                        return Poll::Ready(Some(Err(BodyError::Total)));
                    }
                }
                // The idle timer is re-armed lazily: per chunk nothing is done.
                loop {
                    ready!(this.idle_timer.as_mut().poll(cx));
                    let due = this.inner.last_frame() + *this.idle;
                    if crate::rxstamp::now() >= due {
                        let err = BodyError::Idle(*this.idle);
                        this.inner.as_mut().cut(&err);
                        return Poll::Ready(Some(Err(err)));
                    }
                    this.idle_timer.as_mut().reset(due);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
