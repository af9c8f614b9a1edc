-- `tokentap report --format json`'s main figures, computed where the records are: four queries,
-- `cells[]`, `keys[]`, `by_bucket`, then the `gateway_hop` pairs, separated by `;`.
--
-- cells[]: one row per
-- prompt-shape bucket × experiment arm × concurrency level, with the report's definitions:
-- - the level is bench's `concurrency`, else the live in-flight count bucketed 1, 2, 3-4, 5-8, …;
-- - inner sides of a gateway tap are left out (they are the gateway's own requests);
-- - percentiles are nearest-rank, the value at rank ceil(p·n) of the sorted values (no
--   interpolation), over the requests served (`outcome = 'ok'`);
-- - errors are every outcome but `ok` and `client_cancelled`;
-- - aggregate tok/s is the served output tokens ÷ (last end − first start) of the cell.
-- Only SQL that ClickHouse 18.16 and today's ClickHouse both accept.
SELECT
    bucket_,
    arm,
    level,
    label,
    requests,
    errors,
    errors / requests AS error_rate,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.5 * length(ttft))))]) AS ttft_p50,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.95 * length(ttft))))]) AS ttft_p95,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.99 * length(ttft))))]) AS ttft_p99,
    if(length(ttft) = 0, NULL, ttft[length(ttft)]) AS ttft_max,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.5 * length(tpot))))]) AS tpot_p50,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.95 * length(tpot))))]) AS tpot_p95,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.99 * length(tpot))))]) AS tpot_p99,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.5 * length(e2e))))]) AS e2e_p50,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.95 * length(e2e))))]) AS e2e_p95,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.99 * length(e2e))))]) AS e2e_p99,
    if(length(tps) = 0, NULL, tps[toUInt64(greatest(1, ceil(0.5 * length(tps))))]) AS tok_s_per_stream_p50,
    if(wall_s > 0, out_tokens / wall_s, NULL) AS aggregate_tok_s
FROM
(
    SELECT
        ifNull(bucket, 'unknown') AS bucket_,
        experiment_arm AS arm,
        if(isNotNull(concurrency), assumeNotNull(concurrency),
           if(greatest(in_flight, 1) <= 2, greatest(in_flight, 1),
              toUInt64(pow(2, ceil(log2(greatest(in_flight, 1))))))) AS level,
        if(isNotNull(concurrency), toString(assumeNotNull(concurrency)),
           if(level <= 2, toString(level), concat(toString(intDiv(level, 2) + 1), '-', toString(level)))) AS label,
        count() AS requests,
        countIf(outcome NOT IN ('ok', 'client_cancelled')) AS errors,
        arraySort(groupArrayIf(assumeNotNull(ttft_ms), outcome = 'ok' AND isNotNull(ttft_ms))) AS ttft,
        arraySort(groupArrayIf(assumeNotNull(tpot_ms), outcome = 'ok' AND isNotNull(tpot_ms))) AS tpot,
        arraySort(groupArrayIf(e2e_ms, outcome = 'ok')) AS e2e,
        arraySort(groupArrayIf(1000 / assumeNotNull(tpot_ms), outcome = 'ok' AND isNotNull(tpot_ms) AND assumeNotNull(tpot_ms) > 0)) AS tps,
        sumIf(ifNull(output_tokens, 0), outcome = 'ok') AS out_tokens,
        (max(ts_us + e2e_ms * 1000) - min(ts_us)) / 1000000 AS wall_s
    FROM requests
    WHERE ifNull(tap_side, '') != 'inner'
    GROUP BY bucket_, arm, level, label
)
ORDER BY bucket_, arm, level, label
FORMAT JSONEachRow;

-- keys[]: per API key fingerprint (or alias), the top 20 by requests (then by key): requests,
-- error rate, tokens over every request, TTFT/TPOT/E2E percentiles over the served ones. Inner
-- tap sides are left out. (`tokentap report --top N` changes the 20.)
SELECT
    key,
    requests,
    errors / requests AS error_rate,
    input_tokens,
    output_tokens,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.5 * length(ttft))))]) AS ttft_p50,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.95 * length(ttft))))]) AS ttft_p95,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.99 * length(ttft))))]) AS ttft_p99,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.5 * length(tpot))))]) AS tpot_p50,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.95 * length(tpot))))]) AS tpot_p95,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.5 * length(e2e))))]) AS e2e_p50,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.95 * length(e2e))))]) AS e2e_p95
