//! Per API shape rows, per bucket rows pooled over concurrency levels, and TTFT split by
//! prefix-cache hit vs miss.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{dist, Dist};
use crate::meter::{Outcome, RequestRecord};

/// One API shape's (or one bucket's) requests.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeRow {
    pub requests: usize,
    pub error_rate: f64,
    pub ttft_ms: Dist,
    /// Time to the first output (non-reasoning) token.
    pub ttfo_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens that were reasoning, where usage says.
    pub reasoning_tokens: u64,
}

/// TTFT of requests whose prompt hit the prefix cache (`cached_tokens` > 0) and of those that
/// did not (`cached_tokens` = 0); requests whose usage does not say are left out.
#[derive(Debug, Clone, Serialize)]
pub struct CacheSplit {
    pub hit: Dist,
    pub miss: Dist,
    /// Cached ÷ all prompt tokens, over the requests that say.
    pub cached_token_share: Option<f64>,
    pub by_bucket: BTreeMap<String, CacheBucket>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheBucket {
    pub hit: Dist,
    pub miss: Dist,
}

fn served(r: &RequestRecord) -> bool {
    r.outcome == Outcome::Ok
}

pub fn by_api<'a>(records: impl Iterator<Item = &'a RequestRecord>) -> BTreeMap<String, ShapeRow> {
    group_by(records, |r| r.api.as_str().to_owned())
}

/// Per prompt shape, pooled over concurrency levels (and arms): how live traffic is read first.
pub fn by_bucket<'a>(
    records: impl Iterator<Item = &'a RequestRecord>,
) -> BTreeMap<String, ShapeRow> {
    group_by(records, |r| {
        r.bucket.clone().unwrap_or_else(|| "unknown".into())
    })
}

fn group_by<'a>(
    records: impl Iterator<Item = &'a RequestRecord>,
    key: impl Fn(&RequestRecord) -> String,
) -> BTreeMap<String, ShapeRow> {
    let mut groups: BTreeMap<String, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records {
        groups.entry(key(r)).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(api, rs)| {
            let ok: Vec<&&RequestRecord> = rs.iter().filter(|r| served(r)).collect();
            let errors = rs
                .iter()
                .filter(|r| !matches!(r.outcome, Outcome::Ok | Outcome::ClientCancelled))
                .count();
            let row = ShapeRow {
                requests: rs.len(),
                error_rate: errors as f64 / rs.len().max(1) as f64,
                ttft_ms: dist(ok.iter().filter_map(|r| r.ttft_ms)),
                ttfo_ms: dist(ok.iter().filter_map(|r| r.ttfo_ms)),
                tpot_ms: dist(ok.iter().filter_map(|r| r.tpot_ms)),
                e2e_ms: dist(ok.iter().map(|r| r.e2e_ms)),
                input_tokens: rs.iter().filter_map(|r| r.input_tokens).sum(),
                output_tokens: rs.iter().filter_map(|r| r.output_tokens).sum(),
                reasoning_tokens: rs.iter().filter_map(|r| r.reasoning_tokens).sum(),
            };
            (api, row)
        })
        .collect()
}

pub fn cache_split<'a>(records: impl Iterator<Item = &'a RequestRecord>) -> Option<CacheSplit> {
    let known: Vec<&RequestRecord> = records
        .filter(|r| served(r) && r.cached_tokens.is_some())
        .collect();
    if known.is_empty() {
        return None;
    }
    let hit = |r: &&RequestRecord| r.cached_tokens.is_some_and(|c| c > 0);
    let split = |rs: &[&RequestRecord]| {
        (
            dist(rs.iter().filter(|r| hit(r)).filter_map(|r| r.ttft_ms)),
            dist(rs.iter().filter(|r| !hit(r)).filter_map(|r| r.ttft_ms)),
        )
    };
    let (h, m) = split(&known);
    let mut buckets: BTreeMap<String, Vec<&RequestRecord>> = BTreeMap::new();
    for r in &known {
        buckets
            .entry(r.bucket.clone().unwrap_or_else(|| "unknown".into()))
            .or_default()
            .push(r);
    }
    let (cached, prompt) = known.iter().fold((0u64, 0u64), |(c, p), r| {
        (
            c + r.cached_tokens.unwrap_or(0),
            p + r.input_tokens.unwrap_or(0),
        )
    });
    Some(CacheSplit {
        hit: h,
        miss: m,
        cached_token_share: (prompt > 0).then(|| cached as f64 / prompt as f64),
        by_bucket: buckets
            .into_iter()
            .map(|(b, rs)| {
                let (hit, miss) = split(&rs);
                (b, CacheBucket { hit, miss })
            })
            .collect(),
    })
}
