//! The binding constraint per bucket, at its knee or where the interactive SLO first fails:
//! the client, the gateway, the KV cache, queueing, compute — or not reached — with the
//! figures beside the verdict; and how close the engine came to the card's limits (MBU, MFU).
//! The rule is docs/report.md's "The binding constraint"; it reads the cells' engine figures.

use serde::Serialize;

use super::{answers::Answer, Cell, Report};

/// KV-cache usage at or above this is full.
pub const KV_FULL: f64 = 0.95;
/// Mean waiting requests at or above this is a queue.
pub const QUEUE_MEAN: f64 = 0.5;
/// The client's lag p99 above this (ms) means bench, not the server, set the pace.
pub const CLIENT_LAG_MS: f64 = 10.0;
/// Time outside the engine at or above this share of TTFT (medians) is the gateway's.
pub const GATEWAY_SHARE: f64 = 0.5;

/// What binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Constraint {
    Client,
    Gateway,
    KvCache,
    Queueing,
    Compute,
    /// Neither a knee nor an SLO failure in the levels measured.
    NotReached,
    /// A knee, but no engine figures to say why (`bench --scrape`).
    Unknown,
}

impl Constraint {
    pub fn as_str(self) -> &'static str {
        match self {
            Constraint::Client => "client",
            Constraint::Gateway => "gateway",
            Constraint::KvCache => "KV cache",
            Constraint::Queueing => "queueing",
            Constraint::Compute => "compute",
            Constraint::NotReached => "not reached",
            Constraint::Unknown => "unknown",
        }
    }
}

/// The figures a verdict is read from.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    pub kv_cache_usage_peak: Option<f64>,
    pub preemptions_per_request: Option<f64>,
    pub waiting_mean: Option<f64>,
    pub running_mean: Option<f64>,
    pub mbu: Option<f64>,
    pub mfu: Option<f64>,
    pub client_lag_p99_ms: Option<f64>,
    /// Time outside the engine ÷ TTFT (medians).
    pub outside_engine_share: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Binding {
    pub bucket: String,
    /// The level examined (`C=8`, `4/s`).
    pub at: Option<String>,
    /// Why that level: `knee`, `slo` (the interactive SLO's first failure) or `top` (neither
    /// reached: the highest level).
    pub point: &'static str,
    pub constraint: Constraint,
    pub figures: Figures,
    /// The verdict in a sentence, with its figures.
    pub text: String,
}

fn pct(v: f64) -> String {
    format!("{:.0} %", v * 100.0)
}

fn figures(c: &Cell) -> Figures {
    let t = c.engine.clone().unwrap_or_default();
    let outside = c
        .ttft_split
        .as_ref()
        .and_then(|s| s.outside_engine_ms)
        .zip(c.ttft_ms.p50)
        .filter(|(_, t)| *t > 0.0)
        .map(|(o, t)| o / t);
    Figures {
        kv_cache_usage_peak: t.kv_cache_usage.map(|g| g.peak),
        preemptions_per_request: t.preemptions_per_request,
        waiting_mean: t.waiting.map(|g| g.mean),
        running_mean: t.running.map(|g| g.mean),
        mbu: t.mbu,
        mfu: t.mfu,
        client_lag_p99_ms: c.client_lag_ms.as_ref().and_then(|d| d.p99),
        outside_engine_share: outside,
    }
}

/// The rule, in order: the client, the gateway, the KV cache, queueing, compute.
pub fn verdict(f: &Figures, scraped: bool) -> Constraint {
    if f.client_lag_p99_ms.is_some_and(|l| l > CLIENT_LAG_MS) {
        Constraint::Client
    } else if f.outside_engine_share.is_some_and(|s| s >= GATEWAY_SHARE) {
        Constraint::Gateway
    } else if f.kv_cache_usage_peak.is_some_and(|k| k >= KV_FULL)
        || f.preemptions_per_request.is_some_and(|p| p > 0.0)
    {
        Constraint::KvCache
    } else if f.waiting_mean.is_some_and(|w| w >= QUEUE_MEAN) {
        Constraint::Queueing
    } else if scraped {
        Constraint::Compute
    } else {
        Constraint::Unknown
    }
}

fn describe(f: &Figures) -> String {
    let mut parts = Vec::new();
    if let Some(k) = f.kv_cache_usage_peak {
        parts.push(format!("KV cache peak {}", pct(k)));
    }
    if let Some(p) = f.preemptions_per_request {
        parts.push(format!("{p:.2} preemptions a request"));
    }
    if let Some(w) = f.waiting_mean {
        parts.push(format!("waiting {w:.1} mean"));
    }
    if let Some(r) = f.running_mean {
        parts.push(format!("running {r:.1} mean"));
    }
    if let Some(m) = f.mbu {
        parts.push(format!("MBU {}", pct(m)));
    }
    if let Some(l) = f.client_lag_p99_ms {
        parts.push(format!("client lag p99 {l:.1} ms"));
    }
    if let Some(s) = f.outside_engine_share {
        parts.push(format!("{} of TTFT outside the engine", pct(s)));
    }
    parts.join(", ")
}

