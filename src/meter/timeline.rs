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
    duration_ms(b.saturating_duration_since(a))
}

/// A duration in milliseconds as records carry it: its nanoseconds divided once, so the double
/// is the one nearest the exact figure and is written with no more digits than that has
/// (`18.874196`, where `as_secs_f64() * 1000.0` rounds twice and writes `18.874195999999998`).
pub fn duration_ms(d: std::time::Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// Which clock stamped a request's instants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// The kernel's receive stamps: `t0` and every read of the response.
    Kernel,
    /// tokentap's clock when its task read the bytes, for at least one of them (the kernel gave
    /// no stamp). Old records, which do not say, were stamped so.
    #[default]
    Process,
}

impl Clock {
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::Kernel => "kernel",
            Clock::Process => "process",
        }
    }
}

/// When a request arrived (wall clock) and its id: formatted only when the record is made.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub at: std::time::SystemTime,
    pub id: u64,
}

impl Stamp {
    /// The record's one reading of the wall clock (its `ts`), and its id.
    #[allow(clippy::disallowed_methods)] // the wall clock's one door on the record's path
    pub fn now() -> Self {
        Self {
            at: std::time::SystemTime::now(),
            id: fastrand::u64(..),
        }
    }

    /// The stamp of a request whose `t0` was earlier than now (a kernel receive stamp, a head
    /// read before the service was called): the wall clock now, less the time since `t0`, so
    /// that `ts` is t0's wall time and `ts + e2e_ms` is the end's, however late the task ran.
    pub fn of(t0: Instant) -> Self {
        let now = Self::now();
        let since = crate::rxstamp::now().saturating_duration_since(t0);
        Self {
            at: now.at.checked_sub(since).unwrap_or(now.at),
            id: now.id,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_are_written_with_the_digits_they_have() {
        let d = std::time::Duration::from_nanos(18_874_196);
        assert_eq!(
            serde_json::to_string(&super::duration_ms(d)).unwrap(),
            "18.874196"
        );
        // The old way rounded twice, and wrote 17 digits.
        assert_eq!(
            serde_json::to_string(&(d.as_secs_f64() * 1000.0)).unwrap(),
            "18.874195999999998"
        );
        // Any whole number of nanoseconds (up to a day) is written with at most six decimals,
        // and reads back as itself.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ns = x % 86_400_000_000_000;
            let text =
                serde_json::to_string(&super::duration_ms(std::time::Duration::from_nanos(ns)))
                    .unwrap();
            let decimals = text.split_once('.').map_or(0, |(_, f)| f.len());
            assert!(decimals <= 6, "{ns} ns written as {text}");
            let back: f64 = text.parse().unwrap();
            assert_eq!((back * 1e6).round() as u64, ns, "{text}");
        }
    }
}
