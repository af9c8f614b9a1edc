//! How a cell, a level and a ceiling are named, in the answers' sentences and the views'
//! tables alike.

use super::model::{Axis, Cell, Provision};

/// A cell's bucket, with its arm when it has one: `balanced [gateway]`.
pub fn cell_name(c: &Cell) -> String {
    match &c.arm {
        Some(a) => format!("{} [{a}]", c.bucket),
        None => c.bucket.clone(),
    }
}

/// Where a cell sits: `C=4`, an open-loop cell's rate `4/s`, or a live level `3-4 in flight`.
pub fn at(c: &Cell) -> String {
    level_at(c.axis, &c.concurrency)
}

/// A level on its axis, by its label: `C=4`, `4/s`, `3-4 in flight`.
pub fn level_at(axis: Axis, label: &str) -> String {
    match axis {
        Axis::Concurrency => format!("C={label}"),
        Axis::RequestRate => label.to_owned(),
        Axis::InFlight => format!("{label} in flight"),
    }
}

/// An open-loop cell's label: `2/s`, `0.5/s`, `12.25/s`.
pub fn rate_label(rate: f64) -> String {
    let s = format!("{rate:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}/s")
}

/// The sort key of a concurrency label: `8` → 8, `5-8` → 8.
pub fn level_key(label: &str) -> u64 {
    label
        .rsplit('-')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// A provisioning row's ceiling for `slo`, in words: `C=4`, `≥ C=8 (not reached)`, `none
/// (not even C=1)`, `not judged` (no level had a verdict); on the rate axis `4/s`, live `3-4 in
/// flight`.
pub fn ceiling_words(p: &Provision, slo: &str) -> String {
    if p.not_judged.contains(&slo) {
        return "not judged (nothing streamed)".into();
    }
    let show = |l: &str| match p.axis {
        Some(Axis::RequestRate) => l.to_owned(),
        Some(Axis::InFlight) => format!("{l} in flight"),
        _ => format!("C={l}"),
    };
    match p.ceiling.get(slo).cloned().flatten() {
        Some(c) if c == p.top => format!("≥ {} (not reached)", show(&c)),
        Some(c) => show(&c),
        None => "none (not even the lowest level)".into(),
    }
}
