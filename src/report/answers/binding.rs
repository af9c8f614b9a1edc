//! The binding constraint in sentences: each bucket's verdict with its figures, and how close
//! the engine came to the card's limits.

use crate::report::model::{
    Answer, BindPoint, Binding, BindingFigures as Figures, Constraint, Report,
};
use crate::report::words::{at, cell_name};

fn pct(v: f64) -> String {
    format!("{:.0} %", v * 100.0)
}

fn describe(f: &Figures) -> String {
    let mut parts = Vec::new();
    if let Some(k) = f.kv_cache_usage_peak {
        parts.push(format!("KV cache peak {}", pct(k)));
    }
    if let (Some(free), Some(size)) = (f.kv_free_tokens_waiting, f.kv_cache_tokens) {
        parts.push(format!(
            "{free:.0} of {size:.0} KV tokens free while requests waited{}",
            f.prompt_tokens_median
                .map_or_else(String::new, |p| format!(" (prompts {p:.0} tokens)"))
        ));
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
    if let (Some(r), Some(limit)) = (f.running_waiting_mean, f.running_limit) {
        parts.push(format!(
            "running {r:.1} while requests waited, at most {limit:.0} at any level"
        ));
    }
    if let Some(m) = f.mbu {
        parts.push(format!("MBU {}", pct(m)));
    }
    if let Some(m) = f.mfu {
        parts.push(format!("MFU {}", pct(m)));
    }
    if let (Some(t0), Some(t), Some(low)) = (f.tpot_ms_p50_lowest, f.tpot_ms_p50, &f.lowest_at) {
        parts.push(format!("TPOT p50 {t0:.1} ms at {low}, {t:.1} ms here"));
    }
    if let Some(l) = f.client_lag_p99_ms {
        parts.push(format!("client lag p99 {l:.1} ms"));
    }
    if let Some(s) = f.bench_stall_share {
        parts.push(format!("bench's stall share {:.1} %", 100.0 * s));
    }
    if let Some(l) = f.bench_reader_lag_p99_ms {
        parts.push(format!("bench's reader lag p99 {l:.2} ms"));
    }
    if let Some(s) = f.outside_engine_share {
        parts.push(format!("{} of TTFT outside the engine", pct(s)));
    }
    parts.join(", ")
}

/// For a verdict that names no cause: the figures that would have let one be named.
fn missing(f: &Figures) -> String {
    let mut m = Vec::new();
    if f.mbu.is_none() || f.mfu.is_none() {
        m.push(
            "MBU and MFU need the card's peaks (bench --gpu, or --peak-bandwidth and --peak-flops)",
        );
    }
    if f.waiting_mean.is_some_and(|w| w > 0.0) && f.kv_cache_tokens.is_none() {
        m.push("the KV cache's size was not scraped (vLLM's vllm:cache_config_info)");
    }
    if m.is_empty() {
        "no figure crosses a rule's threshold".into()
    } else {
        m.join("; ")
    }
}

/// A bucket's verdict in a sentence, with its figures.
pub fn binding_text(b: &Binding) -> String {
    let at = b.at.clone().unwrap_or_default();
    let why = match b.point {
        BindPoint::Knee => format!("at its knee, {at}"),
        BindPoint::Slo => format!("where the interactive SLO first fails, {at}"),
        BindPoint::Top => format!("no knee or SLO failure up to {at}"),
    };
    let figs = describe(&b.figures);
    let unnamed = match b.constraint {
        Constraint::NotIdentified => format!(" — no cause shown: {}", missing(&b.figures)),
        Constraint::Failed => {
            " — the cell served no request: every one failed, so there is no latency to explain (the failure mode says why)".to_owned()
        }
        _ => String::new(),
    };
    format!(
        "{}: {} ({why}{}{figs}){unnamed}",
        b.bucket,
        b.constraint.as_str(),
        if figs.is_empty() { "" } else { ": " },
    )
}

/// The answers the engine's figures give: what binds, and how close to the hardware's limit.
pub fn binding_answers(r: &mut Report) {
    let binds = r
        .binding
        .iter()
        .map(|b| b.text.clone())
        .collect::<Vec<_>>()
        .join("; ");
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
            .filter(|c| cell_name(c) == p.bucket)
            .filter_map(|c| Some((c, c.engine.as_ref()?.read_bytes_per_s_per_gpu?)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let Some((c, bytes)) = best else { continue };
        let Some(t) = c.engine.as_ref() else { continue };
        let at = at(c);
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
