//! The engine-side instants of one simulated request, and the per-request timings vLLM reports
//! from them with `--enable-per-request-metrics` (its usage chunk's `metrics`).

use serde_json::Value;
use tokio::time::Instant;

/// The engine-side instants of one request, reported as vLLM does with
/// `--enable-per-request-metrics` (`PerRequestMetrics`, milliseconds, unknown fields left out).
pub(super) struct EngineTimes {
    queued: Instant,
    scheduled: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl EngineTimes {
    pub(super) fn new(queued: Instant) -> Self {
        EngineTimes {
            queued,
            scheduled: None,
            first: None,
            last: None,
        }
    }

    pub(super) fn token(&mut self, scheduled: Option<Instant>, now: Instant) {
        if scheduled.is_some() {
            self.scheduled = scheduled;
        }
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    pub(super) fn metrics(&self, tokens: u32) -> Value {
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1000.0;
        let mut m = serde_json::Map::new();
        if let (Some(s), Some(f)) = (self.scheduled, self.first) {
            m.insert("time_to_first_token_ms".into(), ms(s, f).into());
        }
        if let (Some(f), Some(l)) = (self.first, self.last) {
            m.insert("generation_time_ms".into(), ms(f, l).into());
            if tokens > 1 {
                m.insert(
                    "mean_itl_ms".into(),
                    (ms(f, l) / f64::from(tokens - 1)).into(),
                );
            }
        }
        if let Some(s) = self.scheduled {
            m.insert("queue_time_ms".into(), ms(self.queued, s).into());
            if let Some(l) = self.last.filter(|l| *l > s) {
                m.insert(
                    "tokens_per_second".into(),
                    (f64::from(tokens) / l.duration_since(s).as_secs_f64()).into(),
                );
            }
        }
        Value::Object(m)
    }
}
