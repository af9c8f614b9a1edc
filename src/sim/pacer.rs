//! The paced mock's clock: one thread that wakes every paced answer at its instants, on
//! absolute deadlines, as `benches/overhead.rs`'s pacer does. It sleeps until the earliest
//! instant any answer waits for (to the nanosecond, without timer slack, not the runtime's
//! millisecond ticks), wakes every one that is due, and sleeps again. A late wake-up delays that
//! write only: the next instant is computed from the schedule, never from when the last write
//! happened, so lateness does not accumulate. The thread wakes at most once every [`QUANTUM`]:
//! an instant due within a quantum of the last wake-up waits for the next (late by less than a
//! quantum, never early), and an answer that asks for an instant the thread will wake in time
//! for costs no wake-up of the thread. It never writes itself; it only wakes the answer's
//! connection.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The shortest sleep of the pacer's thread: under load (1,000 streams of a token every 10 ms
/// are 100,000 instants a second) it wakes at most 20,000 times a second instead of once an
/// instant, at a cost of less than this much lateness on the instants it batches.
pub const QUANTUM: Duration = Duration::from_micros(50);

/// Where the pacer finds the task to wake.
#[derive(Default)]
struct Slot(Mutex<Option<Waker>>);

impl Slot {
    fn set(&self, w: &Waker) {
        if let Ok(mut s) = self.0.lock() {
            match s.as_ref() {
                Some(old) if old.will_wake(w) => {}
                _ => *s = Some(w.clone()),
            }
        }
    }

    fn wake(&self) {
        let w = self.0.lock().ok().and_then(|mut s| s.take());
        if let Some(w) = w {
            w.wake();
        }
    }
}

/// An instant some answer waits for.
struct Entry {
    at: Instant,
    slot: Arc<Slot>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: the heap's top is the earliest instant.
    fn cmp(&self, o: &Self) -> Ordering {
        o.at.cmp(&self.at)
    }
}

/// What the answers and the pacer's thread share.
struct Shared {
    /// Every instant waited for.
    heap: Mutex<BinaryHeap<Entry>>,
    /// When the thread wakes by itself next, in ns from `origin` (`u64::MAX`: not before it is
    /// woken). Written under `heap`'s lock: an instant more than a quantum earlier unparks it.
    wakes_at: AtomicU64,
    origin: Instant,
    /// Every handle is gone: the thread ends.
    closed: AtomicBool,
    thread: std::thread::Thread,
}

impl Shared {
    fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Wait for `at`: the thread is unparked only when it would sleep past it by a quantum.
    fn register(&self, at: Instant, slot: Arc<Slot>) {
        let quantum = QUANTUM.as_nanos() as u64;
        let earlier = match self.heap.lock() {
            Ok(mut h) => {
                h.push(Entry { at, slot });
                self.ns(at).saturating_add(quantum) < self.wakes_at.load(Relaxed)
            }
            Err(_) => true,
        };
        if earlier {
            self.thread.unpark();
        }
    }
}

/// Ends the pacer's thread when the last handle goes.
struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.closed.store(true, Relaxed);
        self.0.thread.unpark();
    }
}

/// A handle on the pacer's thread; the thread ends when the last handle (and the last wait
/// made from one) is gone.
#[derive(Clone)]
pub struct Pacer {
    owner: Arc<Owner>,
}

impl Pacer {
    /// Start the pacer's thread.
    pub fn start() -> std::io::Result<Pacer> {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<Shared>>();
        let thread = std::thread::Builder::new()
            .name("tokentap-sim-pacer".into())
            .spawn(move || {
                no_timer_slack();
                if let Ok(shared) = rx.recv() {
                    run(&shared);
                }
            })?;
        let shared = Arc::new(Shared {
            heap: Mutex::new(BinaryHeap::new()),
            wakes_at: AtomicU64::new(u64::MAX),
            origin: Instant::now(),
            closed: AtomicBool::new(false),
            thread: thread.thread().clone(),
        });
        tx.send(shared.clone())
            .map_err(|_| std::io::Error::other("the pacer's thread ended at its start"))?;
        Ok(Pacer {
            owner: Arc::new(Owner(shared)),
        })
    }

