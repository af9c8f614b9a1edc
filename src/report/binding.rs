//! The binding constraint per bucket, at its knee or where the interactive SLO first fails:
//! the client (its lag, or bench's own stall share or reader lag), the gateway, the KV cache,
//! the batch limit, compute, memory bandwidth, per-step overhead, queueing — each named only
//! when its own figures show it, else "not identified" — or not reached, with the figures
//! beside the verdict; and how close the engine came to the card's limits (MBU, MFU). The rule
//! is docs/report.md's "The binding constraint"; it reads the cells' engine figures and bench's
//! own lag. NB: no cause is ever named by elimination: the last branch is
//! `NotIdentified`.

use super::answers;
use super::model::{Axis, Cell, Report, Telemetry};
pub use super::model::{BindPoint, Binding, BindingFigures as Figures, Constraint};
use super::words::{at, cell_name};

/// KV-cache usage at or above this, while requests waited, is full (when the cache's size is
/// not scraped).
pub const KV_FULL: f64 = 0.95;
/// Mean waiting requests at or above this is a queue.
pub const QUEUE_MEAN: f64 = 0.5;
/// The client's lag p99 above this (ms) means bench, not the server, set the pace.
pub const CLIENT_LAG_MS: f64 = 10.0;
/// bench's own stall share above this (its `run.json`): its scheduler was behind its plan or
/// held at its in-flight limit for more of the cell than this, so bench set the pace.
pub const BENCH_STALL_SHARE: f64 = 0.05;
/// bench's own reader lag p99 above this (ms, its `run.json`): its TTFTs carry that much of its
/// own delay.
pub const BENCH_READER_LAG_MS: f64 = 1.0;
/// …and binds only when it is also above this share of the cell's TTFT p50: a delay of bench's
/// own that is a material part of the latency the verdict explains (1 ms in a 300 ms TTFT is
/// not what binds; the run's own warning still says it).
pub const BENCH_READER_LAG_SHARE: f64 = 0.1;
/// Time outside the engine at or above this share of TTFT (medians) is the gateway's.
pub const GATEWAY_SHARE: f64 = 0.5;
/// Running, while requests waited, at or above this share of the bucket's plateau is flat at
/// its peak.
pub const BATCH_FLAT: f64 = 0.95;
/// MFU at or above this is near the card's compute peak.
pub const MFU_NEAR: f64 = 0.4;
/// MBU at or above this is near the card's bandwidth peak.
pub const MBU_NEAR: f64 = 0.6;
/// Below these, MFU and MBU are far from the card's peaks.
pub const MFU_LOW: f64 = 0.2;
pub const MBU_LOW: f64 = 0.3;
/// A utilisation above this is no evidence: the peak given is below what was achieved.
pub const UTILISATION_MAX: f64 = 1.0;
/// The step time is flat when TPOT p50 grew by at most this factor from the bucket's lowest
/// level…
pub const STEP_FLAT: f64 = 1.5;
/// …while the batch (running mean) grew by at least this factor.
pub const BATCH_GROWTH: f64 = 2.0;

/// The bucket's cells around the one examined: its lowest level and its running plateau.
struct Bucket<'a> {
    lowest: Option<&'a Cell>,
    running_limit: Option<f64>,
}

fn figures(c: &Cell, b: &Bucket) -> Figures {
    let t = c.engine.clone().unwrap_or_default();
    let outside = c
        .ttft_split
        .as_ref()
        .and_then(|s| s.outside_engine_ms)
        .zip(c.ttft_ms.p50)
        .filter(|(_, t)| *t > 0.0)
        .map(|(o, t)| o / t);
    let usage_waiting = t.kv_cache_usage_waiting.map(|g| g.mean);
    let lowest = b.lowest.filter(|l| !std::ptr::eq(*l, c));
    Figures {
        kv_cache_usage_peak: t.kv_cache_usage.map(|g| g.peak),
        preemptions_per_request: t.preemptions_per_request,
        waiting_mean: t.waiting.map(|g| g.mean),
        running_mean: t.running.map(|g| g.mean),
        mbu: t.mbu,
        mfu: t.mfu,
        client_lag_p99_ms: c.client_lag_ms.as_ref().and_then(|d| d.p99),
        bench_stall_share: c.bench_stall_share,
        bench_reader_lag_p99_ms: c.bench_reader_lag_p99_ms,
        ttft_ms_p50: c.ttft_ms.p50,
        outside_engine_share: outside,
        kv_cache_tokens: t.kv_cache_tokens,
        kv_cache_usage_waiting: usage_waiting,
        kv_free_tokens_waiting: usage_waiting
            .zip(t.kv_cache_tokens)
            .map(|(u, size)| (1.0 - u).max(0.0) * size),
        prompt_tokens_median: c.input_tokens_median,
        output_tokens_median: c.output_tokens_median,
        running_waiting_mean: t.running_waiting.map(|g| g.mean),
        running_limit: b.running_limit,
        tpot_ms_p50: c.tpot_ms.p50,
        lowest_at: lowest.map(at),
        tpot_ms_p50_lowest: lowest.and_then(|l| l.tpot_ms.p50),
        running_mean_lowest: lowest
            .and_then(|l| l.engine.as_ref()?.running)
            .map(|g| g.mean),
    }
}

