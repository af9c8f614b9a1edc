//! The demo's closing reading, derived from the report's own figures so that it never says
//! more than they show: TTFT by prompt length and by concurrency, per-stream speed beside what
//! the report finds binds, E2E by the tokens asked for, and the gateway hop at C=1. A trend
//! word ("grows", "follows", "taxes the front") is printed only when every figure behind it
//! agrees; otherwise the figures alone.

use crate::report::{Cell, Constraint, Report};

/// The reading, one sentence a line.
pub fn lines(rep: &Report) -> Vec<String> {
    let cells: Vec<&Cell> = rep
        .cells
        .iter()
        .filter(|c| c.arm.as_deref() != Some("gateway"))
        .collect();
    let ends = ends(&cells);
    [ttft(&ends), speed(rep, &cells, &ends), e2e(&ends), hop(rep)]
        .into_iter()
        .flatten()
        .collect()
}

/// Per bucket, its lowest and highest level, buckets in order of prompt length.
fn ends<'a>(cells: &[&'a Cell]) -> Vec<(&'a Cell, &'a Cell)> {
    let mut names: Vec<&str> = Vec::new();
    for c in cells {
        if !names.contains(&c.bucket.as_str()) {
            names.push(&c.bucket);
        }
    }
    let mut out: Vec<(&Cell, &Cell)> = names
        .iter()
        .filter_map(|n| {
            let of = cells.iter().filter(|c| c.bucket == *n);
            let low = of.clone().min_by_key(|c| c.level)?;
            let high = of.max_by_key(|c| c.level)?;
            Some((*low, *high))
        })
        .collect();
    out.sort_by(|a, b| {
        let p = |c: &Cell| c.input_tokens_median.unwrap_or(0.0);
        p(a.0).total_cmp(&p(b.0))
    });
    out
}

fn ms(v: f64) -> String {
    format!("{v:.0} ms")
}

/// Strictly increasing, with at least two values.
fn rising(v: &[f64]) -> bool {
    v.len() >= 2 && v.windows(2).all(|w| w[1] > w[0])
}

/// `lo–hi` of some values (rounded to whole numbers), or the one value.
fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = (format!("{lo:.0}"), format!("{hi:.0}"));
    if lo == hi {
        lo
    } else {
        format!("{lo}–{hi}")
    }
}

/// TTFT p50 at the lowest level by prompt length, and at the highest.
fn ttft(ends: &[(&Cell, &Cell)]) -> Option<String> {
    let low: Vec<(f64, f64, &str)> = ends
        .iter()
        .filter_map(|(l, _)| Some((l.input_tokens_median?, l.ttft_ms.p50?, l.bucket.as_str())))
        .collect();
    let (first, last) = (ends.first()?, ends.last()?);
    let pairs: Vec<(f64, f64)> = ends
        .iter()
        .filter(|(l, h)| h.level > l.level)
        .filter_map(|(l, h)| Some((l.ttft_ms.p50?, h.ttft_ms.p50?)))
        .collect();
    let by_prompt = rising(&low.iter().map(|x| x.1).collect::<Vec<_>>());
    let by_level = !pairs.is_empty() && pairs.iter().all(|(l, h)| h > l);
    let lead = match (by_prompt, by_level) {
        (true, true) => "TTFT grows with prompt length and with concurrency",
        (true, false) => "TTFT grows with prompt length",
        (false, true) => "TTFT grows with concurrency",
        (false, false) => "TTFT",
    };
    let at_low: Vec<String> = low
        .iter()
        .map(|(p, t, b)| format!("{} for {b} ({p:.0}-token prompts)", ms(*t)))
        .collect();
    let mut s = format!(
        "{lead}: p50 at C={}: {}",
        first.0.concurrency,
        at_low.join(", ")
    );
    if !pairs.is_empty() {
        let highs: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        s += &format!("; at C={}: {} ms", last.1.concurrency, range(&highs));
    }
    Some(s + ".")
}

