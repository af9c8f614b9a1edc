-- tokentap report's queries for ClickHouse: what `tokentap report --clickhouse URL` runs,
-- printed by `tokentap report --sql`, here for table default.requests, --top 20, --hop-arms gateway,direct,
-- goodput TTFT <= 500 ms and tok/s >= 6.
-- Percentiles are nearest-rank: the value at rank ceil(p·n) of the sorted values, with no
-- interpolation, over the requests served (`outcome = 'ok'`). Only generations are judged
-- (a generating shape not refused with a client's 4xx). Errors are every outcome but `ok`
-- and `client_cancelled`, except a client's 4xx. Inner sides of a gateway tap feed only
-- the tap section.
-- Only SQL that ClickHouse 18.16 and today's ClickHouse both accept.

-- totals: records read, and how many of them are live traffic (no bench `concurrency` or `request_rate`)
SELECT
    count() AS records,
    countIf(ifNull(tap_side, '') != 'inner' AND isNull(concurrency) AND isNull(request_rate)) AS live,
    countIf(ifNull(tap_side, '') != 'inner' AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429) AND isNotNull(experiment_arm)) AS armed,
    countIf(ifNull(tap_side, '') != 'inner' AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429) AND stream = 1 AND outcome = 'ok' AND status != 429) AS streams,
    countIf(ifNull(tap_side, '') != 'inner' AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429) AND stream = 1 AND outcome = 'ok' AND status != 429
        AND isNull(input_tokens)) AS no_usage
FROM default.requests;

