//! The report's queries for ClickHouse: what `tokentap report --clickhouse` runs, and what
//! `deploy/clickhouse/report.sql` holds (these queries with the default settings, printed by
//! `tokentap report --sql`). They use the report's definitions:
//! - percentiles are nearest-rank, the value at rank ceil(p·n) of the sorted values, with no
//!   interpolation (`arraySort(groupArray(…))[ceil(p·n)]`), over the requests served;
//! - only generations are judged (cells, keys' latencies, in-flight, turns, the prefix cache):
//!   a generating shape (chat, completions, responses, messages) not refused as the client's
//!   fault (a 4xx other than 429); the rest is counted by endpoint, method and status;
//! - errors are every outcome but `ok` and `client_cancelled`, except a client's 4xx;
//! - a cell's arm is the experiment's, else the route;
//! - the concurrency level is bench's `concurrency`, else the live in-flight count bucketed
//!   1, 2, 3-4, 5-8, …; an open-loop record's (`request_rate`) level is that rate, in
//!   thousandths of a request a second, in a cell of its own (`rate_` = 1);
//! - inner sides of a gateway tap are the gateway's own requests: they feed the tap section
//!   only.
//!
//! Only SQL that ClickHouse 18.16 and today's ClickHouse both accept.

pub use super::sqlparams::{run_id_ok, Params};

/// One query: its name (also its `query_id` prefix) and what it gives.
#[derive(Debug, Clone)]
pub struct Query {
    pub name: &'static str,
    pub about: &'static str,
    /// Run by `report --clickhouse`; the others are for dashboards.
    pub report: bool,
    pub sql: String,
}

use super::sqlterms::{
    API, ARM, BUCKET, CLASS, CLIENT, ERROR, GEN, GENERATES, LEVEL, LIVE, OK, RATE, SERVED,
};

/// A string literal.
fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A number literal that reads back as the same double.
fn num(v: f64) -> String {
    format!("{v:?}")
}

/// The sorted served values of a nullable column, as an array.
fn sorted(col: &str, alias: &str) -> String {
    sorted_if(col, alias, OK)
}

/// The sorted values of a nullable column over the records `cond` keeps, as an array.
fn sorted_if(col: &str, alias: &str, cond: &str) -> String {
    format!("arraySort(groupArrayIf(assumeNotNull({col}), {cond} AND isNotNull({col}))) AS {alias}")
}

fn at(x: &str, q: &str) -> String {
    format!("if(length({x}) = 0, NULL, {x}[toUInt64(greatest(1, ceil({q} * length({x}))))])")
}

/// The sorted values of a nullable column over every record that has one (served or not).
fn sorted_all(col: &str, alias: &str) -> String {
    format!("arraySort(groupArrayIf(assumeNotNull({col}), isNotNull({col}))) AS {alias}")
}

/// n, p50, p95, p99 and max of a sorted array, as `{name}_n` … `{name}_max`.
fn dist(x: &str, name: &str) -> String {
    format!(
        "length({x}) AS {name}_n,\n    {} AS {name}_p50,\n    {} AS {name}_p95,\n    {} AS {name}_p99,\n    if(length({x}) = 0, NULL, {x}[length({x})]) AS {name}_max",
        at(x, "0.5"),
        at(x, "0.95"),
        at(x, "0.99"),
    )
}

/// The p95 an SLO judges (`report::SloP95`): the sorted served values `x` with the cell's
/// `failed_streams` ranked above them all, as `{name}_slo_beyond` (1: the p95 falls on a
/// failure) and `{name}_slo_p95` (null when it does, or when there is nothing to judge).
fn slo_at(x: &str, name: &str) -> String {
    let total = format!("(length({x}) + failed_streams)");
    let r = format!("toUInt64(greatest(1, ceil(0.95 * {total})))");
    format!(
        "toUInt8({total} > 0 AND {r} > length({x})) AS {name}_slo_beyond,\n    if({total} = 0 OR {r} > length({x}), NULL, {x}[{r}]) AS {name}_slo_p95"
    )
}

fn median(x: &str, name: &str) -> String {
    format!("{} AS {name}", at(x, "0.5"))
}