/// What the KV cache says of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kv {
    /// Requests waited while the free cache was smaller than a waiting prompt (or, its size not
    /// scraped, while it was full).
    Blocked,
    /// Requests waited while the free cache held a waiting prompt and its output.
    Room,
    /// No queue, or the figures cannot tell.
    Unclear,
}

fn kv(f: &Figures) -> Kv {
    if !f.waiting_mean.is_some_and(|w| w >= QUEUE_MEAN) {
        return Kv::Unclear;
    }
    match (f.kv_free_tokens_waiting, f.prompt_tokens_median) {
        (Some(free), Some(prompt)) if free < prompt => Kv::Blocked,
        (Some(free), Some(prompt))
            if f.output_tokens_median
                .is_some_and(|out| free >= prompt + out) =>
        {
            Kv::Room
        }
        (Some(_), _) => Kv::Unclear,
        (None, _) if f.kv_cache_usage_waiting.is_some_and(|u| u >= KV_FULL) => Kv::Blocked,
        (None, _) => Kv::Unclear,
    }
}

/// A utilisation that can be evidence: known, and not above the card's peak.
fn credible(u: Option<f64>) -> Option<f64> {
    u.filter(|u| (0.0..=UTILISATION_MAX).contains(u))
}

/// The running batch flat at the bucket's plateau while requests waited.
fn batch_flat(f: &Figures) -> bool {
    match (f.running_waiting_mean, f.running_limit) {
        (Some(r), Some(limit)) => limit > 0.0 && r >= BATCH_FLAT * limit,
        _ => false,
    }
}

/// The decode step's time flat from the bucket's lowest level while the batch grew.
fn step_flat(f: &Figures) -> bool {
    match (
        f.tpot_ms_p50,
        f.tpot_ms_p50_lowest,
        f.running_mean,
        f.running_mean_lowest,
    ) {
        (Some(t), Some(t0), Some(r), Some(r0)) if t0 > 0.0 && r0 > 0.0 => {
            t <= STEP_FLAT * t0 && r >= BATCH_GROWTH * r0
        }
        _ => false,
    }
}

/// The client set the pace: its lag p99 over [`CLIENT_LAG_MS`], or bench's own stall share over
/// its bound, or its reader lag p99 over its bound and a material share of TTFT (its
/// `run.json`).
fn client(f: &Figures) -> bool {
    let reader = match (f.bench_reader_lag_p99_ms, f.ttft_ms_p50) {
        (Some(l), Some(t)) => l > BENCH_READER_LAG_MS && l > BENCH_READER_LAG_SHARE * t,
        _ => false,
    };
    reader
        || f.client_lag_p99_ms.is_some_and(|l| l > CLIENT_LAG_MS)
        || f.bench_stall_share.is_some_and(|s| s > BENCH_STALL_SHARE)
}

/// The rule, in order: the client, the gateway, the KV cache, the batch limit, compute, memory
/// bandwidth, per-step overhead, queueing; a cause no figure shows is never named.
pub fn verdict(f: &Figures, scraped: bool) -> Constraint {
    if client(f) {
        return Constraint::Client;
    }
    if f.outside_engine_share.is_some_and(|s| s >= GATEWAY_SHARE) {
        return Constraint::Gateway;
    }
    if !scraped {
        return Constraint::Unknown;
    }
    let kv = kv(f);
    let (mfu, mbu) = (credible(f.mfu), credible(f.mbu));
    if f.preemptions_per_request.is_some_and(|p| p > 0.0) || kv == Kv::Blocked {
        Constraint::KvCache
    } else if kv == Kv::Room && batch_flat(f) {
        Constraint::BatchLimit
    } else if mfu.is_some_and(|m| m >= MFU_NEAR) {
        Constraint::Compute
    } else if mbu.is_some_and(|m| m >= MBU_NEAR) {
        Constraint::MemoryBandwidth
    } else if mfu.is_some_and(|m| m < MFU_LOW) && mbu.is_some_and(|m| m < MBU_LOW) && step_flat(f) {
        Constraint::StepOverhead
    } else if kv == Kv::Room {
        Constraint::Queueing
    } else {
        Constraint::NotIdentified
    }
}

