//! The closed loop's workers polled together on one task (no spawn: they borrow the cell's
//! state), each only when its own waker fired. Polling every worker whenever any one is woken
//! costs C polls per socket event: at C = 1,000 streams, a million polls for a thousand events,
//! and that, not the sockets, was bench's ceiling. Never polls a finished worker again.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// The most workers polled in one poll of the whole.
const BUDGET: usize = 32;

/// The workers woken since the last poll, and the task to wake when one is.
#[derive(Default)]
struct Woken {
    list: Mutex<Vec<usize>>,
    task: Mutex<Option<Waker>>,
}

/// One worker's waker: puts its index on the list once until it is polled.
struct WorkerWaker {
    i: usize,
    queued: AtomicBool,
    woken: Arc<Woken>,
}

impl Wake for WorkerWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Ok(mut l) = self.woken.list.lock() {
            l.push(self.i);
        }
        let task = self.woken.task.lock().ok().and_then(|t| t.clone());
        if let Some(t) = task {
            t.wake();
        }
    }
}

/// One worker still running: the future, its waker and the flag that waker sets.
struct Slot<F> {
    fut: Pin<Box<F>>,
    own: Arc<WorkerWaker>,
    waker: Waker,
}

/// Run every future to its end, concurrently, on the calling task.
pub(crate) async fn join_all<F: Future<Output = ()>>(futs: Vec<F>) {
    let woken = Arc::new(Woken {
        list: Mutex::new((0..futs.len()).collect()),
        task: Mutex::new(None),
    });
    let mut slots: Vec<Option<Slot<F>>> = futs
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let w = Arc::new(WorkerWaker {
                i,
                queued: AtomicBool::new(true),
                woken: woken.clone(),
            });
            Some(Slot {
                fut: Box::pin(f),
                own: w.clone(),
                waker: Waker::from(w),
            })
        })
        .collect();
    let mut left = slots.len();
    let mut due = Vec::new();
    std::future::poll_fn(move |cx| {
        if let Ok(mut t) = woken.task.lock() {
            if !t.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *t = Some(cx.waker().clone());
            }
        }
        // What is woken while these are polled waits for the next poll; and no more than
        // BUDGET a poll, so that the runtime's other tasks run between (a cell's first round
        // sets out C requests at once: polled in one go, the first answers would wait for them
        // all when the workers share the connections' thread: a reader lag of 54 ms at C = 1,000).
        if let Ok(mut l) = woken.list.lock() {
            due.append(&mut l);
        }
        let n = due.len().min(BUDGET);
        if n < due.len() {
            cx.waker().wake_by_ref();
        }
        for i in due.drain(..n) {
            let Some(Some(slot)) = slots.get_mut(i) else {
                continue;
            };
            slot.own.queued.store(false, Ordering::Release);
            let mut cx = Context::from_waker(&slot.waker);
            if slot.fut.as_mut().poll(&mut cx).is_ready() {
                slots[i] = None;
                left -= 1;
            }
        }
        if left == 0 {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// A future that counts its polls.
    struct Counted<F> {
        f: Pin<Box<F>>,
        polls: Arc<AtomicUsize>,
    }

    impl<F: Future> Future for Counted<F> {
        type Output = F::Output;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            self.f.as_mut().poll(cx)
        }
    }

    #[tokio::test]
    async fn every_worker_ends_and_each_is_polled_only_when_woken() {
        let polls = Arc::new(AtomicUsize::new(0));
        let ended = Arc::new(AtomicUsize::new(0));
        let n = 200;
        let futs: Vec<_> = (0..n)
            .map(|i| Counted {
                polls: polls.clone(),
                f: Box::pin({
                    let ended = ended.clone();
                    async move {
                        for k in 0..3u64 {
                            tokio::time::sleep(Duration::from_micros(100 * (1 + i % 7 + k))).await;
                        }
                        ended.fetch_add(1, Ordering::Relaxed);
                    }
                }),
            })
            .collect();
        join_all(futs).await;
        assert_eq!(ended.load(Ordering::Relaxed), n as usize);
        // At most once at the start and once a sleep's end each; polling every worker at every
        // wake-up would count tens of thousands.
        let p = polls.load(Ordering::Relaxed);
        assert!((n as usize..=4 * n as usize).contains(&p), "{p} polls");
    }
}
