-- tokentap's request records in ClickHouse: one row per record (docs/records.md), a column per
-- field (tests/schema.rs checks that every field has one, of a type that holds it), the nested
-- objects flattened with `_` (experiment.arm → experiment_arm, gateway_tap.side → tap_side,
-- ttft_split.proxy_ms → ttft_split_proxy_ms, delivery.verdict → delivery_verdict):
-- JSONEachRow of ClickHouse 18.16 cannot map a JSON object into columns, and every version
-- accepts flat rows. Only SQL that ClickHouse 18.16 and today's ClickHouse (chdb) both accept.
--
--   clickhouse-client --multiquery < deploy/clickhouse/schema.sql
--   tokentap-to-clickhouse: scripts/clickhouse_load.py flattens a JSONL log into rows.

CREATE TABLE IF NOT EXISTS requests
(
    ts String,                                  -- RFC 3339, microseconds, UTC ("…T02:44:00.123456Z")
    -- The same instant as microseconds since the epoch (18.16 has no DateTime64).
    ts_us Int64 MATERIALIZED toInt64(toUInt32(parseDateTimeBestEffort(concat(substring(ts, 1, 19), 'Z')))) * 1000000
        + toInt64(toUInt32OrZero(substring(ts, 21, 6))),
    date Date MATERIALIZED toDate(parseDateTimeBestEffort(concat(substring(ts, 1, 19), 'Z'))),
    id String,
    route String,
    experiment_arm Nullable(String),
    experiment_pair_id Nullable(String),
    method String,
    endpoint String,
    api String,
    endpoint_api Nullable(String),
    model Nullable(String),
    upstream_model Nullable(String),
    response_model Nullable(String),
    key_id Nullable(String),
    stream UInt8,
    status UInt16,
    outcome String,
    input_tokens Nullable(UInt64),
    output_tokens Nullable(UInt64),
    tokens_source Nullable(String),
    cached_tokens Nullable(UInt64),
    reasoning_tokens Nullable(UInt64),
    ttft_ms Nullable(Float64),
    ttfo_ms Nullable(Float64),
    tpot_ms Nullable(Float64),
    e2e_ms Float64,
    itl_p50_ms Nullable(Float64),
    itl_p99_ms Nullable(Float64),
    itl_max_ms Nullable(Float64),
    body_read_ms Nullable(Float64),
    upstream_headers_ms Nullable(Float64),
    first_byte_ms Nullable(Float64),
    first_event_ms Nullable(Float64),
    last_token_ms Nullable(Float64),
    upstream_sent_ms Nullable(Float64),
    in_flight UInt64,
    max_tokens Nullable(UInt64),
    request_bytes UInt64,
    response_bytes UInt64,
    events UInt64,
    content_events UInt64,
    done Nullable(UInt8),
    finish_reason Nullable(String),             -- why it ended, in the response's word (bounded)
    bucket Nullable(String),
    parse_errors UInt64,
    oversize_events UInt64,
    engine_queue_ms Nullable(Float64),
    engine_ttft_ms Nullable(Float64),
    engine_decode_ms Nullable(Float64),
    gateway_overhead_ms Nullable(Float64),
    concurrency Nullable(UInt64),
    request_rate Nullable(Float64),
    scheduled_ms Nullable(Float64),
    client_queue_ms Nullable(Float64),
    client_lag_ms Nullable(Float64),
    turn Nullable(UInt32),
    prompt_index Nullable(UInt64),
    run Nullable(UInt32),
    run_id Nullable(String),                    -- bench's run (every shard of a distributed run shares it)
    shard Nullable(UInt32),                     -- bench --shard I/N: I, from 1
    shards Nullable(UInt32),                    -- and N
    tap_side Nullable(String),
    tap_peer Nullable(String),
    tap_join Nullable(String),
    tap_unjoined Nullable(String),
    tap_admission_ms Nullable(Float64),
    tap_relay_ms Nullable(Float64),
    tap_ttft_ms Nullable(Float64),
    tap_relay_p50_ms Nullable(Float64),
    tap_relay_max_ms Nullable(Float64),
    tap_held_tokens Nullable(UInt64),
    tap_relay_verdict Nullable(String),
    ttft_split_proxy_ms Nullable(Float64),
    ttft_split_upstream_headers_ms Nullable(Float64),
    ttft_split_engine_queue_ms Nullable(Float64),
    ttft_split_engine_prefill_ms Nullable(Float64),
    ttft_split_outside_engine_ms Nullable(Float64),
    request_id Nullable(String),                -- the client's, at most 128 bytes
    upstream_request_id Nullable(String),       -- the upstream's (chatcmpl-…), at most 128 bytes
    join_id Nullable(String),                   -- the tap across pods: the x-tokentap-join id received
    join_sent UInt8,                            -- the route sent its own id (join_header)
    boot_id Nullable(String),                   -- the host's boot id, beside join_id / join_sent
    trace_id Nullable(String),
    span_id Nullable(String),
    content_encoding Nullable(String),
    decode_error Nullable(String),
    delivery_content_reads Nullable(UInt64),
    delivery_max_events_per_read Nullable(UInt64),
    delivery_first_read_events Nullable(UInt64),
    delivery_coalesced_share Nullable(Float64),
    delivery_burst_silence_ms Nullable(Float64),
    delivery_verdict Nullable(String),
    clock String,
    stamp_lag_ms Nullable(Float64),
    error Nullable(String)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(date)
ORDER BY (route, date, ts_us);

-- A table made by an earlier schema.sql lacks the request ids; rows insert without them (the
-- sink skips unknown fields). To keep them, add them once:
-- ALTER TABLE requests ADD COLUMN request_id Nullable(String), ADD COLUMN upstream_request_id Nullable(String);
-- Likewise the columns added when the table came to store every field (deploy/clickhouse/README.md
-- has the ALTER).

-- Keep 90 days. TTL needs ClickHouse 19.6 or later (18.16 has none: drop old partitions with
-- `ALTER TABLE requests DROP PARTITION 202601` there instead).
-- ALTER TABLE requests MODIFY TTL date + INTERVAL 90 DAY;

-- Per-minute rollups per route, model, bucket and outcome: counts, tokens and latency sums for
-- rates and means over long ranges without scanning the rows. (Percentiles need the rows, or a
-- quantile state: `report.sql` reads `requests`.) Filled by every insert into `requests`.
CREATE MATERIALIZED VIEW IF NOT EXISTS requests_per_minute
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(date)
ORDER BY (route, model_, bucket_, outcome, minute)
AS SELECT
    date,
    toStartOfMinute(toDateTime(intDiv(ts_us, 1000000))) AS minute,
    route,
    ifNull(model, '') AS model_,
    ifNull(bucket, 'unknown') AS bucket_,
    outcome,
    count() AS requests,
    sum(ifNull(input_tokens, 0)) AS input_tokens,
    sum(ifNull(output_tokens, 0)) AS output_tokens,
    sum(ifNull(ttft_ms, 0)) AS ttft_ms_sum,
    countIf(isNotNull(ttft_ms)) AS ttft_count,
    sum(e2e_ms) AS e2e_ms_sum
FROM requests
GROUP BY date, minute, route, model_, bucket_, outcome;
