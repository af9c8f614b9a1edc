//! `MeteredBody`: wraps any response body, stamps and observes every frame, and hands the same
//! frame on at once. It never copies, re-frames or holds data, and knows nothing of where the
//! measurement goes: that is its [`Observer`]'s business.
//!
//! The observer is ended exactly once, on whichever ending comes first: end of body,
//! `is_end_stream()` turning true (the consumer may never poll again), a body error, or the body
//! being dropped (the client went away — the wrapped body is dropped with it).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use super::{Meter, ReadClock};
use crate::rxstamp::Arrival;

/// How a metered body ended, as its observer is told.
#[derive(Debug)]
pub enum BodyEnd<'a> {
    /// The body ended cleanly (with `end_complete_after_yield`, reported once the task
    /// yielded: hyper writes the last chunk first, so the record is made off the client's path).
    Complete,
    /// The wrapped body failed; the same error went on to the consumer.
    Error(&'a (dyn std::error::Error + 'static)),
    /// Dropped before its end: the consumer (the client) went away.
    Dropped,
}

/// Where a metered body's measurement goes.
pub trait Observer {
    /// The meter fed with every frame.
    fn meter(&mut self) -> &mut Meter;
    /// Called exactly once, with how the body ended; the meter may still hold the last chunk
    /// uninspected (`Meter::catch_up`).
    fn end(self, end: BodyEnd<'_>);
}

pin_project_lite::pin_project! {
    pub struct MeteredBody<B, O: Observer> {
        #[pin]
        inner: B,
        observer: Option<O>,
        // The last poll was Pending: the consumer has flushed what it had since.
        parked: bool,
        // Told once the stream is complete for its consumer (`[DONE]` seen) when the body is
        // dropped before its end: what follows is framing.
        on_complete: Option<fn(Pin<&mut B>)>,
        // When the last frame came (its stamp), or when the body was made.
        last_frame: Instant,
        // End a completed body on the runtime once the current task yielded.
        after_yield: bool,
        // The wrapped body's `is_end_stream` (the drop has no `Body` bound to call it by).
        at_end: fn(&B) -> bool,
        // The kernel's stamp of the frame just read, when the wrapped body has one.
        arrival: fn(&B) -> Option<Arrival>,
    }

    impl<B, O: Observer> PinnedDrop for MeteredBody<B, O> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(mut o) = this.observer.take() {
                o.meter().catch_up();
                // An empty body (`content-length: 0`) is at its end before any poll: its
                // consumer had it all and never polls. Complete, not cancelled.
                if (this.at_end)(&this.inner) {
                    return o.end(BodyEnd::Complete);
                }
                if o.meter().done {
                    if let Some(hook) = this.on_complete.take() {
                        hook(this.inner);
                    }
                }
                o.end(BodyEnd::Dropped);
            }
        }
    }
}

impl<B: Body, O: Observer> MeteredBody<B, O> {
    pub fn new(inner: B, observer: O) -> Self {
        Self {
            inner,
            observer: Some(observer),
            parked: false,
            on_complete: None,
            last_frame: crate::rxstamp::now(),
            after_yield: false,
            at_end: B::is_end_stream,
            arrival: |_| None,
        }
    }
}

impl<B, O: Observer> MeteredBody<B, O> {
    /// Report a clean end once the current task has yielded, on the runtime, instead of at
    /// once: a server's consumer (hyper) writes the last chunk first, so the observer's work is
    /// off the client's path. A client reading its own responses wants the default.
    pub fn end_complete_after_yield(mut self) -> Self {
        self.after_yield = true;
        self
    }

    /// Call `hook` on the wrapped body if it is dropped after the stream was complete for its
    /// consumer (`[DONE]` seen): e.g. an upstream body that may then keep its connection.
    pub fn on_stream_complete(mut self, hook: fn(Pin<&mut B>)) -> Self {
        self.on_complete = Some(hook);
        self
    }

    /// Stamp each frame with the kernel's arrival of its last segment, as `arrival` reads it
    /// from the wrapped body; a frame without one is stamped with `crate::rxstamp::now()`.
    pub fn stamped_by(mut self, arrival: fn(&B) -> Option<Arrival>) -> Self {
        self.arrival = arrival;
        self
    }

    /// The meter, while the body has not ended.
    pub fn meter(&mut self) -> Option<&mut Meter> {
        self.observer.as_mut().map(O::meter)
    }