/// Name each bucket's binding constraint, and add the answers the engine's figures give.
pub fn settle(r: &mut Report) {
    // Without the engine's figures, only a client that set the pace can be named.
    let flagged = |c: &Cell| {
        client(&Figures {
            bench_stall_share: c.bench_stall_share,
            bench_reader_lag_p99_ms: c.bench_reader_lag_p99_ms,
            ttft_ms_p50: c.ttft_ms.p50,
            ..Figures::default()
        })
    };
    if !r.cells.iter().any(|c| c.engine.is_some() || flagged(c)) {
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
        let bucket = Bucket {
            lowest: cs.first().copied(),
            running_limit: cs
                .iter()
                .filter_map(|c| Some(c.engine.as_ref()?.running?.peak))
                .reduce(f64::max),
        };
        let f = figures(cell, &bucket);
        // Scrapes that all failed leave an engine with no figure: nothing was scraped.
        let scraped = cell
            .engine
            .as_ref()
            .is_some_and(|t| *t != Telemetry::default());
        let served = cell.ttft_ms.n.max(cell.e2e_ms.n);
        let constraint = match point {
            BindPoint::Top => Constraint::NotReached,
            _ if served == 0 => Constraint::Failed,
            _ => verdict(&f, scraped),
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

    /// An engine scraped at a knee with nothing to show: no queue, no preemption, the card's
    /// peaks unknown.
    fn quiet() -> Figures {
        Figures {
            kv_cache_usage_peak: Some(0.04),
            preemptions_per_request: Some(0.0),
            waiting_mean: Some(0.0),
            running_mean: Some(6.0),
            prompt_tokens_median: Some(1000.0),
            output_tokens_median: Some(100.0),
            ..Figures::default()
        }
    }

    /// Requests waiting, the cache (4,000 tokens) at `usage` while they did, the batch at
    /// `running` of a plateau of 3.
    fn queue(usage: f64, running: f64) -> Figures {
        Figures {
            waiting_mean: Some(3.0),
            kv_cache_tokens: Some(4000.0),
            kv_cache_usage_waiting: Some(usage),
            kv_free_tokens_waiting: Some((1.0 - usage) * 4000.0),
            running_waiting_mean: Some(running),
            running_limit: Some(3.0),
            ..quiet()
        }
    }

    /// Card figures: MFU, MBU, and the step time from the lowest level (27 ms at 1 running).
    fn card(mfu: f64, mbu: f64, tpot: f64, running: f64) -> Figures {
        Figures {
            mfu: Some(mfu),
            mbu: Some(mbu),
            tpot_ms_p50: Some(tpot),
            running_mean: Some(running),
            lowest_at: Some("C=1".into()),
            tpot_ms_p50_lowest: Some(27.0),
            running_mean_lowest: Some(1.0),
            ..quiet()
        }
    }

    #[test]
    fn nothing_shown_is_not_identified_never_compute() {
        assert_eq!(verdict(&quiet(), true), Constraint::NotIdentified);
        assert_eq!(
            verdict(&Figures::default(), true),
            Constraint::NotIdentified
        );
        assert_eq!(verdict(&Figures::default(), false), Constraint::Unknown);
        // A full cache with nothing waiting binds nothing.
        let full = Figures {
            kv_cache_usage_peak: Some(0.99),
            ..quiet()
        };
        assert_eq!(verdict(&full, true), Constraint::NotIdentified);
        // The demo's figures without a flat step: MBU and MFU low say no more than that.
        assert_eq!(
            verdict(&card(0.02, 0.12, 60.0, 6.0), true),
            Constraint::NotIdentified
        );
        // Between far and near: no cause.
        assert_eq!(
            verdict(&card(0.02, 0.45, 30.0, 6.0), true),
            Constraint::NotIdentified
        );
    }

    #[test]
    fn the_kv_cache_on_preemptions_or_a_blocked_admission() {
        let pre = Figures {
            preemptions_per_request: Some(0.1),
            ..quiet()
        };
        assert_eq!(verdict(&pre, true), Constraint::KvCache);
        // 24 % free of 4,000 tokens: 960 < a 1,000-token prompt, the cache not full.
        assert_eq!(verdict(&queue(0.76, 3.0), true), Constraint::KvCache);
        // Free 2,000: a prompt and its output fit; the batch flat at its plateau.
        assert_eq!(verdict(&queue(0.5, 3.0), true), Constraint::BatchLimit);
        // The batch below its plateau: the wait is queueing.
        assert_eq!(verdict(&queue(0.5, 2.0), true), Constraint::Queueing);
        // 1,040 free: the prompt fits, its output may not: neither blocked nor room.
        assert_eq!(verdict(&queue(0.74, 3.0), true), Constraint::NotIdentified);
        // A passing wait (mean below a queue) is no admission blocked.
        let passing = Figures {
            waiting_mean: Some(0.2),
            ..queue(0.9, 3.0)
        };
        assert_eq!(verdict(&passing, true), Constraint::NotIdentified);
        // The cache's size not scraped: full while requests waited, or no cause.
        let no_size = |usage| Figures {
            kv_cache_tokens: None,
            kv_free_tokens_waiting: None,
            ..queue(usage, 3.0)
        };
        assert_eq!(verdict(&no_size(0.97), true), Constraint::KvCache);
        assert_eq!(verdict(&no_size(0.5), true), Constraint::NotIdentified);
    }

    #[test]
    fn the_card_and_the_step() {
        assert_eq!(
            verdict(&card(0.45, 0.1, 30.0, 6.0), true),
            Constraint::Compute
        );
        assert_eq!(
            verdict(&card(0.02, 0.7, 30.0, 6.0), true),
            Constraint::MemoryBandwidth
        );
        // The write-up's V100, eager: 27 → 33 ms while the batch grew 1 → 6, MBU 12 %.
        assert_eq!(
            verdict(&card(0.02, 0.12, 33.0, 6.0), true),
            Constraint::StepOverhead
        );
        // The batch did not grow: a flat step says nothing.
        assert_eq!(
            verdict(&card(0.02, 0.12, 28.0, 1.5), true),
            Constraint::NotIdentified
        );
        // MFU unknown: "neither near its limit" is not shown.
        let no_mfu = Figures {
            mfu: None,
            ..card(0.02, 0.12, 33.0, 6.0)
        };
        assert_eq!(verdict(&no_mfu, true), Constraint::NotIdentified);
        // A peak below what was achieved is no evidence.
        assert_eq!(
            verdict(&card(0.02, 3.0, 33.0, 6.0), true),
            Constraint::NotIdentified
        );
        // A cause the card shows comes before a queue's.
        let both = Figures {
            mbu: Some(0.8),
            ..queue(0.5, 2.0)
        };
        assert_eq!(verdict(&both, true), Constraint::MemoryBandwidth);
    }

    #[test]
    fn the_client_and_the_gateway_first() {
        let client = Figures {
            client_lag_p99_ms: Some(50.0),
            preemptions_per_request: Some(1.0),
            ..queue(0.99, 3.0)
        };
        assert_eq!(verdict(&client, true), Constraint::Client);
        assert_eq!(verdict(&client, false), Constraint::Client);
        // bench's own lag past its bounds, from its run.json (TTFT p50 20 ms); at the bounds,
        // or a reader lag past 1 ms but a small share of TTFT, not.
        let own = |stall, reader, ttft| Figures {
            bench_stall_share: stall,
            bench_reader_lag_p99_ms: reader,
            ttft_ms_p50: Some(ttft),
            ..queue(0.99, 3.0)
        };
        for f in [
            own(Some(0.3), None, 20.0),
            own(None, Some(3.2), 20.0),
            own(Some(0.06), Some(0.2), 20.0),
        ] {
            assert_eq!(verdict(&f, false), Constraint::Client, "{f:?}");
        }
        for f in [
            own(Some(BENCH_STALL_SHARE), Some(BENCH_READER_LAG_MS), 5.0),
            own(Some(0.0), Some(3.2), 300.0),
            own(None, Some(3.2), f64::NAN),
        ] {
            assert_eq!(verdict(&f, true), Constraint::KvCache, "{f:?}");
        }
        let gateway = Figures {
            outside_engine_share: Some(0.7),
            ..queue(0.99, 3.0)
        };
        assert_eq!(verdict(&gateway, true), Constraint::Gateway);
    }
}