-- cells: cells[]: per bucket × arm × concurrency level (`live_`: a live in-flight range rather than a bench level; `rate_`: an open-loop cell, its level the offered rate in thousandths of a request a second): counts, goodput (the report's goodput SLO pair), wall time, percentiles, medians of tokens and of the TTFT split, client queue and lag times
SELECT
    bucket_, arm, level, live_, rate_, requests, errors, throttled, cancelled, failed_streams, good,
    start_ns, end_ns, last_sent_ns, scheduled_n, scheduled_min, scheduled_max, out_tokens,
    length(ttft) AS ttft_n,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.5 * length(ttft))))]) AS ttft_p50,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.95 * length(ttft))))]) AS ttft_p95,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.99 * length(ttft))))]) AS ttft_p99,
    if(length(ttft) = 0, NULL, ttft[length(ttft)]) AS ttft_max,
    toUInt8((length(ttft) + failed_streams) > 0 AND toUInt64(greatest(1, ceil(0.95 * (length(ttft) + failed_streams)))) > length(ttft)) AS ttft_slo_beyond,
    if((length(ttft) + failed_streams) = 0 OR toUInt64(greatest(1, ceil(0.95 * (length(ttft) + failed_streams)))) > length(ttft), NULL, ttft[toUInt64(greatest(1, ceil(0.95 * (length(ttft) + failed_streams))))]) AS ttft_slo_p95,
    toUInt8((length(tpot) + failed_streams) > 0 AND toUInt64(greatest(1, ceil(0.95 * (length(tpot) + failed_streams)))) > length(tpot)) AS tpot_slo_beyond,
    if((length(tpot) + failed_streams) = 0 OR toUInt64(greatest(1, ceil(0.95 * (length(tpot) + failed_streams)))) > length(tpot), NULL, tpot[toUInt64(greatest(1, ceil(0.95 * (length(tpot) + failed_streams))))]) AS tpot_slo_p95,
    length(tpot) AS tpot_n,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.5 * length(tpot))))]) AS tpot_p50,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.95 * length(tpot))))]) AS tpot_p95,
    if(length(tpot) = 0, NULL, tpot[toUInt64(greatest(1, ceil(0.99 * length(tpot))))]) AS tpot_p99,
    if(length(tpot) = 0, NULL, tpot[length(tpot)]) AS tpot_max,
    length(e2e) AS e2e_n,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.5 * length(e2e))))]) AS e2e_p50,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.95 * length(e2e))))]) AS e2e_p95,
    if(length(e2e) = 0, NULL, e2e[toUInt64(greatest(1, ceil(0.99 * length(e2e))))]) AS e2e_p99,
    if(length(e2e) = 0, NULL, e2e[length(e2e)]) AS e2e_max,
    length(tps) AS tok_s_n,
    if(length(tps) = 0, NULL, tps[toUInt64(greatest(1, ceil(0.5 * length(tps))))]) AS tok_s_p50,
    if(length(tps) = 0, NULL, tps[toUInt64(greatest(1, ceil(0.95 * length(tps))))]) AS tok_s_p95,
    if(length(tps) = 0, NULL, tps[toUInt64(greatest(1, ceil(0.99 * length(tps))))]) AS tok_s_p99,
    if(length(tps) = 0, NULL, tps[length(tps)]) AS tok_s_max,
    if(length(input) = 0, NULL, input[toUInt64(greatest(1, ceil(0.5 * length(input))))]) AS input_tokens_p50,
    if(length(output) = 0, NULL, output[toUInt64(greatest(1, ceil(0.5 * length(output))))]) AS output_tokens_p50,
    length(queue) AS client_queue_n,
    if(length(queue) = 0, NULL, queue[toUInt64(greatest(1, ceil(0.5 * length(queue))))]) AS client_queue_p50,
    if(length(queue) = 0, NULL, queue[toUInt64(greatest(1, ceil(0.95 * length(queue))))]) AS client_queue_p95,
    if(length(queue) = 0, NULL, queue[toUInt64(greatest(1, ceil(0.99 * length(queue))))]) AS client_queue_p99,
    if(length(queue) = 0, NULL, queue[length(queue)]) AS client_queue_max,
    length(lag) AS client_lag_n,
    if(length(lag) = 0, NULL, lag[toUInt64(greatest(1, ceil(0.5 * length(lag))))]) AS client_lag_p50,
    if(length(lag) = 0, NULL, lag[toUInt64(greatest(1, ceil(0.95 * length(lag))))]) AS client_lag_p95,
    if(length(lag) = 0, NULL, lag[toUInt64(greatest(1, ceil(0.99 * length(lag))))]) AS client_lag_p99,
    if(length(lag) = 0, NULL, lag[length(lag)]) AS client_lag_max,
    split_n,
    if(length(split_proxy_ms) = 0, NULL, split_proxy_ms[toUInt64(greatest(1, ceil(0.5 * length(split_proxy_ms))))]) AS split_proxy_ms_p50,
    if(length(split_upstream_headers_ms) = 0, NULL, split_upstream_headers_ms[toUInt64(greatest(1, ceil(0.5 * length(split_upstream_headers_ms))))]) AS split_upstream_headers_ms_p50,
    if(length(split_engine_queue_ms) = 0, NULL, split_engine_queue_ms[toUInt64(greatest(1, ceil(0.5 * length(split_engine_queue_ms))))]) AS split_engine_queue_ms_p50,
    if(length(split_engine_prefill_ms) = 0, NULL, split_engine_prefill_ms[toUInt64(greatest(1, ceil(0.5 * length(split_engine_prefill_ms))))]) AS split_engine_prefill_ms_p50,
    if(length(split_outside_engine_ms) = 0, NULL, split_outside_engine_ms[toUInt64(greatest(1, ceil(0.5 * length(split_outside_engine_ms))))]) AS split_outside_engine_ms_p50