/// The parts of `ttft_split`, as the table's `ttft_split_*` columns name them.
pub const SPLIT: [&str; 5] = [
    "proxy_ms",
    "upstream_headers_ms",
    "engine_queue_ms",
    "engine_prefill_ms",
    "outside_engine_ms",
];

fn totals(t: &str) -> String {
    format!(
        "SELECT
    count() AS records,
    countIf({CLIENT} AND {LIVE}) AS live,
    countIf({CLIENT} AND {GEN} AND isNotNull(experiment_arm)) AS armed,
    countIf({CLIENT} AND {GEN} AND stream = 1 AND outcome = 'ok' AND status != 429) AS streams,
    countIf({CLIENT} AND {GEN} AND stream = 1 AND outcome = 'ok' AND status != 429
        AND isNull(input_tokens)) AS no_usage
FROM {t}"
    )
}

/// Records by class (`report::Class`), and the ones not judged by endpoint, method, status.
fn traffic(t: &str) -> String {
    format!(
        "SELECT
    endpoint, method, status, {CLASS} AS class, count() AS requests
FROM {t}
WHERE {CLIENT}
GROUP BY endpoint, method, status, class
ORDER BY endpoint, method, status, class"
    )
}

fn cells(p: &Params) -> String {
    let split_cols: Vec<String> = SPLIT
        .iter()
        .map(|s| median(&format!("split_{s}"), &format!("split_{s}_p50")))
        .collect();
    let split_arrays: Vec<String> = SPLIT
        .iter()
        .map(|s| sorted(&format!("ttft_split_{s}"), &format!("split_{s}")))
        .collect();
    let any_split: Vec<String> = SPLIT
        .iter()
        .map(|s| format!("isNotNull(ttft_split_{s})"))
        .collect();
    format!(
        "SELECT
    bucket_, arm, level, live_, rate_, requests, errors, throttled, cancelled, failed_streams, good,
    start_ns, end_ns, last_sent_ns, scheduled_n, scheduled_min, scheduled_max, out_tokens,
    {ttft},
    {ttft_slo},
    {tpot_slo},
    {tpot},
    {e2e},
    {tps},
    {input},
    {output},
    {queue},
    {lag},
    split_n,
    {split_cols}
FROM
(
    SELECT
        {BUCKET} AS bucket_,
        {ARM} AS arm,
        {LEVEL} AS level,
        toUInt8({LIVE}) AS live_,
        {RATE} AS rate_,
        count() AS requests,
        countIf({ERROR}) AS errors,
        countIf(status = 429) AS throttled,
        countIf(outcome = 'client_cancelled' AND status != 429) AS cancelled,
        countIf(stream = 1 AND (status = 429 OR outcome NOT IN ('ok', 'client_cancelled'))) AS failed_streams,
        countIf({OK}
            AND (isNull(ttft_ms) OR assumeNotNull(ttft_ms) <= {gt})
            AND (isNull(tpot_ms) OR assumeNotNull(tpot_ms) <= 0 OR 1000 / assumeNotNull(tpot_ms) >= {gs})) AS good,
        min(ts_us) * 1000 AS start_ns,
        max(ts_us * 1000 + toInt64(greatest(e2e_ms, 0) * 1000000)) AS end_ns,
        max(ts_us) * 1000 AS last_sent_ns,
        countIf(isNotNull(scheduled_ms)) AS scheduled_n,
        minIf(assumeNotNull(scheduled_ms), isNotNull(scheduled_ms)) AS scheduled_min,
        maxIf(assumeNotNull(scheduled_ms), isNotNull(scheduled_ms)) AS scheduled_max,
        sumIf(ifNull(output_tokens, 0), {OK}) AS out_tokens,
        {s_ttft},
        {s_tpot},
        arraySort(groupArrayIf(e2e_ms, {OK})) AS e2e,
        arraySort(groupArrayIf(1000 / assumeNotNull(tpot_ms), {OK} AND isNotNull(tpot_ms) AND assumeNotNull(tpot_ms) > 0)) AS tps,
        arraySort(groupArrayIf(toFloat64(assumeNotNull(input_tokens)), {OK} AND isNotNull(input_tokens))) AS input,
        arraySort(groupArrayIf(toFloat64(assumeNotNull(output_tokens)), {OK} AND isNotNull(output_tokens))) AS output,
        {s_queue},
        {s_lag},
        countIf({OK} AND ({any_split})) AS split_n,
        {split_arrays}
    FROM {t}
    WHERE {CLIENT} AND {GEN}
    GROUP BY bucket_, arm, level, live_, rate_
)
ORDER BY bucket_, arm, rate_, level, live_",
        ttft = dist("ttft", "ttft"),
        ttft_slo = slo_at("ttft", "ttft"),
        tpot_slo = slo_at("tpot", "tpot"),
        tpot = dist("tpot", "tpot"),
        e2e = dist("e2e", "e2e"),
        tps = dist("tps", "tok_s"),
        input = median("input", "input_tokens_p50"),
        output = median("output", "output_tokens_p50"),
        queue = dist("queue", "client_queue"),
        lag = dist("lag", "client_lag"),
        s_queue = sorted_all("client_queue_ms", "queue"),
        s_lag = sorted_all("client_lag_ms", "lag"),
        split_cols = split_cols.join(",\n    "),
        gt = num(p.goodput_ttft_ms),
        gs = num(p.goodput_tok_s),
        s_ttft = sorted("ttft_ms", "ttft"),
        s_tpot = sorted("tpot_ms", "tpot"),
        any_split = any_split.join(" OR "),
        split_arrays = split_arrays.join(",\n        "),
        t = p.from(),
    )
}

