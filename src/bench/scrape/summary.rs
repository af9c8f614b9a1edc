//! A cell's scrapes summarised for `run.json`: counters become their increase and rate over
//! the cell (resets handled), gauges their mean, peak and p95; the known metrics become the
//! cell's telemetry (`report::engine::Telemetry`).

use serde::Serialize;

use super::names::{Kind, Role};
use super::{Collected, Round};
use crate::report::engine::{Gauge, Telemetry};

/// A metric over a cell.
#[derive(Debug, Clone, Serialize)]
pub struct MetricSummary {
    pub endpoint: String,
    pub metric: String,
    pub kind: Kind,
    pub samples: usize,
    /// Gauge: mean, peak, p95.
    #[serde(skip_serializing_if = "Option::is_none", flatten)]
    pub gauge: Option<Gauge>,
    /// Counter: its increase over the cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub increase: Option<f64>,
    /// Counter: its increase ÷ the time between the cell's first and last scrape, a second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
}

/// `cells[].scrape` in `run.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CellScrape {
    /// The cell's first and last scrape, ms since the run began.
    pub from_ms: f64,
    pub to_ms: f64,
    pub scrapes: usize,
    pub failures: usize,
    pub telemetry: Telemetry,
    pub metrics: Vec<MetricSummary>,
}

/// Increase of a counter over successive values; a fall is a reset (the new value counts).
fn increase(v: &[f64]) -> f64 {
    v.windows(2)
        .map(|w| if w[1] >= w[0] { w[1] - w[0] } else { w[1] })
        .sum()
}

/// What the cell's figures are made from.
pub struct CellFacts {
    pub requests: usize,
    pub output_tokens: u64,
    pub wall_s: f64,
    /// Peak bytes/s and FLOP/s of one GPU, when known.
    pub peak_bandwidth: Option<f64>,
    pub peak_flops: Option<f64>,
}

/// The cell's summary: the rounds from `from_ms` to `to_ms` (both ends included).
pub fn cell(c: &Collected, from_ms: f64, to_ms: f64, f: &CellFacts) -> CellScrape {
    let rounds: Vec<&Round> = c
        .rounds
        .iter()
        .filter(|r| r.t_ms >= from_ms && r.t_ms <= to_ms)
        .collect();
    let span_s = match (rounds.first(), rounds.last()) {
        (Some(a), Some(b)) => (b.t_ms - a.t_ms) / 1000.0,
        _ => 0.0,
    };
    let role = |r: Role| -> Vec<f64> {
        rounds
            .iter()
            .filter_map(|x| x.roles.get(&r).copied())
            .collect()
    };
    let inc = |r: Role| -> Option<f64> {
        let v = role(r);
        (v.len() >= 2).then(|| increase(&v))
    };
    let rate = |r: Role| inc(r).filter(|_| span_s > 0.0).map(|d| d / span_s);
    // The rounds where a request waited: what the cache and the batch were while it did.
    let waited = |r: Role| -> Vec<f64> {
        rounds
            .iter()
            .filter(|x| x.roles.get(&Role::Waiting).is_some_and(|w| *w >= 1.0))
            .filter_map(|x| x.roles.get(&r).copied())
            .collect()
    };
    let mut t = Telemetry {
        kv_cache_usage: Gauge::of(&role(Role::KvUsage)),
        kv_cache_tokens: Gauge::of(&role(Role::KvCapacity)).map(|g| g.mean),
        kv_cache_usage_waiting: Gauge::of(&waited(Role::KvUsage)),
        running: Gauge::of(&role(Role::Running)),
        running_waiting: Gauge::of(&waited(Role::Running)),
        waiting: Gauge::of(&role(Role::Waiting)),
        preemptions: inc(Role::Preemptions),
        admission_rejections: inc(Role::AdmissionRejections),
        flops_per_s_per_gpu: rate(Role::FlopsPerGpu),
        read_bytes_per_s_per_gpu: rate(Role::ReadBytesPerGpu),
        write_bytes_per_s_per_gpu: rate(Role::WriteBytesPerGpu),
        gpu_util_pct: Gauge::of(&role(Role::GpuUtil)),
        dram_active: Gauge::of(&role(Role::DramActive)),
        power_w: Gauge::of(&role(Role::Power)),
        fb_used_mib: Gauge::of(&role(Role::FbUsed)),
        ..Default::default()
    };
    t.preemptions_per_request = t
        .preemptions
        .filter(|_| f.requests > 0)
        .map(|p| p / f.requests as f64);
    t.prefix_cache_hit_rate = match (inc(Role::PrefixHits), inc(Role::PrefixQueries)) {
        (Some(h), Some(q)) if q > 0.0 => Some(h / q),
        _ => Gauge::of(&role(Role::PrefixHitRate)).map(|g| g.mean),
    };
    t.j_per_token = t
        .power_w
        .filter(|_| f.output_tokens > 0)
        .map(|p| p.mean * f.wall_s / f.output_tokens as f64);
    t.mbu = ratio(t.read_bytes_per_s_per_gpu, f.peak_bandwidth);
    t.mfu = ratio(t.flops_per_s_per_gpu, f.peak_flops);

    let mut metrics: std::collections::BTreeMap<&(usize, String), (Kind, Vec<f64>)> =
        std::collections::BTreeMap::new();
    for r in &rounds {
        for (key, (kind, v)) in &r.metrics {
            metrics.entry(key).or_insert((*kind, Vec::new())).1.push(*v);
        }
    }
    let metrics = metrics
        .into_iter()
        .map(|((e, name), (kind, v))| {
            let counter = kind == Kind::Counter && v.len() >= 2;
            MetricSummary {
                endpoint: c.endpoints.get(*e).cloned().unwrap_or_default(),
                metric: name.clone(),
                kind,
                samples: v.len(),
                gauge: (kind == Kind::Gauge).then(|| Gauge::of(&v)).flatten(),
                increase: counter.then(|| increase(&v)),
                rate_per_s: (counter && span_s > 0.0).then(|| increase(&v) / span_s),
            }
        })
        .collect();
    CellScrape {
        from_ms,
        to_ms,
        scrapes: rounds.len(),
        failures: rounds.iter().map(|r| r.failed).sum(),
        telemetry: t,
        metrics,
    }
}