    /// A wait for `at`: ready once the clock has passed it.
    pub fn at(&self, at: Instant) -> Tick {
        Tick {
            pacer: self.clone(),
            at,
            slot: Arc::default(),
            registered: false,
        }
    }
}

/// Wake at the instant asked rather than up to the default 50 µs of timer slack later: the
/// calling thread's slack set to 1 ns (Linux: a thread may set its own without privilege, by its
/// `/proc/<tid>/timerslack_ns`; elsewhere, or refused, the default stays).
fn no_timer_slack() {
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return;
    };
    if let Some(tid) = link.file_name().and_then(|t| t.to_str()) {
        let _ = std::fs::write(format!("/proc/{tid}/timerslack_ns"), "1");
    }
}

/// The pacer's loop: wake what is due, then sleep until the next instant, a quantum at least
/// (or until an instant a quantum earlier arrives, or the last handle goes).
fn run(shared: &Shared) {
    let mut due = Vec::new();
    while !shared.closed.load(Relaxed) {
        let now = Instant::now();
        let next = match shared.heap.lock() {
            Ok(mut h) => {
                while h.peek().is_some_and(|e| e.at <= now) {
                    due.extend(h.pop());
                }
                let next = h.peek().map(|e| e.at.max(now + QUANTUM));
                let ns = next.map_or(u64::MAX, |t| shared.ns(t));
                shared.wakes_at.store(ns, Relaxed);
                next
            }
            Err(_) => return,
        };
        for e in due.drain(..) {
            e.slot.wake();
        }
        match next {
            None => std::thread::park(),
            Some(t) => {
                let wait = t.saturating_duration_since(Instant::now());
                if wait > Duration::ZERO {
                    std::thread::park_timeout(wait);
                }
            }
        }
    }
}

/// A wait for one instant, woken by the pacer's thread. Polled after its instant it is ready at
/// once; a wake-up before (another reason to poll) leaves it waiting. Reusable: [`Tick::reset`].
pub struct Tick {
    pacer: Pacer,
    at: Instant,
    slot: Arc<Slot>,
    /// The pacer holds this instant.
    registered: bool,
}

impl Tick {
    /// The instant it waits for.
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// Wait for `at` next.
    pub fn reset(&mut self, at: Instant) {
        self.at = at;
        self.registered = false;
    }
}

impl Future for Tick {
    /// How late it was polled ready.
    type Output = std::time::Duration;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::time::Duration> {
        let now = Instant::now();
        if now >= self.at {
            return Poll::Ready(now - self.at);
        }
        self.slot.set(cx.waker());
        if !self.registered {
            self.pacer.owner.0.register(self.at, self.slot.clone());
            self.registered = true;
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn ticks_are_never_early_and_keep_to_an_absolute_schedule() {
        let p = Pacer::start().unwrap_or_else(|e| panic!("{e}"));
        let t0 = Instant::now();
        let gap = Duration::from_millis(2);
        let mut tick = p.at(t0 + gap);
        for k in 1..=20u32 {
            let late = (&mut tick).await;
            let now = Instant::now();
            assert!(now >= t0 + gap * k, "never early");
            assert!(late <= now - (t0 + gap * k));
            tick.reset(t0 + gap * (k + 1));
        }
        // Many waits at once, out of order: each wakes at its own instant.
        let t0 = Instant::now();
        let waits: Vec<_> = (0..50u32)
            .rev()
            .map(|k| {
                let t = p.at(t0 + Duration::from_micros(200) * k);
                tokio::spawn(async move {
                    let due = t.instant();
                    t.await;
                    Instant::now() >= due
                })
            })
            .collect();
        for w in waits {
            assert!(w.await.unwrap_or(false));
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_pacers_thread_sleeps_without_timer_slack() {
        let slack = std::thread::spawn(|| {
            no_timer_slack();
            let tid = std::fs::read_link("/proc/thread-self")
                .ok()
                .and_then(|l| l.file_name()?.to_str().map(str::to_owned))
                .unwrap_or_default();
            std::fs::read_to_string(format!("/proc/{tid}/timerslack_ns")).unwrap_or_default()
        })
        .join()
        .unwrap_or_default();
        assert_eq!(slack.trim(), "1");
    }
}
