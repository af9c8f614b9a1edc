//! The response body's deadlines: `timeouts.idle_ms` between chunks and `timeouts.total_ms` for
//! the whole request. Either cuts the stream with an error the client connection sees, and the
//! meter around this body records as `timeout`. It holds no data: frames pass as they come.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::client::{UpstreamBody, UpstreamError};

/// Errors the proxied response body yields to the client connection (which then cuts it).
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("upstream body error: {0}")]
    Upstream(#[source] UpstreamError),
    #[error("upstream sent nothing for {0:?}")]
    Idle(Duration),
    #[error("response exceeded the total time limit")]
    Total,
}

pin_project_lite::pin_project! {
    pub struct TimeoutBody {
        #[pin]
        inner: UpstreamBody,
        idle: Duration,
        idle_timer: Pin<Box<Sleep>>,
        last_activity: Instant,
        deadline: Option<Pin<Box<Sleep>>>,
    }
}

impl TimeoutBody {
    /// `deadline`: the instant the whole request must be over by (total timeout), if any.
    pub fn new(inner: UpstreamBody, idle: Duration, deadline: Option<Instant>) -> Self {
        let now = Instant::now();
        Self {
            inner,
            idle,
            idle_timer: Box::pin(tokio::time::sleep_until(now + idle)),
            last_activity: now,
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
        }
    }

    /// See [`UpstreamBody::pool_after_drop`].
    pub fn pool_after_drop(self: Pin<&mut Self>) {
        self.project().inner.pool_after_drop();
    }
}

#[warn(clippy::missing_trait_methods)]
impl Body for TimeoutBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                *this.last_activity = Instant::now();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(BodyError::Upstream(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if let Some(deadline) = this.deadline.as_mut() {
                    if deadline.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Some(Err(BodyError::Total)));
                    }
                }
                // The idle timer is re-armed lazily: per chunk only the time is stored.
                loop {
                    ready!(this.idle_timer.as_mut().poll(cx));
                    let due = *this.last_activity + *this.idle;
                    if Instant::now() >= due {
                        return Poll::Ready(Some(Err(BodyError::Idle(*this.idle))));
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