FROM
(
    SELECT
        ifNull(bucket, 'unknown') AS bucket_,
        if(isNotNull(experiment_arm), experiment_arm, nullIf(route, '')) AS arm,
        if(isNotNull(request_rate) AND assumeNotNull(request_rate) > 0,
           toUInt64(round(assumeNotNull(request_rate) * 1000)),
           if(isNotNull(concurrency), assumeNotNull(concurrency),
           if(greatest(in_flight, 1) <= 2, greatest(in_flight, 1),
              toUInt64(pow(2, ceil(log2(greatest(in_flight, 1)))))))) AS level,
        toUInt8(isNull(concurrency) AND isNull(request_rate)) AS live_,
        toUInt8(isNotNull(request_rate) AND assumeNotNull(request_rate) > 0) AS rate_,
        count() AS requests,
        countIf(outcome NOT IN ('ok', 'client_cancelled')
            AND NOT (status >= 400 AND status < 500 AND status != 429)) AS errors,
        countIf(status = 429) AS throttled,
        countIf(outcome = 'client_cancelled' AND status != 429) AS cancelled,
        countIf(stream = 1 AND (status = 429 OR outcome NOT IN ('ok', 'client_cancelled'))) AS failed_streams,
        countIf(outcome = 'ok'
            AND (isNull(ttft_ms) OR assumeNotNull(ttft_ms) <= 500.0)
            AND (isNull(tpot_ms) OR assumeNotNull(tpot_ms) <= 0 OR 1000 / assumeNotNull(tpot_ms) >= 6.0)) AS good,
        min(ts_us) * 1000 AS start_ns,
        max(ts_us * 1000 + toInt64(greatest(e2e_ms, 0) * 1000000)) AS end_ns,
        max(ts_us) * 1000 AS last_sent_ns,
        countIf(isNotNull(scheduled_ms)) AS scheduled_n,
        minIf(assumeNotNull(scheduled_ms), isNotNull(scheduled_ms)) AS scheduled_min,
        maxIf(assumeNotNull(scheduled_ms), isNotNull(scheduled_ms)) AS scheduled_max,
        sumIf(ifNull(output_tokens, 0), outcome = 'ok') AS out_tokens,
        arraySort(groupArrayIf(assumeNotNull(ttft_ms), outcome = 'ok' AND isNotNull(ttft_ms))) AS ttft,
        arraySort(groupArrayIf(assumeNotNull(tpot_ms), outcome = 'ok' AND isNotNull(tpot_ms))) AS tpot,
        arraySort(groupArrayIf(e2e_ms, outcome = 'ok')) AS e2e,
        arraySort(groupArrayIf(1000 / assumeNotNull(tpot_ms), outcome = 'ok' AND isNotNull(tpot_ms) AND assumeNotNull(tpot_ms) > 0)) AS tps,
        arraySort(groupArrayIf(toFloat64(assumeNotNull(input_tokens)), outcome = 'ok' AND isNotNull(input_tokens))) AS input,
        arraySort(groupArrayIf(toFloat64(assumeNotNull(output_tokens)), outcome = 'ok' AND isNotNull(output_tokens))) AS output,
        arraySort(groupArrayIf(assumeNotNull(client_queue_ms), isNotNull(client_queue_ms))) AS queue,
        arraySort(groupArrayIf(assumeNotNull(client_lag_ms), isNotNull(client_lag_ms))) AS lag,
        countIf(outcome = 'ok' AND (isNotNull(ttft_split_proxy_ms) OR isNotNull(ttft_split_upstream_headers_ms) OR isNotNull(ttft_split_engine_queue_ms) OR isNotNull(ttft_split_engine_prefill_ms) OR isNotNull(ttft_split_outside_engine_ms))) AS split_n,
        arraySort(groupArrayIf(assumeNotNull(ttft_split_proxy_ms), outcome = 'ok' AND isNotNull(ttft_split_proxy_ms))) AS split_proxy_ms,
        arraySort(groupArrayIf(assumeNotNull(ttft_split_upstream_headers_ms), outcome = 'ok' AND isNotNull(ttft_split_upstream_headers_ms))) AS split_upstream_headers_ms,
        arraySort(groupArrayIf(assumeNotNull(ttft_split_engine_queue_ms), outcome = 'ok' AND isNotNull(ttft_split_engine_queue_ms))) AS split_engine_queue_ms,
        arraySort(groupArrayIf(assumeNotNull(ttft_split_engine_prefill_ms), outcome = 'ok' AND isNotNull(ttft_split_engine_prefill_ms))) AS split_engine_prefill_ms,
        arraySort(groupArrayIf(assumeNotNull(ttft_split_outside_engine_ms), outcome = 'ok' AND isNotNull(ttft_split_outside_engine_ms))) AS split_outside_engine_ms
    FROM default.requests
    WHERE ifNull(tap_side, '') != 'inner' AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429)
    GROUP BY bucket_, arm, level, live_, rate_
)
ORDER BY bucket_, arm, rate_, level, live_;

