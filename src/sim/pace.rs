//! `sim --pace FIRST,GAP,TOKENS[,BYTES]`: a deterministic mock whose answers follow a fixed
//! schedule, whatever the load: the first token FIRST ms after the request's head arrived, then
//! one every GAP ms, TOKENS in all, each delta BYTES bytes when given. And how late the mock
//! itself ran ([`Lateness`]): each write's instant minus its scheduled instant, so that a
//! client's error and the server's are never mixed up.

use std::fmt;
use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::pacer::Pacer;

/// The most bytes a delta may have (a larger one is a typo, not a benchmark).
pub const MAX_DELTA_BYTES: usize = 1 << 20;

/// A fixed pace: the same for every request, whatever the load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// From the request's head to the first token.
    pub first: Duration,
    /// Between two tokens.
    pub gap: Duration,
    /// Tokens in an answer (fewer when the request's `max_tokens` says so).
    pub tokens: u32,
    /// Each delta's content, in bytes (ASCII); `None`: the sim's words (4 to 9 bytes).
    pub delta_bytes: Option<usize>,
}

impl Pace {
    /// When token `k` (from 0) is due, from the request's arrival.
    pub fn due(&self, k: u32) -> Duration {
        self.first + self.gap * k
    }

    /// How many tokens of an answer of `n` were due by `elapsed` after the arrival.
    pub fn due_by(&self, elapsed: Duration, n: u32) -> u32 {
        if elapsed < self.first {
            return 0;
        }
        if self.gap.is_zero() {
            return n;
        }
        let after = (elapsed - self.first).as_nanos() / self.gap.as_nanos();
        u32::try_from(after.saturating_add(1)).map_or(n, |k| k.min(n))
    }
}

impl fmt::Display for Pace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(f, "{},{},{}", ms(self.first), ms(self.gap), self.tokens)?;
        if let Some(b) = self.delta_bytes {
            write!(f, ",{b}")?;
        }
        Ok(())
    }
}

impl FromStr for Pace {
    type Err = String;

    fn from_str(s: &str) -> Result<Pace, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let usage = || {
            format!("{s:?}: expected FIRST_MS,GAP_MS,TOKENS[,DELTA_BYTES] (e.g. 50,10,100 or 20,20,64,16)")
        };
        if !(3..=4).contains(&parts.len()) {
            return Err(usage());
        }
        let ms = |what: &str, v: &str| -> Result<Duration, String> {
            match v.parse::<f64>() {
                Ok(m) if m.is_finite() && (0.0..=3_600_000.0).contains(&m) => {
                    Ok(Duration::from_secs_f64(m / 1000.0))
                }
                _ => Err(format!(
                    "{s:?}: {what} must be milliseconds from 0 to 3600000, not {v:?}"
                )),
            }
        };
        let first = ms("the delay to the first token", parts[0])?;
        let gap = ms("the gap between tokens", parts[1])?;
        let tokens = match parts[2].parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(format!(
                    "{s:?}: TOKENS must be a whole number ≥ 1, not {:?}",
                    parts[2]
                ))
            }
        };
        let delta_bytes = match parts.get(3) {
            None => None,
            Some(v) => match v.parse::<usize>() {
                Ok(b) if (1..=MAX_DELTA_BYTES).contains(&b) => Some(b),
                _ => {
                    return Err(format!(
                        "{s:?}: DELTA_BYTES must be a whole number from 1 to {MAX_DELTA_BYTES}, not {v:?}"
                    ))
                }
            },
        };
        Ok(Pace {
            first,
            gap,
            tokens,
            delta_bytes,
        })
    }
}

/// A paced sim's shared state: its pace, its clock, and how late it ran.
pub struct Paced {
    pub pace: Pace,
    pub pacer: Pacer,
    pub late: Lateness,
}

impl Paced {
    /// The pacer's thread started.
    pub fn start(pace: Pace) -> std::io::Result<Paced> {
        Ok(Paced {
            pace,
            pacer: Pacer::start()?,
            late: Lateness::default(),
        })
    }
}

/// The upper bounds of the lateness histogram's buckets on `/metrics`, in seconds.
const BUCKETS: [f64; 16] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0,
];

