//! The values behind one figure's percentiles: every value while memory allows (exact
//! nearest-rank), or a log-linear histogram once the report's budget of held values is spent.
//!
//! The histogram has HDR's layout (a bucket per power of two, split linearly into 512
//! sub-buckets), taken straight from a value's f64 bits: the exponent and the top 9 bits of the
//! mantissa are the bucket, so recording is a shift and an increment. A percentile read from it
//! is its bucket's midpoint: within 2^-10 (0.098 %) of the exact nearest-rank value. Values
//! under 10^-6 (a nanosecond, for a time in ms) count as 0. Counts, ranks and the maximum stay
//! exact. Histograms merge by adding counts, so the figure does not depend on how the records
//! were split. Counts are 32-bit (a carry map past 2^32) and buckets are counted a thousand at
//! a time, so one histogram's cache lines are touched together rather than one per value across
//! a few hundred histograms. (The `hdrhistogram` crate's integer histograms cost about 50 ns a
//! value here, a third of a record's time: these cost a few.)

use std::collections::BTreeMap;

pub use super::model::{Method, PercentileMethod, SloP95};
use super::Dist;
use crate::stats::{pct, rank};

/// Mantissa bits kept: 2^9 sub-buckets per power of two (2 KiB of counts per power of two
/// a figure spans).
const SUB_BITS: u32 = 9;
/// Below this a value counts as 0 (so a zero does not stretch the histogram down to 10^-308).
const FLOOR: f64 = 1e-6;
const SHIFT: u32 = 52 - SUB_BITS;
/// The bound on a histogram percentile's relative error: half a sub-bucket, 2^-(bits+1).
pub const SKETCH_RELATIVE_ERROR: f64 = 1.0 / (1u64 << (SUB_BITS + 1)) as f64;

impl Method {
    pub fn exact(budget: usize) -> Method {
        Method {
            method: PercentileMethod::Exact,
            relative_error: None,
            exact_values_budget: budget,
        }
    }
    pub fn sketch(budget: usize) -> Method {
        Method {
            method: PercentileMethod::Hdr,
            relative_error: Some(SKETCH_RELATIVE_ERROR),
            exact_values_budget: budget,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Values {
    Exact(Vec<f64>),
    Sketch(Sketch),
    /// Figures computed elsewhere (by ClickHouse, `report --clickhouse`): nothing is added.
    Known(Dist),
}

#[derive(Debug, Clone)]
pub struct Sketch {
    /// Counts of buckets `lo ..= lo + counts.len() - 1`, modulo 2^32: 32 bits keep a report's
    /// few hundred sketches small enough for the cache.
    counts: Vec<u32>,
    /// The 2^32s a bucket's count wrapped past (by bucket), for a bucket of billions.
    carries: BTreeMap<u32, u64>,
    lo: u32,
    zeros: u64,
    n: usize,
    max: f64,
    /// Buckets not yet counted (see [`Sketch::add`]).
    pending: Vec<u32>,
}

/// Buckets a sketch takes before it counts them.
const PENDING: usize = 1024;

/// The bucket of a non-negative finite value: monotonic in the value.
fn bucket(v: f64) -> u32 {
    (v.to_bits() >> SHIFT) as u32
}

impl Sketch {
    fn new() -> Sketch {
        Sketch {
            counts: Vec::new(),
            carries: BTreeMap::new(),
            lo: 0,
            zeros: 0,
            n: 0,
            max: f64::NEG_INFINITY,
            pending: Vec::new(),
        }
    }

    /// NB: a report feeds a few hundred sketches at once, each value of a record to another:
    /// counting each value at once would touch a cold cache line of another sketch every
    /// time. Buckets are kept and counted a thousand at a time, when the lines they share
    /// are touched once.
    #[inline]
    fn add(&mut self, v: f64) {
        self.max = self.max.max(v);
        self.n += 1;
        // NaN never comes here (`push` drops it); -0.0 and negatives count as 0.
        if v < FLOOR {
            self.zeros += 1;
            return;
        }
        if self.pending.len() == PENDING {
            self.flush();
        }
        // Grown as it fills, so a sketch of a few values (a rare key's) stays small.
        self.pending.push(bucket(v));
    }

    fn flush(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        for b in &pending {
            self.count(*b);
        }
        self.pending = pending;
        self.pending.clear();
    }

    /// Add another sketch's counts: the same as having added its values here.
    fn merge(&mut self, other: &Sketch) {
        self.max = self.max.max(other.max);
        self.n += other.n;
        self.zeros += other.zeros;
        for (i, c) in other.counts.iter().enumerate() {
            let b = other.lo + i as u32;
            let carry = other.carries.get(&b).copied().unwrap_or(0);
            self.count_n(b, u64::from(*c) + carry);
        }
        for b in &other.pending {
            self.count(*b);
        }
    }

    /// Count `n` values in bucket `b`.
    fn count_n(&mut self, b: u32, n: u64) {
        if n == 0 {
            return;
        }
        self.count(b);
        let i = (b - self.lo) as usize;
        let total = u64::from(self.counts[i]) + (n - 1);
        self.counts[i] = total as u32;
        let over = total >> 32 << 32;
        if over > 0 {
            *self.carries.entry(b).or_default() += over;
        }
    }

    fn count(&mut self, b: u32) {
        if self.counts.is_empty() {
            self.lo = b;
            self.counts.push(0);
        } else if b < self.lo {
            let grow = (self.lo - b) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, grow));
            self.lo = b;
        }
        let i = (b - self.lo) as usize;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] = self.counts[i].wrapping_add(1);
        if self.counts[i] == 0 {
            *self.carries.entry(b).or_default() += 1 << 32;
        }
    }

