//! The response body's deadlines: `timeouts.idle_ms` between chunks and `timeouts.total_ms` for
//! the whole request. Either cuts the stream with an error the client connection sees, and the
//! meter inside records as `timeout` (`MeteredBody::cut`). It holds no data: frames pass as they
//! come, and it reads no clock per frame (the idle deadline counts from the meter's own stamp).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::client::{UpstreamBody, UpstreamError};
use super::exchange::Exchange;
use crate::meter::MeteredBody;

/// The metered upstream body, inside the deadlines.
pub type Metered = MeteredBody<UpstreamBody, Exchange>;

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
        inner: Metered,
        idle: Duration,
        idle_timer: Pin<Box<Sleep>>,
        deadline: Option<Pin<Box<Sleep>>>,
    }
}

impl TimeoutBody {
    /// `deadline`: the instant the whole request must be over by (total timeout), if any.
    pub fn new(inner: Metered, idle: Duration, deadline: Option<Instant>) -> Self {
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
impl Body for TimeoutBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let mut this = self.project();
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(BodyError::Upstream(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if let Some(deadline) = this.deadline.as_mut() {
                    if deadline.as_mut().poll(cx).is_ready() {
                        this.inner.cut(&BodyError::Total);
                        return Poll::Ready(Some(Err(BodyError::Total)));
                    }
                }
                // The idle timer is re-armed lazily: per chunk nothing is done.
                loop {
                    ready!(this.idle_timer.as_mut().poll(cx));
                    let due = this.inner.last_frame() + *this.idle;
                    if Instant::now() >= due {
                        let err = BodyError::Idle(*this.idle);
                        this.inner.cut(&err);
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
