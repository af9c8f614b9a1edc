//! One cell being read: its counts and the values behind its percentiles.

use std::time::SystemTime;

use super::values::Values;
use super::SplitCell;

#[derive(Debug)]
pub(super) struct CellAcc {
    pub requests: usize,
    /// Service failures plus throttled requests.
    pub errors: usize,
    pub throttled: usize,
    /// Streams that came buffered (their TPOT is not a decode speed).
    pub buffered: usize,
    pub good: usize,
    pub start: Option<SystemTime>,
    pub end: Option<SystemTime>,
    pub out_tokens: u64,
    /// Input, output and reasoning tokens of every record (`by_bucket` pools them).
    pub tokens: [u64; 3],
    pub ttft: Values,
    /// Time to first output: for `by_bucket`, which pools the cells of a bucket.
    pub ttfo: Values,
    pub tpot: Values,
    pub e2e: Values,
    pub tps: Values,
    pub input: Values,
    pub output: Values,
    pub split_n: usize,
    pub split: [Values; 5],
    /// Open-loop cells: the first and last request sent (their `ts`), the client queue and
    /// lag times.
    pub sent: Option<(SystemTime, SystemTime)>,
    /// The earliest and latest `scheduled_ms`, and how many records have one.
    pub scheduled: Option<(f64, f64, usize)>,
    pub queue: Values,
    pub lag: Values,
    /// A closed-loop cell's requests, for its plateau (held in sketch mode too, so the
    /// figures do not depend on the budget).
    pub spans: Vec<super::steady::Span>,
}

impl CellAcc {
    pub(super) fn new(sketch: bool) -> CellAcc {
        let v = || Values::new(sketch);
        CellAcc {
            requests: 0,
            errors: 0,
            throttled: 0,
            buffered: 0,
            good: 0,
            start: None,
            end: None,
            out_tokens: 0,
            tokens: [0; 3],
            ttft: v(),
            ttfo: v(),
            tpot: v(),
            e2e: v(),
            tps: v(),
            input: v(),
            output: v(),
            split_n: 0,
            split: [v(), v(), v(), v(), v()],
            sent: None,
            scheduled: None,
            queue: v(),
            lag: v(),
            spans: Vec::new(),
        }
    }

    pub(super) fn values(&mut self) -> impl Iterator<Item = &mut Values> {
        [
            &mut self.ttft,
            &mut self.ttfo,
            &mut self.tpot,
            &mut self.e2e,
            &mut self.tps,
            &mut self.input,
            &mut self.output,
            &mut self.queue,
            &mut self.lag,
        ]
        .into_iter()
        .chain(self.split.iter_mut())
    }

    /// Medians of the records' `ttft_split` parts; null when no served record has one.
    pub fn split_cell(&mut self) -> Option<SplitCell> {
        if self.split_n == 0 {
            return None;
        }
        let med = |v: &mut Values| std::mem::replace(v, Values::new(false)).median();
        let [a, b, c, d, e] = &mut self.split;
        let c = SplitCell {
            n: self.split_n,
            proxy_ms: med(a),
            upstream_headers_ms: med(b),
            engine_queue_ms: med(c),
            engine_prefill_ms: med(d),
            outside_engine_ms: med(e),
            missing: None,
        };
        let mut missing = Vec::new();
        if c.proxy_ms.is_none() {
            missing.push("proxy_ms: client-side records (tokentap's own share is in its records)");
        }
        if c.engine_queue_ms.is_none() || c.engine_prefill_ms.is_none() {
            missing.push("engine parts: no per-request timings (vLLM --enable-per-request-metrics, with usage in the stream)");
        }
        Some(SplitCell {
            missing: (!missing.is_empty()).then(|| missing.join("; ")),
            ..c
        })
    }
}