    fn len(&self) -> usize {
        self.n
    }

    /// The value at 0-based rank `r` of the recorded values, as its bucket's midpoint (never
    /// above the exact maximum), as [`Sketch::pcts`] reads a percentile.
    fn at_rank(&self, r: usize) -> Option<f64> {
        if r >= self.n {
            return None;
        }
        let r = r as u64;
        let mut seen = self.zeros;
        if seen > r {
            return Some(0.0_f64.min(self.max));
        }
        for (i, c) in self.counts.iter().enumerate() {
            let b = u64::from(self.lo) + i as u64;
            seen += u64::from(*c) + self.carries.get(&(b as u32)).copied().unwrap_or(0);
            if seen > r {
                let (lo, hi) = (f64::from_bits(b << SHIFT), f64::from_bits((b + 1) << SHIFT));
                return Some(((lo + hi) / 2.0).min(self.max));
            }
        }
        None
    }

    /// Nearest-rank values at each `q`, ascending, in one pass: the recorded value at rank
    /// ⌈q·n⌉, as its bucket's midpoint (never above the exact maximum).
    fn pcts<const K: usize>(&self, qs: [f64; K]) -> [Option<f64>; K] {
        let mut out = [None; K];
        if self.n == 0 {
            return out;
        }
        let mut seen = self.zeros;
        let mut k = 0;
        while k < K && seen > rank(self.n, qs[k]) as u64 {
            out[k] = Some(0.0_f64.min(self.max));
            k += 1;
        }
        for (i, c) in self.counts.iter().enumerate() {
            let b = u64::from(self.lo) + i as u64;
            seen += u64::from(*c);
            if !self.carries.is_empty() {
                seen += self.carries.get(&(b as u32)).copied().unwrap_or(0);
            }
            while k < K && seen > rank(self.n, qs[k]) as u64 {
                let (lo, hi) = (f64::from_bits(b << SHIFT), f64::from_bits((b + 1) << SHIFT));
                out[k] = Some(((lo + hi) / 2.0).min(self.max));
                k += 1;
            }
        }
        out
    }
}

impl Values {
    pub fn new(sketch: bool) -> Values {
        if sketch {
            Values::Sketch(Sketch::new())
        } else {
            Values::Exact(Vec::new())
        }
    }

    /// Add a value (non-finite ones are not values); returns how many exact values it holds
    /// more (1 or 0).
    pub fn push(&mut self, v: f64) -> usize {
        if !v.is_finite() {
            return 0;
        }
        match self {
            Values::Exact(xs) => {
                xs.push(v);
                1
            }
            Values::Sketch(s) => {
                s.add(v);
                0
            }
            Values::Known(_) => 0,
        }
    }

    /// Add every value of `other` (both exact, or both sketches, as one report's values are).
    pub fn merge(&mut self, other: &Values) {
        match (&mut *self, other) {
            (Values::Exact(a), Values::Exact(b)) => a.extend_from_slice(b),
            (Values::Sketch(a), Values::Sketch(b)) => a.merge(b),
            (Values::Sketch(a), Values::Exact(b)) => b.iter().for_each(|v| a.add(*v)),
            (Values::Exact(_), Values::Sketch(_)) => {
                self.to_sketch();
                self.merge(other);
            }
            (_, Values::Known(_)) | (Values::Known(_), _) => {}
        }
    }

    pub fn opt(&mut self, v: Option<f64>) -> usize {
        v.map_or(0, |v| self.push(v))
    }

    /// Move every held value into a sketch.
    pub fn to_sketch(&mut self) {
        if let Values::Exact(xs) = self {
            let mut s = Sketch::new();
            for v in xs.iter() {
                s.add(*v);
            }
            *self = Values::Sketch(s);
        }
    }