fn keys(p: &Params) -> String {
    let (arm, group, order) = if p.by_arm {
        (
            "\n        experiment_arm AS arm,".to_owned(),
            "key, arm",
            "requests DESC, key, isNotNull(arm), arm",
        )
    } else {
        (String::new(), "key", "requests DESC, key")
    };
    let arm_out = if p.by_arm { " arm," } else { "" };
    format!(
        "SELECT
    key,{arm_out} requests, errors, client_errors, input_tokens, output_tokens,
    {ttft},
    {tpot},
    {e2e}
FROM
(
    SELECT
        ifNull(key_id, '(no key)') AS key,{arm}
        count() AS requests,
        countIf({ERROR}) AS errors,
        countIf(NOT ({GEN})) AS client_errors,
        sum(ifNull(input_tokens, 0)) AS input_tokens,
        sum(ifNull(output_tokens, 0)) AS output_tokens,
        {s_ttft},
        {s_tpot},
        arraySort(groupArrayIf(e2e_ms, {SERVED})) AS e2e
    FROM {t}
    WHERE {CLIENT} AND {GENERATES}
    GROUP BY {group}
)
ORDER BY {order}
LIMIT {top}",
        ttft = dist("ttft", "ttft"),
        tpot = dist("tpot", "tpot"),
        e2e = dist("e2e", "e2e"),
        s_ttft = sorted_if("ttft_ms", "ttft", SERVED),
        s_tpot = sorted_if("tpot_ms", "tpot", SERVED),
        t = p.from(),
        top = p.top,
    )
}

/// Per API shape or per bucket (`name`), pooled over levels and arms, over the records
/// `filter` keeps.
fn shapes(t: &str, group: &str, filter: &str) -> String {
    format!(
        "SELECT
    name, requests, errors, input_tokens, output_tokens, reasoning_tokens,
    {ttft},
    {ttfo},
    {tpot},
    {e2e}
FROM
(
    SELECT
        {group} AS name,
        count() AS requests,
        countIf({ERROR}) AS errors,
        sum(ifNull(input_tokens, 0)) AS input_tokens,
        sum(ifNull(output_tokens, 0)) AS output_tokens,
        sum(ifNull(reasoning_tokens, 0)) AS reasoning_tokens,
        {s_ttft},
        {s_ttfo},
        {s_tpot},
        arraySort(groupArrayIf(e2e_ms, {OK})) AS e2e
    FROM {t}
    WHERE {CLIENT} AND {filter}
    GROUP BY name
)
ORDER BY name",
        ttft = dist("ttft", "ttft"),
        ttfo = dist("ttfo", "ttfo"),
        tpot = dist("tpot", "tpot"),
        e2e = dist("e2e", "e2e"),
        s_ttft = sorted("ttft_ms", "ttft"),
        s_ttfo = sorted("ttfo_ms", "ttfo"),
        s_tpot = sorted("tpot_ms", "tpot"),
    )
}