fn ratio(a: Option<f64>, peak: Option<f64>) -> Option<f64> {
    match (a, peak) {
        (Some(a), Some(p)) if p > 0.0 => Some(a / p),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(t_ms: f64, kv: f64, preempt: f64, reads: f64) -> Round {
        let mut r = Round {
            t_ms,
            ..Default::default()
        };
        r.roles.insert(Role::KvUsage, kv);
        r.roles.insert(Role::Preemptions, preempt);
        r.roles.insert(Role::ReadBytesPerGpu, reads);
        r.metrics
            .insert((0, "vllm:kv_cache_usage_perc".into()), (Kind::Gauge, kv));
        r.metrics.insert(
            (0, "vllm:num_preemptions_total".into()),
            (Kind::Counter, preempt),
        );
        r
    }

    #[test]
    fn counters_become_rates_gauges_mean_peak_p95() {
        let c = Collected {
            endpoints: vec!["http://e/metrics".into()],
            rounds: vec![
                round(0.0, 0.9, 100.0, 0.0),
                round(1000.0, 0.2, 103.0, 1e9),
                round(2000.0, 0.4, 1.0, 3e9), // a restart: the counter starts over
                round(3000.0, 1.0, 2.0, 4e9),
                round(9000.0, 0.0, 50.0, 9e9),
            ],
            ..Default::default()
        };
        let f = CellFacts {
            requests: 4,
            output_tokens: 100,
            wall_s: 2.0,
            peak_bandwidth: Some(2e9),
            peak_flops: None,
        };
        let s = cell(&c, 1000.0, 3000.0, &f);
        assert_eq!(s.scrapes, 3);
        let kv = s.telemetry.kv_cache_usage.unwrap();
        assert!((kv.mean - 0.5333).abs() < 1e-3 && kv.peak == 1.0 && kv.p95 == 1.0);
        // 103 → 1 (reset: +1) → 2 (+1)
        assert_eq!(s.telemetry.preemptions, Some(2.0));
        assert_eq!(s.telemetry.preemptions_per_request, Some(0.5));
        assert_eq!(s.telemetry.read_bytes_per_s_per_gpu, Some(1.5e9));
        assert_eq!(s.telemetry.mbu, Some(0.75));
        let m = &s.metrics[1];
        assert_eq!(
            (m.metric.as_str(), m.increase, m.rate_per_s),
            ("vllm:num_preemptions_total", Some(2.0), Some(1.0))
        );
        assert!(s.telemetry.power_w.is_none() && s.telemetry.j_per_token.is_none());
        // Nothing waited, no cache size scraped: no figures of either.
        assert!(s.telemetry.kv_cache_usage_waiting.is_none());
        assert!(s.telemetry.kv_cache_tokens.is_none());
    }

    #[test]
    fn the_cache_and_the_batch_while_requests_waited() {
        let mut rounds = Vec::new();
        for (i, (kv, running, waiting)) in [(0.2, 1.0, 0.0), (0.8, 3.0, 2.0), (0.7, 3.0, 1.0)]
            .into_iter()
            .enumerate()
        {
            let mut r = Round {
                t_ms: i as f64 * 1000.0,
                ..Default::default()
            };
            r.roles.insert(Role::KvUsage, kv);
            r.roles.insert(Role::Running, running);
            r.roles.insert(Role::Waiting, waiting);
            r.roles.insert(Role::KvCapacity, 4000.0);
            rounds.push(r);
        }
        let c = Collected {
            rounds,
            ..Default::default()
        };
        let f = CellFacts {
            requests: 4,
            output_tokens: 100,
            wall_s: 2.0,
            peak_bandwidth: None,
            peak_flops: None,
        };
        let t = cell(&c, 0.0, 2000.0, &f).telemetry;
        assert_eq!(t.kv_cache_tokens, Some(4000.0));
        let kv = t.kv_cache_usage_waiting.unwrap();
        assert!((kv.mean - 0.75).abs() < 1e-9 && kv.samples == 2, "{kv:?}");
        let run = t.running_waiting.unwrap();
        assert_eq!((run.mean, run.peak, run.samples), (3.0, 3.0, 2));
        assert_eq!(t.running.unwrap().samples, 3);
    }
}