    pub fn dist(self) -> Dist {
        match self {
            Values::Exact(xs) => super::dist(xs.into_iter()),
            Values::Sketch(mut s) => {
                s.flush();
                let [p50, p95, p99] = s.pcts([0.5, 0.95, 0.99]);
                Dist {
                    n: s.len(),
                    p50,
                    p95,
                    p99,
                    max: (s.len() > 0).then_some(s.max),
                }
            }
            Values::Known(d) => d,
        }
    }

    /// The p95 an SLO judges: these values with `failed` failures ranked above them all
    /// ([`SloP95`]). Known figures (ClickHouse's) have only their own p95, so no failures.
    pub fn slo_p95(&mut self, failed: usize) -> SloP95 {
        match self {
            Values::Exact(xs) => {
                xs.sort_by(f64::total_cmp);
                SloP95::of(xs.len(), failed, |r| xs.get(r).copied())
            }
            Values::Sketch(s) => {
                s.flush();
                SloP95::of(s.len(), failed, |r| s.at_rank(r))
            }
            Values::Known(d) if failed == 0 => SloP95::of(d.n, 0, |_| d.p95),
            Values::Known(_) => SloP95::NotJudged,
        }
    }

    pub fn median(self) -> Option<f64> {
        match self {
            Values::Exact(mut xs) => {
                xs.sort_by(f64::total_cmp);
                pct(&xs, 0.5)
            }
            Values::Sketch(mut s) => {
                s.flush();
                s.pcts([0.5])[0]
            }
            Values::Known(d) => d.p50,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sketch_is_within_its_stated_bound_of_the_exact_percentile() {
        let mut r = 0x1234_5678_u64;
        let mut exact = Values::new(false);
        let mut sketch = Values::new(true);
        for _ in 0..200_000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            // Latency-shaped: 0.05 ms to about 60 s, heavy-tailed.
            let u = (r >> 11) as f64 / (1u64 << 53) as f64;
            let v = 0.05 * (u * 14.0).exp();
            exact.push(v);
            sketch.push(v);
        }
        let (e, s) = (exact.dist(), sketch.dist());
        assert_eq!(e.n, s.n);
        assert_eq!(e.max, s.max, "the maximum stays exact");
        for (a, b) in [(e.p50, s.p50), (e.p95, s.p95), (e.p99, s.p99)] {
            let (a, b) = (a.unwrap_or(0.0), b.unwrap_or(0.0));
            let bound = a * SKETCH_RELATIVE_ERROR;
            assert!((a - b).abs() <= bound, "exact {a} sketch {b} bound {bound}");
        }
    }

    #[test]
    fn switching_keeps_every_value() {
        let mut v = Values::new(false);
        for i in 1..=100 {
            v.push(i as f64);
        }
        v.push(f64::NAN);
        v.to_sketch();
        v.push(0.0);
        let d = v.dist();
        assert_eq!((d.n, d.max), (101, Some(100.0)));
        for (got, want) in [(d.p50, 50.0), (d.p99, 99.0)] {
            let got = got.unwrap_or(0.0);
            assert!(
                (got - want).abs() <= want * SKETCH_RELATIVE_ERROR,
                "{got} vs {want}"
            );
        }
        let mut zeros = Values::new(true);
        for _ in 0..10 {
            zeros.push(0.0);
        }
        zeros.push(-0.0);
        zeros.push(7.0);
        let d = zeros.dist();
        assert_eq!((d.n, d.p50, d.max), (12, Some(0.0), Some(7.0)));
    }
}

#[cfg(test)]
mod wrap {
    use super::*;

    #[test]
    fn a_bucket_counts_past_four_billion() {
        let mut s = Sketch::new();
        s.add(5.0);
        s.flush();
        // As if 2^32 + 1 values of 5 had come: the count wraps and the carry holds 2^32.
        s.counts[0] = u32::MAX;
        s.n = u32::MAX as usize;
        s.add(5.0);
        s.add(5.0);
        s.flush();
        assert_eq!(
            (s.counts[0], s.carries.get(&bucket(5.0))),
            (1, Some(&(1 << 32)))
        );
        // Two larger values: at this count, every percentile is still 5's bucket.
        s.add(9.0);
        s.add(9.0);
        let d = Values::Sketch(s).dist();
        assert_eq!(d.n, (1usize << 32) + 3);
        for p in [d.p50, d.p99] {
            let p = p.unwrap_or(0.0);
            assert!((p - 5.0).abs() <= 5.0 * SKETCH_RELATIVE_ERROR, "{p}");
        }
        assert_eq!(d.max, Some(9.0));
    }
}
