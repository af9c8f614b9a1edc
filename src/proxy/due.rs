//! A request's due times: when its response head must have come, and when it must be over
//! (`[timeouts]`). Set by the `Deadlines` stage (`deadlines`), and for the experiment's copy by
//! `copy`; the upstream call (`send`) and the response body (`timeout::TimeoutBody`) keep them.

use std::time::Duration;

use tokio::time::Instant;

/// When a request must have its response head, and be over.
#[derive(Debug, Clone, Copy)]
pub struct Due {
    /// How long the upstream may take to send its response head once asked.
    pub first_byte: Duration,
    /// `t0 + timeouts.total_ms`, when set.
    pub total: Option<Instant>,
}

impl Due {
    /// Never (until the `Deadlines` stage sets them).
    pub const UNBOUNDED: Due = Due {
        first_byte: Duration::MAX,
        total: None,
    };

    pub fn new(t0: Instant, t: &crate::config::Timeouts) -> Due {
        Due {
            first_byte: t.first_byte,
            total: (!t.total.is_zero()).then(|| t0 + t.total),
        }
    }

    /// How long to wait for the response head from now.
    pub fn head_wait(&self) -> Duration {
        match self.total {
            Some(d) => self
                .first_byte
                .min(d.saturating_duration_since(crate::rxstamp::now())),
            None => self.first_byte,
        }
    }
}