/// How late the mock's paced writes ran, over every stream: a histogram for `/metrics`, exact
/// mean and maximum, and an HDR histogram (nanoseconds, 3 significant digits) for the summary.
pub struct Lateness {
    /// Writes per bucket of `BUCKETS` (not cumulative), and above the last.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
    /// Answers that ended (whole, aborted, or their client gone).
    answers: AtomicU64,
    hdr: Mutex<Option<Histogram<u64>>>,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness {
            buckets: Default::default(),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            answers: AtomicU64::new(0),
            // Auto-resizing: no lateness is out of its range.
            hdr: Mutex::new(Histogram::<u64>::new(3).ok()),
        }
    }
}

/// What [`Lateness`] says at the end of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatenessSummary {
    pub writes: u64,
    pub answers: u64,
    pub mean: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Lateness {
    /// One paced write, `late` after its instant.
    pub fn record(&self, late: Duration) {
        let ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        let s = late.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(BUCKETS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
        self.max_ns.fetch_max(ns, Relaxed);
        if let Ok(mut h) = self.hdr.lock() {
            if let Some(h) = h.as_mut() {
                let _ = h.record(ns);
            }
        }
    }

    /// One answer ended.
    pub fn answered(&self) {
        self.answers.fetch_add(1, Relaxed);
    }

    /// Writes, mean, quantiles and maximum so far.
    pub fn summary(&self) -> LatenessSummary {
        let writes: u64 = self.buckets.iter().map(|b| b.load(Relaxed)).sum();
        let q = |p: f64| -> Duration {
            let ns = self
                .hdr
                .lock()
                .ok()
                .and_then(|h| h.as_ref().map(|h| h.value_at_quantile(p)))
                .unwrap_or(0);
            Duration::from_nanos(ns)
        };
        LatenessSummary {
            writes,
            answers: self.answers.load(Relaxed),
            mean: Duration::from_nanos(self.sum_ns.load(Relaxed) / writes.max(1)),
            p50: q(0.5),
            p99: q(0.99),
            max: Duration::from_nanos(self.max_ns.load(Relaxed)),
        }
    }

    /// The `/metrics` lines: the pace, the histogram of write lateness, its maximum.
    pub fn metrics(&self, pace: &Pace, text: &mut String) {
        let name = "tokentap_sim_pace_write_lateness_seconds";
        let _ = write!(
            text,
            "# HELP tokentap_sim_pace_info The sim's fixed pace (sim --pace): ms to the first token, ms between tokens, tokens, bytes a delta (0: the sim's words).\n# TYPE tokentap_sim_pace_info gauge\ntokentap_sim_pace_info{{first_ms=\"{}\",gap_ms=\"{}\",tokens=\"{}\",delta_bytes=\"{}\"}} 1\n",
            pace.first.as_secs_f64() * 1000.0,
            pace.gap.as_secs_f64() * 1000.0,
            pace.tokens,
            pace.delta_bytes.unwrap_or(0),
        );
        let _ = write!(
            text,
            "# HELP {name} How late the sim wrote each paced write: the instant it handed the write to its connection minus the instant the pace scheduled it.\n# TYPE {name} histogram\n"
        );
        let mut cumulative = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cumulative += self.buckets[i].load(Relaxed);
            let _ = writeln!(text, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        cumulative += self.buckets[BUCKETS.len()].load(Relaxed);
        let sum = self.sum_ns.load(Relaxed) as f64 / 1e9;
        let _ = write!(
            text,
            "{name}_bucket{{le=\"+Inf\"}} {cumulative}\n{name}_sum {sum:?}\n{name}_count {cumulative}\n"
        );
        let max = self.max_ns.load(Relaxed) as f64 / 1e9;
        let _ = write!(
            text,
            "# HELP tokentap_sim_pace_write_lateness_max_seconds The latest any paced write ran, since the sim started.\n# TYPE tokentap_sim_pace_write_lateness_max_seconds gauge\ntokentap_sim_pace_write_lateness_max_seconds {max:?}\n# HELP tokentap_sim_paced_answers_total Paced answers ended (whole, aborted, or their client gone).\n# TYPE tokentap_sim_paced_answers_total counter\ntokentap_sim_paced_answers_total {}\n",
            self.answers.load(Relaxed)
        );
    }
}

impl fmt::Display for LatenessSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        write!(
            f,
            "{} paced writes in {} answer{}; write lateness (the sim's own) mean {:.0} µs, p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
            self.writes,
            self.answers,
            if self.answers == 1 { "" } else { "s" },
            us(self.mean),
            us(self.p50),
            us(self.p99),
            us(self.max)
        )
    }
}