/// Name each bucket's binding constraint, and add the answers the engine's figures give.
pub fn settle(r: &mut Report) {
    if !r.cells.iter().any(|c| c.engine.is_some()) {
        return;
    }
    let mut out = Vec::new();
    for p in &r.provisioning {
        let cs: Vec<&Cell> = r
            .cells
            .iter()
            .filter(|c| super::answers::name(c) == p.bucket)
            .filter(|c| match p.axis {
                None => c.axis == super::Axis::Concurrency,
                Some("request_rate") => c.axis == super::Axis::RequestRate,
                Some(_) => c.axis == super::Axis::InFlight,
            })
            .collect();
        let missed = cs.iter().find(|c| c.slo.get("interactive") == Some(&false));
        let (cell, point) = match (&p.knee, missed) {
            (Some(k), _) => (cs.iter().find(|c| &c.concurrency == k), "knee"),
            (None, Some(c)) => (Some(c), "slo"),
            (None, None) => (cs.last(), "top"),
        };
        let Some(cell) = cell else { continue };
        let f = figures(cell);
        let constraint = if point == "top" {
            Constraint::NotReached
        } else {
            verdict(&f, cell.engine.is_some())
        };
        let at = super::answers::at(cell);
        let why = match point {
            "knee" => format!("at its knee, {at}"),
            "slo" => format!("where the interactive SLO first fails, {at}"),
            _ => format!("no knee or SLO failure up to {at}"),
        };
        let figs = describe(&f);
        let text = format!(
            "{}: {} ({why}{}{figs})",
            p.bucket,
            constraint.as_str(),
            if figs.is_empty() { "" } else { ": " },
        );
        out.push(Binding {
            bucket: p.bucket.clone(),
            at: Some(at),
            point,
            constraint,
            figures: f,
            text,
        });
    }
    let binds = out
        .iter()
        .map(|b| b.text.clone())
        .collect::<Vec<_>>()
        .join("; ");
    r.binding = out;
    r.answers.push(Answer {
        question: "What binds, at the knee or ceiling?",
        answer: if binds.is_empty() {
            "-".into()
        } else {
            format!("{binds}.")
        },
    });
    r.answers.push(Answer {
        question: "How close to the hardware's limit is it?",
        answer: limit(r),
    });
}

/// Per bucket, the cell nearest the card's bandwidth limit (or, without the card's peak, the
/// highest achieved bytes/s).
fn limit(r: &Report) -> String {
    let hw = r.hardware.clone().unwrap_or_default();
    let mut parts = Vec::new();
    for p in &r.provisioning {
        let best = r
            .cells
            .iter()
            .filter(|c| super::answers::name(c) == p.bucket)
            .filter_map(|c| Some((c, c.engine.as_ref()?.read_bytes_per_s_per_gpu?)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let Some((c, bytes)) = best else { continue };
        let Some(t) = c.engine.as_ref() else { continue };
        let at = super::answers::at(c);
        parts.push(match (t.mbu, hw.peak_bandwidth_bytes_s) {
            (Some(m), Some(peak)) => format!(
                "{} reaches {} of the card's {:.0} GB/s at {at}{}",
                p.bucket,
                pct(m),
                peak / 1e9,
                t.mfu
                    .map_or_else(String::new, |f| format!(" (MFU {})", pct(f)))
            ),
            _ if bytes <= 0.0 => format!(
                "{}: the engine's estimate of bytes read stayed at zero (vLLM counts it with --enable-mfu-metrics)",
                p.bucket
            ),
            _ => format!("{} reads {:.0} GB/s per GPU at {at}", p.bucket, bytes / 1e9),
        });
    }
    if parts.is_empty() {
        return "no engine estimates of bytes read were scraped (vLLM's vllm:estimated_read_bytes_per_gpu_total)".into();
    }
    let mut s = parts.join("; ");
    let measured = r.cells.iter().any(|c| {
        c.engine
            .as_ref()
            .and_then(|t| t.read_bytes_per_s_per_gpu)
            .is_some_and(|b| b > 0.0)
    });
    if hw.peak_bandwidth_bytes_s.is_none() && measured {
        s += " — give bench --gpu or --peak-bandwidth for the share of the card's peak (MBU)";
    }
    s + "."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_in_order() {
        let f = |kv: f64, pre: f64, wait: f64| Figures {
            kv_cache_usage_peak: Some(kv),
            preemptions_per_request: Some(pre),
            waiting_mean: Some(wait),
            ..Figures::default()
        };
        assert_eq!(verdict(&f(0.99, 0.0, 3.0), true), Constraint::KvCache);
        assert_eq!(verdict(&f(0.5, 0.1, 0.0), true), Constraint::KvCache);
        assert_eq!(verdict(&f(0.5, 0.0, 2.0), true), Constraint::Queueing);
        assert_eq!(verdict(&f(0.5, 0.0, 0.1), true), Constraint::Compute);
        assert_eq!(verdict(&Figures::default(), false), Constraint::Unknown);
        let client = Figures {
            client_lag_p99_ms: Some(50.0),
            ..f(0.99, 1.0, 3.0)
        };
        assert_eq!(verdict(&client, true), Constraint::Client);
        let gateway = Figures {
            outside_engine_share: Some(0.7),
            ..f(0.99, 1.0, 3.0)
        };
        assert_eq!(verdict(&gateway, true), Constraint::Gateway);
    }
}