    /// When the last frame came (the instant the meter stamped it), or when the body was made:
    /// what an idle deadline counts from, without reading the clock again.
    pub fn last_frame(&self) -> Instant {
        self.last_frame
    }

    /// The consumer cuts the body for `why` (a deadline): the observer is ended with it as the
    /// body's error, exactly as if the wrapped body had failed.
    pub fn cut(self: Pin<&mut Self>, why: &(dyn std::error::Error + 'static)) {
        if let Some(o) = self.project().observer.take() {
            o.end(BodyEnd::Error(why));
        }
    }
}

/// An observer ended later, on the runtime, or at the latest when dropped (so it is ended even
/// if the runtime shuts down before running it).
struct EndLater<O: Observer>(Option<O>);

impl<O: Observer> Drop for EndLater<O> {
    fn drop(&mut self) {
        if let Some(o) = self.0.take() {
            o.end(BodyEnd::Complete);
        }
    }
}

/// End `o` as complete: now, or once the current task has yielded (without a runtime, now).
fn end_complete<O: Observer + Send + 'static>(o: O, after_yield: bool) {
    if !after_yield {
        return o.end(BodyEnd::Complete);
    }
    let later = EndLater(Some(o));
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move { drop(later) });
    }
}

#[warn(clippy::missing_trait_methods)]
impl<B, O> Body for MeteredBody<B, O>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + 'static,
    O: Observer + Send + 'static,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some(obs) = this.observer.as_mut() else {
            return Poll::Ready(None);
        };
        // NB: a chunk is inspected once the consumer has written it: after this body said
        // Pending (hyper flushes, then polls again at once), or when the next chunk comes. The
        // inspection is never between the upstream and the client, and never before the next
        // chunk's stamp: a chunk's instant is taken the moment the upstream gives it, so a
        // burst's figures do not move with the time its earlier chunks took to inspect.
        let parked = std::mem::take(this.parked);
        let mut inner = this.inner;
        match inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let meter = obs.meter();
                let (now, clock) = match (this.arrival)(&inner) {
                    // The scheduling delay is read for the first token's stamp only.
                    Some(a) => (
                        a.at,
                        ReadClock::Kernel {
                            lag: meter
                                .awaits_first_token()
                                .then(|| crate::rxstamp::now().saturating_duration_since(a.at)),
                        },
                    ),
                    None => (crate::rxstamp::now(), ReadClock::Process),
                };
                *this.last_frame = now;
                if let Some(data) = frame.data_ref() {
                    meter.defer(data.clone(), now, clock);
                }
                if inner.is_end_stream() {
                    if let Some(o) = this.observer.take() {
                        end_complete(o, *this.after_yield);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(o) = this.observer.take() {
                    o.end(BodyEnd::Error(&e));
                }
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                if let Some(o) = this.observer.take() {
                    end_complete(o, *this.after_yield);
                }
                Poll::Ready(None)
            }
            Poll::Pending => {
                if parked {
                    obs.meter().catch_up();
                }
                *this.parked = true;
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.observer.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::Wake;

    /// An upstream body that plays a script: `Some(bytes)` is a frame, `None` is Pending.
    struct Script {
        steps: VecDeque<Option<&'static str>>,
        completed: Arc<Mutex<bool>>,
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

    /// What the observer was told: (ending, `[DONE]` seen, events) once ended.
    type Seen = Arc<Mutex<Vec<(&'static str, bool, u64)>>>;

    struct Probe {
        meter: Meter,
        seen: Seen,
    }

    impl Observer for Probe {
        fn meter(&mut self) -> &mut Meter {
            &mut self.meter
        }
        fn end(mut self, end: BodyEnd<'_>) {
            self.meter.catch_up();
            let kind = match end {
                BodyEnd::Complete => "complete",
                BodyEnd::Error(_) => "error",
                BodyEnd::Dropped => "dropped",
            };
            let m = &self.meter;
            self.seen.lock().unwrap().push((kind, m.done, m.events));
        }
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    const TOKEN: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";

    fn metered(
        steps: Vec<Option<&'static str>>,
    ) -> (MeteredBody<Script, Probe>, Seen, Arc<Mutex<bool>>) {
        let seen: Seen = Default::default();
        let mut meter = Meter::new(Instant::now());
        meter.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
        let completed = Arc::new(Mutex::new(false));
        let script = Script {
            steps: steps.into(),
            completed: completed.clone(),
        };
        let probe = Probe {
            meter,
            seen: seen.clone(),
        };
        let body = MeteredBody::new(script, probe)
            .on_stream_complete(|s| {
                *s.completed.lock().unwrap() = true;
            })
            .end_complete_after_yield();
        (body, seen, completed)
    }

    fn events(b: &mut MeteredBody<Script, Probe>) -> u64 {
        b.meter().map(|m| m.events).unwrap_or(u64::MAX)
    }

    /// What hyper does: take a frame, poll again before flushing, flush on Pending, poll again.
    /// A chunk is inspected only after a Pending (i.e. once written) or when the next one comes,
    /// and the end of the finished stream is reported only once the task has yielded.
    #[tokio::test]
    async fn chunks_are_inspected_after_they_are_written() {
        let (mut body, seen, _) = metered(vec![
            Some(TOKEN),
            None,
            Some(TOKEN),
            Some(TOKEN),
            Some("data: [DONE]\n\n"),
        ]);
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);

        let ready = |p: Poll<Option<Result<Frame<Bytes>, std::io::Error>>>| {
            matches!(p, Poll::Ready(Some(Ok(_))))
        };
        assert!(ready(Pin::new(&mut body).poll_frame(&mut cx)));
        assert_eq!(
            events(&mut body),
            0,
            "inspected before hyper could write it"
        );
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_pending());
        assert_eq!(events(&mut body), 0, "inspected before the flush");
        // hyper flushed; the next poll inspects the first chunk, then takes the second.
        assert!(ready(Pin::new(&mut body).poll_frame(&mut cx)));
        assert_eq!(events(&mut body), 1);
        // At full speed the previous chunk is inspected when the next one comes.
        assert!(ready(Pin::new(&mut body).poll_frame(&mut cx)));
        assert_eq!(events(&mut body), 2);
        assert!(ready(Pin::new(&mut body).poll_frame(&mut cx)));
        // The upstream has ended with that chunk: the body says so (hyper writes the chunk and
        // the end together), and the end is reported once this task has yielded, after the flush.
        assert!(body.is_end_stream());
        assert!(seen.lock().unwrap().is_empty());
        drop(body);
        assert!(seen.lock().unwrap().is_empty());
        tokio::task::yield_now().await;
        assert_eq!(*seen.lock().unwrap(), vec![("complete", true, 4)]);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    }

    /// A client that hangs up right after `[DONE]` (the openai client does): the chunk it got
    /// was handed on but not inspected yet; the observer still counts it (the proxy's verdict
    /// reads such a request as complete, not cancelled), and the upstream body is told its
    /// stream was complete.
    #[tokio::test]
    async fn a_chunk_handed_on_is_counted_when_the_client_leaves() {
        let (mut body, seen, completed) =
            metered(vec![Some(TOKEN), Some("data: [DONE]\n\n"), None]);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        for _ in 0..2 {
            assert!(matches!(
                Pin::new(&mut body).poll_frame(&mut cx),
                Poll::Ready(Some(Ok(_)))
            ));
        }
        drop(body);
        assert_eq!(*seen.lock().unwrap(), vec![("dropped", true, 2)]);
        assert!(*completed.lock().unwrap());
    }

    /// Left mid-stream: ended once as dropped, and the wrapped body is not told it may pool.
    #[tokio::test]
    async fn a_client_leaving_mid_stream_ends_it_once() {
        let (mut body, seen, completed) = metered(vec![Some(TOKEN), None, Some(TOKEN)]);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_ready());
        drop(body);
        assert_eq!(*seen.lock().unwrap(), vec![("dropped", false, 1)]);
        assert!(!*completed.lock().unwrap());
    }

    /// By default a clean end is reported at once, in the consumer's poll.
    #[tokio::test]
    async fn a_clean_end_is_reported_at_once_by_default() {
        let seen: Seen = Default::default();
        let mut meter = Meter::new(Instant::now());
        meter.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
        let script = Script {
            steps: vec![Some(TOKEN), Some("data: [DONE]\n\n")].into(),
            completed: Default::default(),
        };
        let probe = Probe {
            meter,
            seen: seen.clone(),
        };
        let mut body = MeteredBody::new(script, probe);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        while let Poll::Ready(Some(_)) = Pin::new(&mut body).poll_frame(&mut cx) {}
        assert_eq!(*seen.lock().unwrap(), vec![("complete", true, 2)]);
    }
}