/// One answer's own lateness: carried at its end, in an SSE comment (streams) or a header.
#[derive(Debug, Default, Clone, Copy)]
pub struct StreamLateness {
    writes: u32,
    sum_ns: u64,
    max_ns: u64,
}

impl StreamLateness {
    pub fn record(&mut self, late: Duration) {
        let ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        self.writes += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// `writes=N mean_us=X max_us=Y`: what the SSE comment and the header say.
    pub fn fields(&self) -> String {
        let mean = self.sum_ns as f64 / f64::from(self.writes.max(1)) / 1000.0;
        format!(
            "writes={} mean_us={mean:.1} max_us={:.1}",
            self.writes,
            self.max_ns as f64 / 1000.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pace_parses_as_written_and_refuses_what_it_cannot_be() {
        let p: Pace = "50,10,100".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p,
            Pace {
                first: Duration::from_millis(50),
                gap: Duration::from_millis(10),
                tokens: 100,
                delta_bytes: None
            }
        );
        assert_eq!(p.to_string(), "50,10,100");
        let p: Pace = "20, 20, 64, 16".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.tokens, p.delta_bytes), (64, Some(16)));
        assert_eq!(p.to_string(), "20,20,64,16");
        let p: Pace = "0,0.5,1".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.gap, Duration::from_micros(500));
        for bad in [
            "",
            "50,10",
            "50,10,100,16,1",
            "-1,10,100",
            "50,x,100",
            "50,10,0",
            "50,10,1.5",
            "50,10,100,0",
            "50,10,100,2000000",
            "NaN,1,1",
            "inf,1,1",
        ] {
            assert!(bad.parse::<Pace>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tokens_are_due_on_the_schedule_alone() {
        let p: Pace = "50,10,100".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.due(0), Duration::from_millis(50));
        assert_eq!(p.due(99), Duration::from_millis(1040));
        let ms = Duration::from_millis;
        assert_eq!(p.due_by(ms(49), 100), 0);
        assert_eq!(p.due_by(ms(50), 100), 1);
        assert_eq!(p.due_by(ms(69), 100), 2);
        assert_eq!(p.due_by(ms(70), 100), 3);
        assert_eq!(p.due_by(ms(10_000), 100), 100);
        assert_eq!(p.due_by(ms(10_000), 7), 7);
        let burst: Pace = "5,0,9".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((burst.due_by(ms(4), 9), burst.due_by(ms(5), 9)), (0, 9));
    }

    #[test]
    fn lateness_is_a_prometheus_histogram_and_a_summary() {
        let l = Lateness::default();
        for us in [5, 20, 20, 300, 4000] {
            l.record(Duration::from_micros(us));
        }
        l.answered();
        let pace: Pace = "1,1,5".parse().unwrap_or_else(|e| panic!("{e}"));
        let mut text = String::new();
        l.metrics(&pace, &mut text);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} in {text}"))
                .to_owned()
        };
        let n = "tokentap_sim_pace_write_lateness_seconds";
        assert_eq!(
            line(&format!("{n}_bucket{{le=\"0.00001\"}}")),
            format!("{n}_bucket{{le=\"0.00001\"}} 1")
        );
        assert!(line(&format!("{n}_bucket{{le=\"0.000025\"}}")).ends_with(" 3"));
        assert!(line(&format!("{n}_bucket{{le=\"0.0005\"}}")).ends_with(" 4"));
        assert!(line(&format!("{n}_bucket{{le=\"+Inf\"}}")).ends_with(" 5"));
        assert_eq!(line(&format!("{n}_count")), format!("{n}_count 5"));
        assert_eq!(
            line("tokentap_sim_pace_write_lateness_max_seconds "),
            "tokentap_sim_pace_write_lateness_max_seconds 0.004"
        );
        assert!(text.contains(
            "tokentap_sim_pace_info{first_ms=\"1\",gap_ms=\"1\",tokens=\"5\",delta_bytes=\"0\"} 1"
        ));
        let s = l.summary();
        assert_eq!((s.writes, s.answers), (5, 1));
        assert_eq!(s.max, Duration::from_micros(4000));
        assert_eq!(s.mean, Duration::from_nanos(869_000));
        assert!(s.p50.as_nanos().abs_diff(20_000) < 100, "{s:?}");
        let mut one = StreamLateness::default();
        one.record(Duration::from_micros(10));
        one.record(Duration::from_micros(30));
        assert_eq!(one.fields(), "writes=2 mean_us=20.0 max_us=30.0");
    }
}
