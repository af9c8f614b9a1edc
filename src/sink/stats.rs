//! Live percentiles of one route for `/stats`, from HDR histograms (microseconds, 3 significant
//! digits) fed by finished requests. Cumulative since start; the JSONL log is the source of truth.
//! Each route owns one (`proxy::Route`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::meter::{Outcome, RequestRecord};

struct Hists {
    ttft: Histogram<u64>,
    tpot: Histogram<u64>,
    itl: Histogram<u64>,
    e2e: Histogram<u64>,
    outcomes: BTreeMap<&'static str, u64>,
    input_tokens: u64,
    output_tokens: u64,
    tap: Option<TapHists>,
}

/// A gateway tap's live figures on one of its routes.
struct TapHists {
    results: BTreeMap<&'static str, u64>,
    admission: Histogram<u64>,
    relay: Histogram<u64>,
    total: Histogram<u64>,
}

fn hist() -> Histogram<u64> {
    // Auto-resizing, 3 significant digits: values are never dropped for being out of range.
    match Histogram::<u64>::new(3) {
        Ok(h) => h,
        Err(e) => unreachable!("3 significant digits is a valid precision: {e}"),
    }
}

/// The live statistics of one route.
pub struct LiveStats(Mutex<Hists>);

impl Default for LiveStats {
    fn default() -> Self {
        LiveStats(Mutex::new(Hists {
            ttft: hist(),
            tpot: hist(),
            itl: hist(),
            e2e: hist(),
            outcomes: BTreeMap::new(),
            input_tokens: 0,
            output_tokens: 0,
            tap: None,
        }))
    }
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct RouteStats {
    pub requests: u64,
    pub outcomes: BTreeMap<String, u64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub ttft_ms: Option<Summary>,
    pub tpot_ms: Option<Summary>,
    pub itl_ms: Option<Summary>,
    pub e2e_ms: Option<Summary>,
    /// On a gateway tap's routes: joins, and (gateway route) the hop's parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_tap: Option<TapStats>,
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct TapStats {
    /// `joined`, or why not (`no_match`, `ambiguous`, …) → requests.
    pub results: BTreeMap<String, u64>,
    pub admission_ms: Option<Summary>,
    pub relay_ms: Option<Summary>,
    pub total_ms: Option<Summary>,
}

fn summary(h: &Histogram<u64>) -> Option<Summary> {
    if h.is_empty() {
        return None;
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Some(Summary {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.50)),
        p95: ms(h.value_at_quantile(0.95)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
    })
}

impl LiveStats {
    pub fn observe(&self, rec: &RequestRecord, itl_us: &[u32]) {
        let Ok(mut h) = self.0.lock() else {
            return;
        };
        let us = |ms: f64| (ms * 1000.0).round().max(1.0) as u64;
        // Latency distributions describe served requests, not refusals.
        if rec.outcome != Outcome::Rejected {
            if let Some(v) = rec.ttft_ms {
                let _ = h.ttft.record(us(v));
            }
            if let Some(v) = rec.tpot_ms {
                let _ = h.tpot.record(us(v));
            }
            let _ = h.e2e.record(us(rec.e2e_ms));
            for gap in itl_us {
                let _ = h.itl.record(u64::from(*gap).max(1));
            }
        }
        if let Some(g) = &rec.gateway_tap {
            let t = h.tap.get_or_insert_with(|| TapHists {
                results: BTreeMap::new(),
                admission: hist(),
                relay: hist(),
                total: hist(),
            });
            *t.results
                .entry(g.unjoined.map_or("joined", |u| u.as_str()))
                .or_default() += 1;
            for (hist, v) in [
                (&mut t.admission, g.admission_ms),
                (&mut t.relay, g.relay_ms),
                (&mut t.total, g.ttft_ms),
            ] {
                if let Some(ms) = v {
                    let _ = hist.record(us(ms.max(0.0)));
                }
            }
        }
        *h.outcomes.entry(rec.outcome.as_str()).or_default() += 1;
        h.input_tokens += rec.input_tokens.unwrap_or(0);
        h.output_tokens += rec.output_tokens.unwrap_or(0);
    }

    /// A snapshot; `None` only if a writer panicked while holding the lock.
    pub fn snapshot(&self) -> Option<RouteStats> {
        let h = self.0.lock().ok()?;
        Some(RouteStats {
            requests: h.outcomes.values().sum(),
            outcomes: h
                .outcomes
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            input_tokens: h.input_tokens,
            output_tokens: h.output_tokens,
            ttft_ms: summary(&h.ttft),
            tpot_ms: summary(&h.tpot),
            itl_ms: summary(&h.itl),
            e2e_ms: summary(&h.e2e),
            gateway_tap: h.tap.as_ref().map(|t| TapStats {
                results: t
                    .results
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), *v))
                    .collect(),
                admission_ms: summary(&t.admission),
                relay_ms: summary(&t.relay),
                total_ms: summary(&t.total),
            }),
        })
    }
}