-- keys: keys[]: per API key (by arm with --by-arm), the top ones by requests, then by key
SELECT
    key, requests, errors, client_errors, input_tokens, output_tokens,
    length(ttft) AS ttft_n,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.5 * length(ttft))))]) AS ttft_p50,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.95 * length(ttft))))]) AS ttft_p95,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.99 * length(ttft))))]) AS ttft_p99,
    if(length(ttft) = 0, NULL, ttft[length(ttft)]) AS ttft_max,
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
        ifNull(key_id, '(no key)') AS key,
        count() AS requests,
        countIf(outcome NOT IN ('ok', 'client_cancelled')
            AND NOT (status >= 400 AND status < 500 AND status != 429)) AS errors,
        countIf(NOT (multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429))) AS client_errors,
        sum(ifNull(input_tokens, 0)) AS input_tokens,
        sum(ifNull(output_tokens, 0)) AS output_tokens,
        arraySort(groupArrayIf(assumeNotNull(ttft_ms), outcome = 'ok' AND status != 429
            AND NOT (status >= 400 AND status < 500) AND isNotNull(ttft_ms))) AS ttft,
        arraySort(groupArrayIf(assumeNotNull(tpot_ms), outcome = 'ok' AND status != 429
            AND NOT (status >= 400 AND status < 500) AND isNotNull(tpot_ms))) AS tpot,
        arraySort(groupArrayIf(e2e_ms, outcome = 'ok' AND status != 429
            AND NOT (status >= 400 AND status < 500))) AS e2e
    FROM default.requests
    WHERE ifNull(tap_side, '') != 'inner' AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
    GROUP BY key
)
ORDER BY requests DESC, key
LIMIT 20;

-- traffic: traffic and other_traffic: every client-facing record by endpoint, method, status and class (served, cancelled, failed, throttled, client_error, other)
SELECT
    endpoint, method, status, multiIf(multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') NOT IN ('chat', 'completions', 'responses', 'messages'), 'other',
            status = 429, 'throttled',
            status >= 400 AND status < 500, 'client_error',
            outcome = 'ok', 'served',
            outcome = 'client_cancelled', 'cancelled', 'failed') AS class, count() AS requests
FROM default.requests
WHERE ifNull(tap_side, '') != 'inner'
GROUP BY endpoint, method, status, class
ORDER BY endpoint, method, status, class;

-- by_api: by_api: per API shape
SELECT
    name, requests, errors, input_tokens, output_tokens, reasoning_tokens,
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
        multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') AS name,
        count() AS requests,
        countIf(outcome NOT IN ('ok', 'client_cancelled')
            AND NOT (status >= 400 AND status < 500 AND status != 429)) AS errors,
        sum(ifNull(input_tokens, 0)) AS input_tokens,
        sum(ifNull(output_tokens, 0)) AS output_tokens,
        sum(ifNull(reasoning_tokens, 0)) AS reasoning_tokens,
        arraySort(groupArrayIf(assumeNotNull(ttft_ms), outcome = 'ok' AND isNotNull(ttft_ms))) AS ttft,
        arraySort(groupArrayIf(assumeNotNull(ttfo_ms), outcome = 'ok' AND isNotNull(ttfo_ms))) AS ttfo,
        arraySort(groupArrayIf(assumeNotNull(tpot_ms), outcome = 'ok' AND isNotNull(tpot_ms))) AS tpot,
        arraySort(groupArrayIf(e2e_ms, outcome = 'ok')) AS e2e
    FROM default.requests
    WHERE ifNull(tap_side, '') != 'inner' AND 1
    GROUP BY name
)
ORDER BY name;

