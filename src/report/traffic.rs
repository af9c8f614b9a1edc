//! Traffic that is not judged: client errors and other requests by endpoint, method and
//! status, kept bounded; and whether the cells name an arm.

use std::collections::BTreeMap;

use super::cellacc::CellIn;
use super::row::Class;
use super::OtherRow;

/// Distinct endpoints the other-traffic table names (those with the most requests); the rest
/// are pooled as `(other paths)`.
const OTHER_ENDPOINTS: usize = 50;
/// Distinct endpoints counted while reading (memory stays bounded on a scan of random paths).
pub(super) const OTHER_ENDPOINTS_HELD: usize = 10_000;

/// The not-judged rows, the [`OTHER_ENDPOINTS`] endpoints with the most requests by name and
/// the rest pooled as `(other paths)`; by endpoint, method, status, class.
pub(super) fn other_rows(rows: BTreeMap<(String, String, u16, Class), usize>) -> Vec<OtherRow> {
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for ((e, ..), n) in &rows {
        *per.entry(e.as_str()).or_insert(0) += n;
    }
    let mut top: Vec<(&str, usize)> = per.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let named: std::collections::HashSet<String> = top
        .iter()
        .take(OTHER_ENDPOINTS)
        .map(|(e, _)| (*e).to_owned())
        .collect();
    let mut pooled: BTreeMap<(String, String, u16, Class), usize> = BTreeMap::new();
    for ((e, m, st, c), n) in rows {
        let e = if named.contains(&e) {
            e
        } else {
            OTHER_PATHS.to_owned()
        };
        *pooled.entry((e, m, st, c)).or_insert(0) += n;
    }
    pooled
        .into_iter()
        .map(|((endpoint, method, status, class), requests)| OtherRow {
            endpoint,
            method,
            status,
            class,
            requests,
        })
        .collect()
}

pub(super) const OTHER_PATHS: &str = "(other paths)";

/// With no experiment arm and a single route, the cells name no arm: the route is the report's
/// whole traffic.
pub(super) fn drop_single_arm(cells: &mut [CellIn], armed: bool) {
    let mut arms = cells.iter().map(|c| &c.arm).collect::<Vec<_>>();
    arms.sort();
    arms.dedup();
    if !armed && arms.len() <= 1 {
        for c in cells.iter_mut() {
            c.arm = None;
        }
    }
}

/// Class counts and the not-judged rows from ClickHouse's `traffic` rows (endpoint, method,
/// status, class, requests), read with the given accessors.
pub(super) fn from_rows<R>(
    rows: &[R],
    text: impl Fn(&R, &str) -> String,
    count: impl Fn(&R, &str) -> usize,
) -> ([usize; 6], Vec<OtherRow>) {
    let mut classes = [0usize; 6];
    let mut other = BTreeMap::new();
    for r in rows {
        let class = match text(r, "class").as_str() {
            "served" => Class::Served,
            "cancelled" => Class::Cancelled,
            "failed" => Class::Failed,
            "throttled" => Class::Throttled,
            "client_error" => Class::ClientError,
            _ => Class::Other,
        };
        let n = count(r, "requests");
        classes[class as usize] += n;
        if !class.is_generation() {
            let status = u16::try_from(count(r, "status")).unwrap_or(0);
            *other
                .entry((text(r, "endpoint"), text(r, "method"), status, class))
                .or_insert(0) += n;
        }
    }
    (classes, other_rows(other))
}
