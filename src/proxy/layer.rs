//! What every layer of the stack shares: an answer given at once or by the inner service
//! ([`Respond`]), without a box of its own; and `always_ready!` (no layer ever waits to be
//! ready: each answers every request, refusing by ending the request's exchange).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use super::exchange::ProxyBody;

pin_project_lite::pin_project! {
    /// A layer's answer: at once, or the inner service's future.
    ///
    /// NB: the answer given at once is boxed: hyper keeps a box the size of this future for
    /// every connection's life, and a response inline would make it some 600 bytes where the
    /// inner future is a pointer (docs/overhead.md, "Memory per stream").
    #[project = RespondProj]
    pub enum Respond<F> {
        Now { response: Option<Box<Response<ProxyBody>>> },
        Inner { #[pin] future: F },
    }
}

impl<F: Future<Output = Result<Response<ProxyBody>, Infallible>>> Future for Respond<F> {
    type Output = Result<Response<ProxyBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            RespondProj::Now { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(*r)),
                None => Poll::Pending, // polled after completion: never
            },
            RespondProj::Inner { future } => future.poll(cx),
        }
    }
}

/// An answer at once.
pub fn now<F>(r: Response<ProxyBody>) -> Respond<F> {
    Respond::Now {
        response: Some(Box::new(r)),
    }
}

macro_rules! always_ready {
    () => {
        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }
    };
}
pub(super) use always_ready;