/// Per-stream tok/s from the lowest level to the highest, beside what the report finds binds.
fn speed(rep: &Report, cells: &[&Cell], ends: &[(&Cell, &Cell)]) -> Option<String> {
    let pairs: Vec<(f64, f64)> = ends
        .iter()
        .filter(|(l, h)| h.level > l.level)
        .filter_map(|(l, h)| Some((l.tok_s_per_stream.p50?, h.tok_s_per_stream.p50?)))
        .collect();
    let (first, last) = (ends.first()?, ends.last()?);
    let lows: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let highs: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    if pairs.is_empty() {
        return None;
    }
    let mut s = format!(
        "Per-stream tok/s p50 goes from {} at C={} to {} at C={}",
        range(&lows),
        first.0.concurrency,
        range(&highs),
        last.1.concurrency
    );
    let mut named: Vec<&str> = Vec::new();
    for b in rep
        .binding
        .iter()
        .filter(|b| !b.bucket.contains("[gateway]"))
    {
        if b.constraint != Constraint::NotReached && !named.contains(&b.constraint.as_str()) {
            named.push(b.constraint.as_str());
        }
    }
    s += &match named.as_slice() {
        [] => "; no bucket reached a knee or an SLO failure, so nothing is named as binding".into(),
        n => format!(
            "; what binds at the knees, by the report's rule: {}",
            n.join(", ")
        ),
    };
    let mbu: Vec<f64> = cells
        .iter()
        .filter_map(|c| Some(c.engine.as_ref()?.mbu? * 100.0))
        .collect();
    if !mbu.is_empty() {
        s += &format!(" (MBU {} % of the card's bandwidth)", range(&mbu));
    }
    Some(s + ".")
}

/// E2E p50 at the lowest level by the output tokens asked for.
fn e2e(ends: &[(&Cell, &Cell)]) -> Option<String> {
    let mut v: Vec<(f64, f64)> = ends
        .iter()
        .filter_map(|(l, _)| Some((l.output_tokens_median?, l.e2e_ms.p50?)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first = ends.first()?;
    if v.is_empty() {
        return None;
    }
    let outputs_differ = rising(&v.iter().map(|x| x.0).collect::<Vec<_>>());
    let lead = if outputs_differ && rising(&v.iter().map(|x| x.1).collect::<Vec<_>>()) {
        "E2E follows how much was asked for"
    } else {
        "E2E"
    };
    let parts: Vec<String> = v
        .iter()
        .map(|(o, e)| format!("{:.1} s for {o:.0} tokens", e / 1000.0))
        .collect();
    Some(format!(
        "{lead}: p50 at C={}: {}.",
        first.0.concurrency,
        parts.join(", ")
    ))
}

/// The gateway hop at C=1, where the pair does not share the engine.
fn hop(rep: &Report) -> Option<String> {
    let h = rep.gateway_hop.as_ref()?.by_concurrency.get("1")?;
    let (ttft, tpot) = (h.ttft_ms.median?, h.tpot_ms.median?);
    let front = h.ttft_ms.ci95.is_some_and(|[lo, _]| lo > 0.0);
    let body = h
        .tpot_ms
        .ci95
        .is_some_and(|[lo, hi]| lo <= 0.0 && hi >= 0.0);
    let tail = if front && body {
        ": it taxes the front of the request (TTFT), not the body (TPOT)"
    } else {
        ""
    };
    Some(format!(
        "At C=1 the gateway hop moves TTFT by {ttft:+.1} ms and TPOT by {tpot:+.2} ms (medians of {} A/B pairs){tail}.",
        h.pairs
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trend_words_only_when_every_figure_agrees() {
        assert!(rising(&[1.0, 2.0, 3.0]));
        assert!(!rising(&[1.0, 3.0, 2.0]));
        assert!(!rising(&[1.0]));
        assert_eq!(range(&[3.0, 1.0]), "1–3");
        assert_eq!(range(&[1.2, 1.4]), "1");
    }
}
