//! Per API shape rows, per bucket rows pooled over concurrency levels, and TTFT split by
//! prefix-cache hit vs miss.

use std::collections::BTreeMap;

pub use super::model::{CacheBucket, CacheSplit, ShapeRow, TurnRow};
use super::row::Row;
use super::values::Values;
use super::Dist;

/// Median of misses − median of hits.
pub fn saved(hit: &Dist, miss: &Dist) -> Option<f64> {
    Some(miss.p50? - hit.p50?)
}

/// One turn being read.
#[derive(Debug)]
pub struct TurnAcc {
    requests: usize,
    errors: usize,
    pub ttft: Values,
    input: Values,
    known: usize,
    hits: usize,
    cached: u64,
    prompt: u64,
}

impl TurnAcc {
    pub fn new(sketch: bool) -> TurnAcc {
        TurnAcc {
            requests: 0,
            errors: 0,
            ttft: Values::new(sketch),
            input: Values::new(sketch),
            known: 0,
            hits: 0,
            cached: 0,
            prompt: 0,
        }
    }

    /// Add a client-facing record of this turn; returns the exact values it added.
    pub fn add(&mut self, r: &Row<'_>) -> usize {
        self.requests += 1;
        self.errors += usize::from(r.is_error());
        if !r.ok() {
            return 0;
        }
        if let Some(c) = r.cached_tokens {
            self.known += 1;
            self.hits += usize::from(c > 0);
            self.cached += c;
            self.prompt += r.input_tokens.unwrap_or(0);
        }
        self.ttft.opt(r.ttft_ms) + self.input.opt(r.input_tokens.map(|v| v as f64))
    }

    pub fn finish(self) -> TurnRow {
        TurnRow {
            requests: self.requests,
            error_rate: self.errors as f64 / self.requests.max(1) as f64,
            ttft_ms: self.ttft.dist(),
            input_tokens_median: self.input.median(),
            cache_hit_rate: (self.known > 0).then(|| self.hits as f64 / self.known as f64),
            cached_token_share: (self.prompt > 0).then(|| self.cached as f64 / self.prompt as f64),
        }
    }
}

/// One row being read: what `ShapeRow` needs, record by record.
#[derive(Debug)]
pub struct ShapeAcc {
    requests: usize,
    errors: usize,
    ttft: Values,
    ttfo: Values,
    tpot: Values,
    e2e: Values,
    input_tokens: u64,
    output_tokens: u64,
    reasoning_tokens: u64,
}

impl ShapeAcc {
    pub fn new(sketch: bool) -> ShapeAcc {
        ShapeAcc {
            requests: 0,
            errors: 0,
            ttft: Values::new(sketch),
            ttfo: Values::new(sketch),
            tpot: Values::new(sketch),
            e2e: Values::new(sketch),
            input_tokens: 0,
            output_tokens: 0,
            reasoning_tokens: 0,
        }
    }

    /// Add a client-facing record; returns the exact values it added.
    pub fn add(&mut self, r: &Row<'_>) -> usize {
        self.requests += 1;
        self.errors += usize::from(r.is_error());
        self.input_tokens += r.input_tokens.unwrap_or(0);
        self.output_tokens += r.output_tokens.unwrap_or(0);
        self.reasoning_tokens += r.reasoning_tokens.unwrap_or(0);
        if !r.ok() {
            return 0;
        }
        self.ttft.opt(r.ttft_ms)
            + self.ttfo.opt(r.ttfo_ms)
            + self.tpot.opt(r.tpot_ms)
            + self.e2e.push(r.e2e_ms)
    }

    /// Add a group of records read elsewhere (a cell): counts, token sums (input, output,
    /// reasoning) and the TTFT, TTFO, TPOT and E2E values.
    pub fn absorb(&mut self, requests: usize, errors: usize, tokens: [u64; 3], v: [&Values; 4]) {
        self.requests += requests;
        self.errors += errors;
        self.input_tokens += tokens[0];
        self.output_tokens += tokens[1];
        self.reasoning_tokens += tokens[2];
        for (mine, theirs) in self.values().into_iter().zip(v) {
            mine.merge(theirs);
        }
    }

    pub fn values(&mut self) -> [&mut Values; 4] {
        [
            &mut self.ttft,
            &mut self.ttfo,
            &mut self.tpot,
            &mut self.e2e,
        ]
    }

    pub fn finish(self) -> ShapeRow {
        ShapeRow {
            requests: self.requests,
            error_rate: self.errors as f64 / self.requests.max(1) as f64,
            ttft_ms: self.ttft.dist(),
            ttfo_ms: self.ttfo.dist(),
            tpot_ms: self.tpot.dist(),
            e2e_ms: self.e2e.dist(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            reasoning_tokens: self.reasoning_tokens,
        }
    }
}

#[derive(Debug)]
pub struct HitMiss {
    hit: Values,
    miss: Values,
}

impl HitMiss {
    fn new(sketch: bool) -> HitMiss {
        HitMiss {
            hit: Values::new(sketch),
            miss: Values::new(sketch),
        }
    }
}

/// The prefix-cache split being read.
#[derive(Debug, Default)]
pub struct CacheAcc {
    known: usize,
    all: Option<HitMiss>,
    /// By bucket name id (the report's own numbering).
    by_bucket: BTreeMap<u32, HitMiss>,
    cached: u64,
    prompt: u64,
}

impl CacheAcc {
    /// Add a client-facing record (served ones whose usage says `cached_tokens` count).
    pub fn add(&mut self, r: &Row<'_>, bucket: u32, sketch: bool) -> usize {
        let Some(c) = r.cached_tokens.filter(|_| r.ok()) else {
            return 0;
        };
        self.known += 1;
        self.cached += c;
        self.prompt += r.input_tokens.unwrap_or(0);
        let all = self.all.get_or_insert_with(|| HitMiss::new(sketch));
        let b = self
            .by_bucket
            .entry(bucket)
            .or_insert_with(|| HitMiss::new(sketch));
        if c > 0 {
            all.hit.opt(r.ttft_ms) + b.hit.opt(r.ttft_ms)
        } else {
            all.miss.opt(r.ttft_ms) + b.miss.opt(r.ttft_ms)
        }
    }

    pub fn values(&mut self) -> impl Iterator<Item = &mut Values> {
        self.all
            .iter_mut()
            .chain(self.by_bucket.values_mut())
            .flat_map(|h| [&mut h.hit, &mut h.miss])
    }

    /// `name` gives a bucket id's name.
    pub fn finish(self, name: impl Fn(u32) -> String) -> Option<CacheSplit> {
        let all = self.all.filter(|_| self.known > 0)?;
        let (hit, miss) = (all.hit.dist(), all.miss.dist());
        Some(CacheSplit {
            ttft_saved_ms: saved(&hit, &miss),
            hit,
            miss,
            cached_token_share: (self.prompt > 0).then(|| self.cached as f64 / self.prompt as f64),
            by_bucket: self
                .by_bucket
                .into_iter()
                .map(|(b, h)| {
                    (name(b), {
                        let (hit, miss) = (h.hit.dist(), h.miss.dist());
                        CacheBucket {
                            ttft_saved_ms: saved(&hit, &miss),
                            hit,
                            miss,
                        }
                    })
                })
                .collect(),
        })
    }
}