-- by_bucket: by_bucket: per prompt-shape bucket, pooled over levels and arms (generations)
SELECT
    name, requests, errors, input_tokens, output_tokens, reasoning_tokens,
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
        ifNull(bucket, 'unknown') AS name,
        count() AS requests,
        countIf(outcome NOT IN ('ok', 'client_cancelled')
            AND NOT (status >= 400 AND status < 500 AND status != 429)) AS errors,
        sum(ifNull(input_tokens, 0)) AS input_tokens,
        sum(ifNull(output_tokens, 0)) AS output_tokens,
        sum(ifNull(reasoning_tokens, 0)) AS reasoning_tokens,
        arraySort(groupArrayIf(assumeNotNull(ttft_ms), outcome = 'ok' AND isNotNull(ttft_ms))) AS ttft,
        arraySort(groupArrayIf(assumeNotNull(ttfo_ms), outcome = 'ok' AND isNotNull(ttfo_ms))) AS ttfo,
        arraySort(groupArrayIf(assumeNotNull(tpot_ms), outcome = 'ok' AND isNotNull(tpot_ms))) AS tpot,
        arraySort(groupArrayIf(e2e_ms, outcome = 'ok')) AS e2e
    FROM default.requests
    WHERE ifNull(tap_side, '') != 'inner' AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429)
    GROUP BY name
)
ORDER BY name;

-- in_flight: in_flight: the live in-flight counts
SELECT
    length(v) AS in_flight_n,
    if(length(v) = 0, NULL, v[toUInt64(greatest(1, ceil(0.5 * length(v))))]) AS in_flight_p50,
    if(length(v) = 0, NULL, v[toUInt64(greatest(1, ceil(0.95 * length(v))))]) AS in_flight_p95,
    if(length(v) = 0, NULL, v[toUInt64(greatest(1, ceil(0.99 * length(v))))]) AS in_flight_p99,
    if(length(v) = 0, NULL, v[length(v)]) AS in_flight_max
FROM
(
    SELECT arraySort(groupArray(toFloat64(in_flight))) AS v
    FROM default.requests
    WHERE ifNull(tap_side, '') != 'inner' AND isNull(concurrency) AND isNull(request_rate) AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429)
);

-- prefix_cache: prefix_cache: TTFT by prefix-cache hit (cached_tokens > 0) and miss, overall ('all') and per bucket
SELECT
    scope, name, known, cached, prompt,
    length(hit_v) AS hit_n,
    if(length(hit_v) = 0, NULL, hit_v[toUInt64(greatest(1, ceil(0.5 * length(hit_v))))]) AS hit_p50,
    if(length(hit_v) = 0, NULL, hit_v[toUInt64(greatest(1, ceil(0.95 * length(hit_v))))]) AS hit_p95,
    if(length(hit_v) = 0, NULL, hit_v[toUInt64(greatest(1, ceil(0.99 * length(hit_v))))]) AS hit_p99,
    if(length(hit_v) = 0, NULL, hit_v[length(hit_v)]) AS hit_max,
    length(miss_v) AS miss_n,
    if(length(miss_v) = 0, NULL, miss_v[toUInt64(greatest(1, ceil(0.5 * length(miss_v))))]) AS miss_p50,
    if(length(miss_v) = 0, NULL, miss_v[toUInt64(greatest(1, ceil(0.95 * length(miss_v))))]) AS miss_p95,
    if(length(miss_v) = 0, NULL, miss_v[toUInt64(greatest(1, ceil(0.99 * length(miss_v))))]) AS miss_p99,
    if(length(miss_v) = 0, NULL, miss_v[length(miss_v)]) AS miss_max
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
            arrayJoin([('all', ''), ('bucket', ifNull(bucket, 'unknown'))]) AS s,
            assumeNotNull(cached_tokens) AS c,
            ifNull(input_tokens, 0) AS prompt_,
            ttft_ms AS ttft
        FROM default.requests
        WHERE ifNull(tap_side, '') != 'inner' AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429) AND outcome = 'ok' AND isNotNull(cached_tokens)
    )
    GROUP BY scope, name
)
ORDER BY scope, name;