fn in_flight(t: &str) -> String {
    format!(
        "SELECT
    {d}
FROM
(
    SELECT arraySort(groupArray(toFloat64(in_flight))) AS v
    FROM {t}
    WHERE {CLIENT} AND {LIVE} AND {GEN}
)",
        d = dist("v", "in_flight")
    )
}

/// Per conversation turn (`bench --multi-turn` records).
fn by_turn(t: &str) -> String {
    format!(
        "SELECT
    turn_ AS turn, requests, errors, known, hits, cached, prompt,
    {ttft},
    {input}
FROM
(
    SELECT
        assumeNotNull(turn) AS turn_,
        count() AS requests,
        countIf({ERROR}) AS errors,
        countIf({OK} AND isNotNull(cached_tokens)) AS known,
        countIf({OK} AND ifNull(cached_tokens, 0) > 0) AS hits,
        sumIf(ifNull(cached_tokens, 0), {OK}) AS cached,
        sumIf(ifNull(input_tokens, 0), {OK} AND isNotNull(cached_tokens)) AS prompt,
        {s_ttft},
        arraySort(groupArrayIf(toFloat64(assumeNotNull(input_tokens)), {OK} AND isNotNull(input_tokens))) AS input
    FROM {t}
    WHERE {CLIENT} AND {GEN} AND isNotNull(turn)
    GROUP BY turn_
)
ORDER BY turn_",
        ttft = dist("ttft", "ttft"),
        input = median("input", "input_tokens_p50"),
        s_ttft = sorted("ttft_ms", "ttft"),
    )
}

fn prefix_cache(t: &str) -> String {
    format!(
        "SELECT
    scope, name, known, cached, prompt,
    {hit},
    {miss}
FROM
(
    SELECT
        tupleElement(s, 1) AS scope,
        tupleElement(s, 2) AS name,
        count() AS known,
        sum(c) AS cached,
        sum(prompt_) AS prompt,
        arraySort(groupArrayIf(assumeNotNull(ttft), c > 0 AND isNotNull(ttft))) AS hit_v,
        arraySort(groupArrayIf(assumeNotNull(ttft), c = 0 AND isNotNull(ttft))) AS miss_v
    FROM
    (
        SELECT
            arrayJoin([('all', ''), ('bucket', {BUCKET})]) AS s,
            assumeNotNull(cached_tokens) AS c,
            ifNull(input_tokens, 0) AS prompt_,
            ttft_ms AS ttft
        FROM {t}
        WHERE {CLIENT} AND {GEN} AND {OK} AND isNotNull(cached_tokens)
    )
    GROUP BY scope, name
)
ORDER BY scope, name",
        hit = dist("hit_v", "hit"),
        miss = dist("miss_v", "miss"),
    )
}

fn hop_rows(p: &Params) -> String {
    format!(
        "SELECT
    experiment_arm AS arm, experiment_pair_id AS pair_id, {BUCKET} AS bucket_, concurrency,
    in_flight, ts, ttft_ms, upstream_headers_ms, tpot_ms, e2e_ms
FROM {t}
WHERE experiment_arm IN ({g}, {d}) AND {OK}
ORDER BY ts_us, id",
        t = p.from(),
        g = lit(&p.gateway),
        d = lit(&p.direct),
    )
}

/// Every client-facing record with an arm and a pair id, served or not: the gateway board pairs
/// them and bootstraps its intervals.
fn board_rows(t: &str) -> String {
    format!(
        "SELECT
    experiment_arm AS arm, experiment_pair_id AS pair_id, concurrency, request_rate, in_flight,
    outcome, stream, ttft_ms, itl_p50_ms, itl_p99_ms, itl_max_ms, output_tokens,
    toUInt8(isNotNull(finish_reason)) AS has_finish, delivery_verdict
FROM {t}
WHERE isNotNull(experiment_arm) AND isNotNull(experiment_pair_id) AND {CLIENT}
ORDER BY ts_us, id"
    )
}