FROM
(
    SELECT
        ifNull(key_id, '(no key)') AS key,
        count() AS requests,
        countIf(outcome NOT IN ('ok', 'client_cancelled')) AS errors,
        sum(ifNull(input_tokens, 0)) AS input_tokens,
        sum(ifNull(output_tokens, 0)) AS output_tokens,
        arraySort(groupArrayIf(assumeNotNull(ttft_ms), outcome = 'ok' AND isNotNull(ttft_ms))) AS ttft,
        arraySort(groupArrayIf(assumeNotNull(tpot_ms), outcome = 'ok' AND isNotNull(tpot_ms))) AS tpot,
        arraySort(groupArrayIf(e2e_ms, outcome = 'ok')) AS e2e
    FROM requests
    WHERE ifNull(tap_side, '') != 'inner'
    GROUP BY key
)
ORDER BY requests DESC, key
LIMIT 20
FORMAT JSONEachRow;

-- by_bucket: per prompt-shape bucket, pooled over concurrency levels and arms (inner tap sides
-- left out): requests, error rate, tokens over every request, and TTFT/TTFO/TPOT/E2E n,
-- p50/p95/p99, max over the served ones.
SELECT
    bucket_,
    requests,
    errors / requests AS error_rate,
    input_tokens,
    output_tokens,
    reasoning_tokens,
    length(ttft) AS ttft_n,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.5 * length(ttft))))]) AS ttft_p50,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.95 * length(ttft))))]) AS ttft_p95,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.99 * length(ttft))))]) AS ttft_p99,
    if(length(ttft) = 0, NULL, ttft[length(ttft)]) AS ttft_max,
    length(ttfo) AS ttfo_n,
    if(length(ttfo) = 0, NULL, ttfo[toUInt64(greatest(1, ceil(0.5 * length(ttfo))))]) AS ttfo_p50,
    if(length(ttfo) = 0, NULL, ttfo[toUInt64(greatest(1, ceil(0.95 * length(ttfo))))]) AS ttfo_p95,
    if(length(ttfo) = 0, NULL, ttfo[toUInt64(greatest(1, ceil(0.99 * length(ttfo))))]) AS ttfo_p99,
    if(length(ttfo) = 0, NULL, ttfo[length(ttfo)]) AS ttfo_max,
    length(tpot) AS tpot_n,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.5 * length(tpot))))]) AS tpot_p50,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.95 * length(tpot))))]) AS tpot_p95,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.99 * length(tpot))))]) AS tpot_p99,
    if(length(tpot) = 0, NULL, tpot[length(tpot)]) AS tpot_max,
    length(e2e) AS e2e_n,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.5 * length(e2e))))]) AS e2e_p50,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.95 * length(e2e))))]) AS e2e_p95,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.99 * length(e2e))))]) AS e2e_p99,
    if(length(e2e) = 0, NULL, e2e[length(e2e)]) AS e2e_max
FROM
(
    SELECT
        ifNull(bucket, 'unknown') AS bucket_,
        count() AS requests,
        countIf(outcome NOT IN ('ok', 'client_cancelled')) AS errors,
        sum(ifNull(input_tokens, 0)) AS input_tokens,
        sum(ifNull(output_tokens, 0)) AS output_tokens,
        sum(ifNull(reasoning_tokens, 0)) AS reasoning_tokens,
        arraySort(groupArrayIf(assumeNotNull(ttft_ms), outcome = 'ok' AND isNotNull(ttft_ms))) AS ttft,
        arraySort(groupArrayIf(assumeNotNull(ttfo_ms), outcome = 'ok' AND isNotNull(ttfo_ms))) AS ttfo,
        arraySort(groupArrayIf(assumeNotNull(tpot_ms), outcome = 'ok' AND isNotNull(tpot_ms))) AS tpot,
        arraySort(groupArrayIf(e2e_ms, outcome = 'ok')) AS e2e
    FROM requests
    WHERE ifNull(tap_side, '') != 'inner'
    GROUP BY bucket_
)
ORDER BY bucket_
FORMAT JSONEachRow;

