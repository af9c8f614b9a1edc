//! The config generation new requests take. A reload builds a whole new [`State`] beside the
//! running one and swaps it in: each request takes the current generation once, when it
//! arrives, and keeps it to its record, so a stream that began before a reload finishes on the
//! routes, upstreams and timeouts it began with.
//!
//! The generations a reload replaced are remembered weakly: the shutdown waits for their
//! requests too, and a generation is gone once its last request is recorded.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use tokio_rustls::TlsAcceptor;

use super::stack::{stack, Current, Stack};
use super::state::{Shared, State};

/// A generation: its number (1 at start, +1 per applied reload), its state, the stack over it,
/// and the listener's TLS for it.
struct Generation {
    number: u64,
    state: Arc<State>,
    stack: Stack,
    tls: Option<TlsAcceptor>,
}

pub struct Live {
    current: RwLock<Arc<Generation>>,
    /// Generations replaced by a reload, while requests of theirs may still run.
    old: Mutex<Vec<Weak<State>>>,
    pub shared: Arc<Shared>,
}

impl Live {
    pub fn new(state: State, tls: Option<TlsAcceptor>) -> Live {
        let shared = state.shared.clone();
        Live {
            current: RwLock::new(Arc::new(Self::generation(1, state, tls))),
            old: Mutex::new(Vec::new()),
            shared,
        }
    }

    fn generation(number: u64, state: State, tls: Option<TlsAcceptor>) -> Generation {
        let state = Arc::new(state);
        Generation {
            number,
            stack: stack(state.clone()),
            state,
            tls,
        }
    }

    fn now(&self) -> Arc<Generation> {
        // NB: a panic while the lock was held cannot leave a half-swapped value: take it.
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The current generation's state.
    pub fn state(&self) -> Arc<State> {
        self.now().state.clone()
    }

    /// The listener's TLS for new connections.
    pub fn tls(&self) -> Option<TlsAcceptor> {
        self.now().tls.clone()
    }

    /// The current generation's number (1 at start).
    pub fn number(&self) -> u64 {
        self.now().number
    }

    /// Make `state` current; new requests take it from now on. Returns the new number.
    pub fn swap(&self, state: State, tls: Option<TlsAcceptor>) -> u64 {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let number = current.number + 1;
        let old = std::mem::replace(
            &mut *current,
            Arc::new(Self::generation(number, state, tls)),
        );
        drop(current);
        let mut list = self
            .old
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&old.state));
        number
    }

    /// Generations a reload replaced whose requests are still running.
    pub fn draining(&self) -> usize {
        self.old
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Requests admitted, over every generation, whose record is not yet made.
    pub fn in_flight(&self) -> u64 {
        let mut states = vec![self.state()];
        states.extend(
            self.old
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .filter_map(Weak::upgrade),
        );
        // Same-named routes share one counter across generations: count each counter once.
        let mut seen = std::collections::HashSet::new();
        states
            .iter()
            .flat_map(|s| s.routes.iter())
            .filter(|r| seen.insert(Arc::as_ptr(&r.in_flight)))
            .map(|r| r.in_flight.load(Ordering::Acquire))
            .sum()
    }

    /// Wait (at most `limit`) until every admitted request, of every generation, has its record
    /// queued: a finished stream's record is made by a task spawned after its last write, which
    /// may still be pending when its connection has closed. True when none is left.
    pub async fn settle(&self, limit: Duration) -> bool {
        let deadline = crate::rxstamp::now() + limit;
        while self.in_flight() > 0 {
            if crate::rxstamp::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }
}

impl Current for Live {
    fn stack(&self) -> Stack {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .stack
            .clone()
    }
}
