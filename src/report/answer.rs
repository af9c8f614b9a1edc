//! One row of ClickHouse's answer to a report query (JSON, a column a key): its counts,
//! numbers, names and distributions as the report reads them. A missing or null column is
//! none, never zero but for counts.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::values::{SloP95, Values};
use super::Dist;

pub(super) type Row = Map<String, Value>;

pub(super) fn count(r: &Row, k: &str) -> usize {
    match r.get(k) {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0) as usize,
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

pub(super) fn int(r: &Row, k: &str) -> Option<i64> {
    match r.get(k) {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
}

pub(super) fn float(r: &Row, k: &str) -> Option<f64> {
    match r.get(k) {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
}

pub(super) fn text(r: &Row, k: &str) -> String {
    opt_text(r, k).unwrap_or_default()
}

pub(super) fn opt_text(r: &Row, k: &str) -> Option<String> {
    r.get(k).and_then(Value::as_str).map(str::to_owned)
}

/// `{name}_n`, `_p50`, `_p95`, `_p99`, `_max`.
pub(super) fn known(r: &Row, name: &str) -> Dist {
    let f = |s: &str| float(r, &format!("{name}_{s}"));
    Dist {
        n: count(r, &format!("{name}_n")),
        p50: f("p50"),
        p95: f("p95"),
        p99: f("p99"),
        max: f("max"),
    }
}

/// A figure of which only the median is known.
pub(super) fn median(r: &Row, k: &str) -> Values {
    let p50 = float(r, k);
    Values::Known(Dist {
        n: usize::from(p50.is_some()),
        p50,
        p95: None,
        p99: None,
        max: None,
    })
}

pub(super) fn time(ns: Option<i64>) -> Option<SystemTime> {
    let ns = u64::try_from(ns?).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_nanos(ns))
}

/// The p95 an SLO judges, as ClickHouse computed it (`sql::slo_at`).
pub(super) fn slo_p95(r: &Row, name: &str) -> SloP95 {
    match (
        int(r, &format!("{name}_slo_beyond")),
        float(r, &format!("{name}_slo_p95")),
    ) {
        (Some(1), _) => SloP95::Beyond,
        (_, Some(v)) => SloP95::Value(v),
        _ => SloP95::NotJudged,
    }
}