fn tap_rows(t: &str) -> String {
    format!(
        "SELECT
    route, {BUCKET} AS bucket_, concurrency, in_flight, gateway_overhead_ms, tap_side,
    toUInt8(isNotNull(tap_peer)) AS has_peer, tap_join, tap_unjoined, tap_admission_ms,
    tap_relay_ms, tap_ttft_ms
FROM {t}
WHERE isNotNull(tap_side)
ORDER BY ts_us, id"
    )
}

/// The paired differences gateway − direct, in SQL (for dashboards: the report computes them
/// from the pairs, with bootstrap intervals).
fn gateway_hop(p: &Params) -> String {
    let label = "if(isNotNull(concurrency), toString(assumeNotNull(concurrency)),
                   if(greatest(in_flight, 1) <= 2, toString(greatest(in_flight, 1)),
                      concat(toString(intDiv(toUInt64(pow(2, ceil(log2(greatest(in_flight, 1))))), 2) + 1), '-',
                             toString(toUInt64(pow(2, ceil(log2(greatest(in_flight, 1))))))))) AS label";
    let diff = |x: &str, g: &str, d: &str| {
        format!("arraySort(groupArrayIf(assumeNotNull({g}) - assumeNotNull({d}), isNotNull({g}) AND isNotNull({d}))) AS {x}")
    };
    let cols: Vec<String> = ["ttft", "upstream_headers", "tpot", "e2e"]
        .iter()
        .map(|m| {
            format!(
                "length({m}) AS {m}_n,\n    {} AS {m}_median,\n    {} AS {m}_p95,\n    {} AS {m}_p99",
                at(m, "0.5"),
                at(m, "0.95"),
                at(m, "0.99")
            )
        })
        .collect();
    format!(
        "SELECT
    scope, name, pairs,
    {cols}
FROM
(
    SELECT
        tupleElement(s, 1) AS scope,
        tupleElement(s, 2) AS name,
        count() AS pairs,
        {d_ttft},
        {d_uh},
        {d_tpot},
        arraySort(groupArray(g_e2e - d_e2e)) AS e2e
    FROM
    (
        SELECT
            arrayJoin([('overall', ''), ('bucket', bucket_), ('concurrency', label)]) AS s,
            g_ttft, d_ttft, g_uh, d_uh, g_tpot, d_tpot, g_e2e, d_e2e
        FROM
        (
            SELECT
                assumeNotNull(experiment_pair_id) AS pair,
                {BUCKET} AS bucket_,
                {label},
                ttft_ms AS g_ttft,
                upstream_headers_ms AS g_uh,
                tpot_ms AS g_tpot,
                e2e_ms AS g_e2e
            FROM {t}
            WHERE experiment_arm = {g} AND {OK} AND isNotNull(experiment_pair_id)
        ) AS g
        ALL INNER JOIN
        (
            SELECT
                assumeNotNull(experiment_pair_id) AS pair,
                ttft_ms AS d_ttft,
                upstream_headers_ms AS d_uh,
                tpot_ms AS d_tpot,
                e2e_ms AS d_e2e
            FROM {t}
            WHERE experiment_arm = {d} AND {OK} AND isNotNull(experiment_pair_id)
        ) AS d
        USING pair
    )
    GROUP BY scope, name
)
ORDER BY scope, name",
        cols = cols.join(",\n    "),
        d_ttft = diff("ttft", "g_ttft", "d_ttft"),
        d_uh = diff("upstream_headers", "g_uh", "d_uh"),
        d_tpot = diff("tpot", "g_tpot", "d_tpot"),
        t = p.from(),
        g = lit(&p.gateway),
        d = lit(&p.direct),
    )
}

fn shards(t: &str) -> String {
    format!("SELECT shard, shards, count() AS records FROM {t} GROUP BY shard, shards")
}

