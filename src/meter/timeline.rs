//! The instants of one request's life, on one monotonic clock (`tokio::time::Instant`, so tests
//! can pause time), and the wall-clock stamp taken once per request.

use tokio::time::Instant;

/// Instants of one request's life, all on the same monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// The request head was received.
    pub t0: Instant,
    pub body_read: Option<Instant>,
    /// The request was written upstream (the upstream has all of it).
    pub sent: Option<Instant>,
    pub headers: Option<Instant>,
    pub first_byte: Option<Instant>,
    pub first_event: Option<Instant>,
    pub first_token: Option<Instant>,
    /// The first output token that is not reasoning (answer text or a tool call).
    pub first_output: Option<Instant>,
    pub last_token: Option<Instant>,
    pub end: Option<Instant>,
}

impl Timeline {
    pub fn new(t0: Instant) -> Self {
        Self {
            t0,
            body_read: None,
            sent: None,
            headers: None,
            first_byte: None,
            first_event: None,
            first_token: None,
            first_output: None,
            last_token: None,
            end: None,
        }
    }

    /// Milliseconds from `t0` to `t`.
    pub fn ms(&self, t: Option<Instant>) -> Option<f64> {
        t.map(|t| ms_between(self.t0, t))
    }
}

/// Milliseconds from `a` to `b`, saturating at 0.
pub fn ms_between(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1000.0
}

/// When a request arrived (wall clock) and its id: formatted only when the record is made.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub at: std::time::SystemTime,
    pub id: u64,
}

impl Stamp {
    pub fn now() -> Self {
        Self {
            at: std::time::SystemTime::now(),
            id: fastrand::u64(..),
        }
    }
}
