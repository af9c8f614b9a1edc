//! The binding constraint per bucket, at its knee or where the interactive SLO first fails:
//! the client, the gateway, the KV cache, queueing, compute — or not reached — with the
//! figures beside the verdict; and how close the engine came to the card's limits (MBU, MFU).
//! The rule is docs/report.md's "The binding constraint"; it reads the cells' engine figures.

use super::answers;
use super::model::{Axis, Cell, Report};
pub use super::model::{BindPoint, Binding, BindingFigures as Figures, Constraint};
use super::words::{at, cell_name};

/// KV-cache usage at or above this is full.
pub const KV_FULL: f64 = 0.95;
/// Mean waiting requests at or above this is a queue.
pub const QUEUE_MEAN: f64 = 0.5;
/// The client's lag p99 above this (ms) means bench, not the server, set the pace.
pub const CLIENT_LAG_MS: f64 = 10.0;
/// Time outside the engine at or above this share of TTFT (medians) is the gateway's.
pub const GATEWAY_SHARE: f64 = 0.5;

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
            .filter(|c| cell_name(c) == p.bucket)
            .filter(|c| c.axis == p.axis.unwrap_or(Axis::Concurrency))
            .collect();
        let missed = cs.iter().find(|c| c.slo.get("interactive") == Some(&false));
        let (cell, point) = match (&p.knee, missed) {
            (Some(k), _) => (cs.iter().find(|c| &c.concurrency == k), BindPoint::Knee),
            (None, Some(c)) => (Some(c), BindPoint::Slo),
            (None, None) => (cs.last(), BindPoint::Top),
        };
        let Some(cell) = cell else { continue };
        let f = figures(cell);
        let constraint = if point == BindPoint::Top {
            Constraint::NotReached
        } else {
            verdict(&f, cell.engine.is_some())
        };
        out.push(Binding {
            bucket: p.bucket.clone(),
            at: Some(at(cell)),
            point,
            constraint,
            figures: f,
            // The sentence is the answers' (`answers::binding_text`).
            text: String::new(),
        });
    }
    for b in &mut out {
        b.text = answers::binding_text(b);
    }
    r.binding = out;
    answers::binding_answers(r);
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