/// Every query, in the order `report --clickhouse` runs them.
pub fn queries(p: &Params) -> Vec<Query> {
    let from = p.from();
    let t = from.as_str();
    let q = |name, about, report, sql| Query {
        name,
        about,
        report,
        sql,
    };
    vec![
        q("totals", "records read, and how many of them are live traffic (no bench `concurrency` or `request_rate`)", true, totals(t)),
        q("cells", "cells[]: per bucket × arm × concurrency level (`live_`: a live in-flight range rather than a bench level; `rate_`: an open-loop cell, its level the offered rate in thousandths of a request a second): counts, goodput (the report's goodput SLO pair), wall time, percentiles, medians of tokens and of the TTFT split, client queue and lag times", true, cells(p)),
        q("keys", "keys[]: per API key (by arm with --by-arm), the top ones by requests, then by key", true, keys(p)),
        q("traffic", "traffic and other_traffic: every client-facing record by endpoint, method, status and class (served, cancelled, failed, throttled, client_error, other)", true, traffic(t)),
        q("by_api", "by_api: per API shape", true, shapes(t, API, "1")),
        q("by_bucket", "by_bucket: per prompt-shape bucket, pooled over levels and arms (generations)", true, shapes(t, BUCKET, GEN)),
        q("in_flight", "in_flight: the live in-flight counts", true, in_flight(t)),
        q("prefix_cache", "prefix_cache: TTFT by prefix-cache hit (cached_tokens > 0) and miss, overall ('all') and per bucket", true, prefix_cache(t)),
        q("by_turn", "by_turn: per conversation turn (bench --multi-turn): TTFT, prompt tokens, prefix-cache hits", true, by_turn(t)),
        q("hop_rows", "the served requests of the two experiment arms: the gateway-hop section pairs them and bootstraps its intervals", true, hop_rows(p)),
        q("tap_rows", "the gateway tap's records: the tap section joins them", true, tap_rows(t)),
        q("board_rows", "the client-facing records with an arm and a pair id, served or not: the gateway board pairs them and bootstraps its intervals", true, board_rows(t)),
        q("shards", "per bench shard and N (`bench --shard I/N`), its records; run with --run-id, that run's, which is whole when it has every shard from 1 to N", p.run_id.is_some(), shards(t)),
        q("gateway_hop", "gateway_hop: the paired differences gateway − direct (same pair_id, both served), overall, per bucket and per level of the gateway copy, without the report's bootstrap intervals", false, gateway_hop(p)),
    ]
}

/// The queries as one file, each with what it gives.
pub fn file(p: &Params) -> String {
    let mut out = format!(
        "-- tokentap report's queries for ClickHouse: what `tokentap report --clickhouse URL` runs,\n\
         -- printed by `tokentap report --sql`, here for table {}, --top {}{}, --hop-arms {},{},\n\
         -- goodput TTFT <= {} ms and tok/s >= {}{}.\n\
         -- Percentiles are nearest-rank: the value at rank ceil(p·n) of the sorted values, with no\n\
         -- interpolation, over the requests served (`outcome = 'ok'`). Only generations are judged\n\
         -- (a generating shape not refused with a client's 4xx). Errors are every outcome but `ok`\n\
         -- and `client_cancelled`, except a client's 4xx. Inner sides of a gateway tap feed only\n\
         -- the tap section.\n\
         -- Only SQL that ClickHouse 18.16 and today's ClickHouse both accept.\n",
        p.table,
        p.top,
        if p.by_arm { ", --by-arm" } else { "" },
        p.gateway,
        p.direct,
        p.goodput_ttft_ms,
        p.goodput_tok_s,
        super::model::Window::phrase(p.window.as_ref()),
    );
    for q in queries(p) {
        out.push_str(&format!("\n-- {}: {}\n{};\n", q.name, q.about, q.sql));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_sql_is_what_the_report_runs_with_its_defaults() {
        let slos = crate::report::Slos::default();
        let p = Params {
            table: "default.requests".into(),
            top: 20,
            by_arm: false,
            gateway: "gateway".into(),
            direct: "direct".into(),
            goodput_ttft_ms: slos.goodput_ttft_ms,
            goodput_tok_s: slos.goodput_tok_s,
            window: None,
            run_id: None,
        };
        let file_text = include_str!("../../deploy/clickhouse/report.sql");
        assert!(
            file_text == file(&p),
            "deploy/clickhouse/report.sql is not `tokentap report --sql`: regenerate it"
        );
    }

    #[test]
    fn literals_are_quoted() {
        assert_eq!(lit(r"it's a \ name"), r"'it\'s a \\ name'");
        assert_eq!(num(2000.0), "2000.0");
        assert_eq!(num(0.1), "0.1");
    }
}