-- gateway_hop: the paired differences gateway − direct (same `experiment_pair_id`, both served)
-- of TTFT, response-header time, TPOT and E2E: n, median, p95 and p99 overall (`scope`
-- 'overall'), per bucket ('bucket') and per concurrency level of the gateway copy
-- ('concurrency'). The arms are named 'gateway' and 'direct' (`report --hop-arms`). The report's
-- bootstrap intervals are resampling, not SQL: they are left to `tokentap report`.
SELECT
    scope,
    name,
    pairs,
    length(ttft) AS ttft_n,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.5 * length(ttft))))]) AS ttft_median,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.95 * length(ttft))))]) AS ttft_p95,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.99 * length(ttft))))]) AS ttft_p99,
    length(upstream_headers) AS upstream_headers_n,
    if(length(upstream_headers) = 0, NULL, upstream_headers[toUInt64(greatest(1, ceil(0.5 * length(upstream_headers))))]) AS upstream_headers_median,
    if(length(upstream_headers) = 0, NULL, upstream_headers[toUInt64(greatest(1, ceil(0.95 * length(upstream_headers))))]) AS upstream_headers_p95,
    if(length(upstream_headers) = 0, NULL, upstream_headers[toUInt64(greatest(1, ceil(0.99 * length(upstream_headers))))]) AS upstream_headers_p99,
    length(tpot) AS tpot_n,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.5 * length(tpot))))]) AS tpot_median,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.95 * length(tpot))))]) AS tpot_p95,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.99 * length(tpot))))]) AS tpot_p99,
    length(e2e) AS e2e_n,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.5 * length(e2e))))]) AS e2e_median,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.95 * length(e2e))))]) AS e2e_p95,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.99 * length(e2e))))]) AS e2e_p99
FROM
(
    SELECT
        tupleElement(s, 1) AS scope,
        tupleElement(s, 2) AS name,
        count() AS pairs,
        arraySort(groupArrayIf(assumeNotNull(g_ttft) - assumeNotNull(d_ttft), isNotNull(g_ttft) AND isNotNull(d_ttft))) AS ttft,
        arraySort(groupArrayIf(assumeNotNull(g_uh) - assumeNotNull(d_uh), isNotNull(g_uh) AND isNotNull(d_uh))) AS upstream_headers,
        arraySort(groupArrayIf(assumeNotNull(g_tpot) - assumeNotNull(d_tpot), isNotNull(g_tpot) AND isNotNull(d_tpot))) AS tpot,
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
                ifNull(bucket, 'unknown') AS bucket_,
                if(isNotNull(concurrency), toString(assumeNotNull(concurrency)),
                   if(greatest(in_flight, 1) <= 2, toString(greatest(in_flight, 1)),
                      concat(toString(intDiv(toUInt64(pow(2, ceil(log2(greatest(in_flight, 1))))), 2) + 1), '-',
                             toString(toUInt64(pow(2, ceil(log2(greatest(in_flight, 1))))))))) AS label,
                ttft_ms AS g_ttft,
                upstream_headers_ms AS g_uh,
                tpot_ms AS g_tpot,
                e2e_ms AS g_e2e
            FROM requests
            WHERE experiment_arm = 'gateway' AND outcome = 'ok' AND isNotNull(experiment_pair_id)
        ) AS g
        ALL INNER JOIN
        (
            SELECT
                assumeNotNull(experiment_pair_id) AS pair,
                ttft_ms AS d_ttft,
                upstream_headers_ms AS d_uh,
                tpot_ms AS d_tpot,
                e2e_ms AS d_e2e
            FROM requests
            WHERE experiment_arm = 'direct' AND outcome = 'ok' AND isNotNull(experiment_pair_id)
        ) AS d
        USING pair
    )
    GROUP BY scope, name
)
ORDER BY scope, name
FORMAT JSONEachRow
