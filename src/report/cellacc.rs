//! One cell being read: its counts and the values behind its percentiles.

use std::time::{Duration, SystemTime};

use super::model::{SloP95, SplitCell};
use super::row::{Class, Row};
use super::steady::Span;
use super::values::Values;
use crate::meter::delivery::Verdict::Buffered;

#[derive(Debug)]
pub(super) struct CellAcc {
    pub requests: usize,
    /// Service failures plus throttled requests.
    pub errors: usize,
    pub throttled: usize,
    /// Generations the client cancelled: never held against the service.
    pub cancelled: usize,
    /// Streams the service failed or throttled: each a miss for every latency SLO.
    pub failed_streams: usize,
    /// ClickHouse's SLO p95s (TTFT, TPOT), computed there with the failures ranked in.
    pub known_slo: Option<[SloP95; 2]>,
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
            cancelled: 0,
            failed_streams: 0,
            known_slo: None,
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
        Some(SplitCell {
            n: self.split_n,
            proxy_ms: med(a),
            upstream_headers_ms: med(b),
            engine_queue_ms: med(c),
            engine_prefill_ms: med(d),
            outside_engine_ms: med(e),
            // The sentence is the answers' (`answers::split_missing`).
            missing: None,
        })
    }
}

impl CellAcc {
    /// A generation of this cell: its counts, and its values when it was served. Returns the
    /// values newly held.
    #[inline]
    pub(super) fn add(
        &mut self,
        r: &Row<'_>,
        ts: Option<SystemTime>,
        kind: Kind,
        class: Class,
        goodput: (f64, f64),
    ) -> usize {
        let mut held = 0;
        self.requests += 1;
        self.errors += usize::from(r.is_error());
        self.throttled += usize::from(class == Class::Throttled);
        self.cancelled += usize::from(class == Class::Cancelled);
        let failed_stream = r.stream && matches!(class, Class::Failed | Class::Throttled);
        self.failed_streams += usize::from(failed_stream);
        self.buffered += usize::from(r.delivery.is_some_and(|d| d.verdict == Buffered));
        for (sum, t) in
            self.tokens
                .iter_mut()
                .zip([r.input_tokens, r.output_tokens, r.reasoning_tokens])
        {
            *sum += t.unwrap_or(0);
        }
        if kind == Kind::Rate {
            if let Some(t) = ts {
                self.sent = Some(self.sent.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
            }
            if let Some(s) = r.scheduled_ms.filter(|s| s.is_finite()) {
                self.scheduled = Some(
                    self.scheduled
                        .map_or((s, s, 1), |(a, b, n)| (a.min(s), b.max(s), n + 1)),
                );
            }
            held += self.queue.opt(r.client_queue_ms) + self.lag.opt(r.client_lag_ms);
        }
        if let Some(t) = ts {
            self.start = Some(self.start.map_or(t, |s| s.min(t)));
            let end = t + Duration::from_secs_f64(r.e2e_ms.max(0.0) / 1000.0);
            self.end = Some(self.end.map_or(end, |e| e.max(end)));
        }
        let good = r.ok()
            && r.ttft_ms.is_none_or(|t| t <= goodput.0)
            && r.tok_s().is_none_or(|s| s >= goodput.1);
        if kind == Kind::Concurrency {
            if let Some(t) = ts.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) {
                let start_ms = t.as_secs_f64() * 1000.0;
                self.spans.push(Span {
                    start_ms,
                    end_ms: start_ms + r.e2e_ms.max(0.0),
                    ok: r.ok(),
                    failed_stream,
                    good,
                    ttft: r.ttft_ms,
                    tpot: r.tpot_ms,
                    tps: r.tok_s(),
                    e2e: r.e2e_ms,
                });
                held += 8;
            }
        }
        if r.ok() {
            held += self.ttft.opt(r.ttft_ms)
                + self.ttfo.opt(r.ttfo_ms)
                + self.tpot.opt(r.tpot_ms)
                + self.tps.opt(r.tok_s())
                + self.e2e.push(r.e2e_ms)
                + self.input.opt(r.input_tokens.map(|v| v as f64))
                + self.output.opt(r.output_tokens.map(|v| v as f64));
            self.out_tokens += r.output_tokens.unwrap_or(0);
            if let Some(s) = &r.ttft_split {
                self.split_n += 1;
                let parts = [
                    s.proxy_ms,
                    s.upstream_headers_ms,
                    s.engine_queue_ms,
                    s.engine_prefill_ms,
                    s.outside_engine_ms,
                ];
                for (v, p) in self.split.iter_mut().zip(parts) {
                    held += v.opt(p);
                }
            }
            self.good += usize::from(good);
        }
        held
    }
}

/// One cell as the report's finishing step receives it.
pub(super) struct CellIn {
    pub bucket: String,
    pub arm: Option<String>,
    pub level: u64,
    pub label: String,
    /// An open-loop cell's offered rate (requests a second); its `level` is that in
    /// thousandths.
    pub rate: Option<f64>,
    pub kind: Kind,
    pub acc: CellAcc,
}

/// What a cell's level is. The three are never one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Kind {
    /// A load generator's concurrency.
    Concurrency,
    /// Live traffic's in-flight count at admission, binned 1, 2, 3-4, 5-8, …
    Live,
    /// A load generator's offered arrival rate, in thousandths of a request a second.
    Rate,
}

impl Kind {
    pub(super) fn of(rate: bool, live: bool) -> Kind {
        match (rate, live) {
            (true, _) => Kind::Rate,
            (false, true) => Kind::Live,
            (false, false) => Kind::Concurrency,
        }
    }
}
