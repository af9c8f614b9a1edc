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

    /// Finish once the current task has yielded — hyper writes (and flushes) what it was given
    /// first — so the record is made off the client's path. Without a runtime: now.
    pub fn finish_soon(&mut self, end: End) {
        let Some(inflight) = self.0.take() else {
            return;
        };
        let later = FinishLater(Finalizer(Some(inflight)), Some(end));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { drop(later) });
        }
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

/// A finish handed to the runtime: its drop makes the record (so it is made even if the runtime
/// shuts down before running it).
struct FinishLater(Finalizer, Option<End>);

impl Drop for FinishLater {
    fn drop(&mut self) {
        if let Some(end) = self.1.take() {
            self.0.finish(end);
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
        // The last poll was Pending: hyper has flushed what it had since.
        parked: bool,
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
            parked: false,
        }
    }
}

/// Run an inspection step; once it has seen `[DONE]`, tell the upstream body (it may then read
/// the rest of the response in the background and keep its connection).
fn observe<B: StreamHint>(meter: &mut Meter, inner: Pin<&mut B>, step: impl FnOnce(&mut Meter)) {
    let was_done = meter.done;
    step(meter);
    if meter.done && !was_done {
        inner.complete();
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
        let Some(inf) = this.fin.get_mut() else {
            return Poll::Ready(None);
        };
        // NB: a chunk is inspected once hyper has written it: after this body said Pending
        // (hyper flushes, then polls again at once), or when the next chunk comes. The
        // inspection is never between the upstream and the client; the chunk's instant is taken
        // on arrival, so the figures do not move.
        if std::mem::take(this.parked) {
            observe(&mut inf.meter, this.inner.as_mut(), Meter::catch_up);
        }
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let now = Instant::now();
                *this.last_activity = now;
                if let Some(data) = frame.data_ref() {
                    observe(&mut inf.meter, this.inner.as_mut(), |m| {
                        m.defer(data.clone(), now)
                    });
                }
                if this.inner.is_end_stream() {
                    this.fin.finish_soon(End::Complete);
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
                this.fin.finish_soon(End::Complete);
                Poll::Ready(None)
            }
            Poll::Pending => {
                *this.parked = true;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    /// An upstream body that plays a script: `Some(bytes)` is a frame, `None` is Pending.
    struct Script {
        steps: VecDeque<Option<&'static str>>,
        completed: bool,
    }

    impl Body for Script {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            match self.steps.pop_front() {
                Some(Some(s)) => {
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(s.as_bytes())))))
                }
                Some(None) => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
        fn is_end_stream(&self) -> bool {
            self.steps.is_empty()
        }
    }

    impl StreamHint for Script {
        fn complete(mut self: Pin<&mut Self>) {
            self.completed = true;
        }
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    const TOKEN: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";

    type Seen = Arc<std::sync::Mutex<Option<Outcome>>>;

    fn metered(steps: Vec<Option<&'static str>>) -> (MeteredBody<Script>, Arc<Sink>, Seen) {
        let over = crate::config::Overrides {
            upstream: Some("http://127.0.0.1:9".into()),
            ..Default::default()
        };
        let config = Arc::new(crate::config::Config::from_flags(&over).expect("config"));
        let sink = Arc::new(Sink::new(config, None, Default::default(), &[]).expect("sink"));
        let seen: Seen = Default::default();
        let slot = seen.clone();
        let now = Instant::now();
        let mut meter = Meter::new(now);
        meter.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
        let ctx = super::super::Ctx {
            stamp: super::super::Stamp::now(),
            route: 0,
            experiment: None,
            method: "POST".into(),
            endpoint: "/v1/chat/completions".into(),
            model: None,
            upstream_model: None,
            key_id: None,
            key: None,
            stream: true,
            max_tokens: None,
            request_bytes: 0,
            in_flight: 1,
            status: 200,
            gateway_overhead_ms: None,
            bucket: None,
            concurrency: None,
        };
        let inflight = Box::new(Inflight {
            ctx,
            meter,
            sink: sink.clone(),
            permit: None,
            after: Some(Box::new(move |_, o| {
                if let Ok(mut s) = slot.lock() {
                    *s = Some(o);
                }
            })),
        });
        let script = Script {
            steps: steps.into(),
            completed: false,
        };
        (
            MeteredBody::new(script, inflight, Duration::from_secs(60), None),
            sink,
            seen,
        )
    }

    fn events(b: &MeteredBody<Script>) -> u64 {
        b.fin.0.as_ref().map(|i| i.meter.events).unwrap_or(u64::MAX)
    }

    /// What hyper does: take a frame, poll again before flushing, flush on Pending, poll again.
    /// A chunk is inspected only after a Pending (i.e. once written) or when the next one comes,
    /// and the record of the finished stream is made only once the task has yielded.
    #[tokio::test]
    async fn chunks_are_inspected_after_they_are_written() {
        let (mut body, sink, seen) = metered(vec![
            Some(TOKEN),
            None,
            Some(TOKEN),
            Some(TOKEN),
            Some("data: [DONE]\n\n"),
        ]);
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut b = Pin::new(&mut body);

        assert!(matches!(
            b.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert_eq!(events(&b), 0, "inspected before hyper could write it");
        assert!(b.as_mut().poll_frame(&mut cx).is_pending());
        assert_eq!(events(&b), 0, "inspected before the flush");
        // hyper flushed; the next poll inspects the first chunk, then takes the second.
        assert!(matches!(
            b.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert_eq!(events(&b), 1);
        // At full speed the previous chunk is inspected when the next one comes.
        assert!(matches!(
            b.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert_eq!(events(&b), 2);
        assert!(matches!(
            b.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        // The upstream has ended with that chunk: the body says so (hyper writes the chunk and
        // the end together), and the record is made once this task has yielded, after the flush.
        assert!(b.is_end_stream());
        assert_eq!(sink.records_total.load(Ordering::Relaxed), 0);
        drop(body);
        assert_eq!(sink.records_total.load(Ordering::Relaxed), 0);
        tokio::task::yield_now().await;
        assert_eq!(sink.records_total.load(Ordering::Relaxed), 1);
        assert_eq!(*seen.lock().unwrap(), Some(Outcome::Ok));
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    }

    /// A client that hangs up right after `[DONE]` (the openai client does): the chunk it got
    /// was handed on but not inspected yet; the record still counts it, so the request is
    /// complete, not cancelled.
    #[tokio::test]
    async fn a_chunk_handed_on_is_counted_when_the_client_leaves() {
        let (mut body, sink, seen) = metered(vec![Some(TOKEN), Some("data: [DONE]\n\n"), None]);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut b = Pin::new(&mut body);
        assert!(matches!(
            b.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert!(matches!(
            b.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        drop(body);
        assert_eq!(sink.records_total.load(Ordering::Relaxed), 1);
        assert_eq!(*seen.lock().unwrap(), Some(Outcome::Ok));
    }
}