-- by_turn: by_turn: per conversation turn (bench --multi-turn): TTFT, prompt tokens, prefix-cache hits
SELECT
    turn_ AS turn, requests, errors, known, hits, cached, prompt,
    length(ttft) AS ttft_n,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.5 * length(ttft))))]) AS ttft_p50,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.95 * length(ttft))))]) AS ttft_p95,
    if(length(ttft) = 0, NULL, ttft[toUInt64(greatest(1, ceil(0.99 * length(ttft))))]) AS ttft_p99,
    if(length(ttft) = 0, NULL, ttft[length(ttft)]) AS ttft_max,
    if(length(input) = 0, NULL, input[toUInt64(greatest(1, ceil(0.5 * length(input))))]) AS input_tokens_p50
FROM
(
    SELECT
        assumeNotNull(turn) AS turn_,
        count() AS requests,
        countIf(outcome NOT IN ('ok', 'client_cancelled')
            AND NOT (status >= 400 AND status < 500 AND status != 429)) AS errors,
        countIf(outcome = 'ok' AND isNotNull(cached_tokens)) AS known,
        countIf(outcome = 'ok' AND ifNull(cached_tokens, 0) > 0) AS hits,
        sumIf(ifNull(cached_tokens, 0), outcome = 'ok') AS cached,
        sumIf(ifNull(input_tokens, 0), outcome = 'ok' AND isNotNull(cached_tokens)) AS prompt,
        arraySort(groupArrayIf(assumeNotNull(ttft_ms), outcome = 'ok' AND isNotNull(ttft_ms))) AS ttft,
        arraySort(groupArrayIf(toFloat64(assumeNotNull(input_tokens)), outcome = 'ok' AND isNotNull(input_tokens))) AS input
    FROM default.requests
    WHERE ifNull(tap_side, '') != 'inner' AND multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other') IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429) AND isNotNull(turn)
    GROUP BY turn_
)
ORDER BY turn_;

-- hop_rows: the served requests of the two experiment arms: the gateway-hop section pairs them and bootstraps its intervals
SELECT
    experiment_arm AS arm, experiment_pair_id AS pair_id, ifNull(bucket, 'unknown') AS bucket_, concurrency,
    in_flight, ts, ttft_ms, upstream_headers_ms, tpot_ms, e2e_ms
FROM default.requests
WHERE experiment_arm IN ('gateway', 'direct') AND outcome = 'ok'
ORDER BY ts_us, id;

-- tap_rows: the gateway tap's records: the tap section joins them
SELECT
    route, ifNull(bucket, 'unknown') AS bucket_, concurrency, in_flight, gateway_overhead_ms, tap_side,
    toUInt8(isNotNull(tap_peer)) AS has_peer, tap_join, tap_unjoined, tap_admission_ms,
    tap_relay_ms, tap_ttft_ms
FROM default.requests
WHERE isNotNull(tap_side)
ORDER BY ts_us, id;

-- board_rows: the client-facing records with an arm and a pair id, served or not: the gateway board pairs them and bootstraps its intervals
SELECT
    experiment_arm AS arm, experiment_pair_id AS pair_id, concurrency, request_rate, in_flight,
    outcome, stream, ttft_ms, itl_p50_ms, itl_p99_ms, itl_max_ms, output_tokens,
    toUInt8(isNotNull(finish_reason)) AS has_finish, delivery_verdict
FROM default.requests
WHERE isNotNull(experiment_arm) AND isNotNull(experiment_pair_id) AND ifNull(tap_side, '') != 'inner'
ORDER BY ts_us, id;

-- shards: per bench shard and N (`bench --shard I/N`), its records; run with --run-id, that run's, which is whole when it has every shard from 1 to N
SELECT shard, shards, count() AS records FROM default.requests GROUP BY shard, shards;

-- gateway_hop: gateway_hop: the paired differences gateway − direct (same pair_id, both served), overall, per bucket and per level of the gateway copy, without the report's bootstrap intervals
SELECT
    scope, name, pairs,
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
            FROM default.requests
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
            FROM default.requests
            WHERE experiment_arm = 'direct' AND outcome = 'ok' AND isNotNull(experiment_pair_id)
        ) AS d
        USING pair
    )
    GROUP BY scope, name
)
ORDER BY scope, name;
