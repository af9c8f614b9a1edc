//! The report's definitions as SQL expressions over the records' table (`sql.rs` builds its
//! queries from them): what a client sent, served, an error, a generation, a record's class,
//! its API shape, arm, bucket and level. Each mirrors its Rust definition in `row.rs` and
//! `acc.rs`; `scripts/clickhouse-test.sh` holds the two to the same figures.

pub(super) const CLIENT: &str = "ifNull(tap_side, '') != 'inner'";
pub(super) const OK: &str = "outcome = 'ok'";
pub(super) const ERROR: &str = "outcome NOT IN ('ok', 'client_cancelled')
            AND NOT (status >= 400 AND status < 500 AND status != 429)";
/// A record's API shape: its `api`, else (a log written before the field, or by another tool)
/// the one its method and endpoint name, as `report::Row::api` derives it.
macro_rules! api {
    () => {
        "multiIf(api != '', api,
            upper(method) NOT IN ('', 'POST')
                AND match(endpoint, '/(chat/completions|completions|responses|messages)/*$'), 'other',
            match(endpoint, '/chat/completions/*$'), 'chat',
            match(endpoint, '/completions/*$'), 'completions',
            match(endpoint, '/responses/*$'), 'responses',
            match(endpoint, '/messages/*$'), 'messages',
            match(endpoint, '/embeddings/*$'), 'embeddings',
            match(endpoint, '/models(/*$|/.*[^/])'), 'models', 'other')"
    };
}
/// The API shape, as [`api!`] writes it.
pub(super) const API: &str = api!();
/// A generating shape.
pub(super) const GENERATES: &str = concat!(
    api!(),
    " IN ('chat', 'completions', 'responses', 'messages')"
);
/// A generation: a generating shape the service answered or failed (docs/report.md).
pub(super) const GEN: &str = concat!(
    api!(),
    " IN ('chat', 'completions', 'responses', 'messages')
            AND NOT (status >= 400 AND status < 500 AND status != 429)"
);
/// A generation served to its end (`Class::Served`).
pub(super) const SERVED: &str = "outcome = 'ok' AND status != 429
            AND NOT (status >= 400 AND status < 500)";
/// What a record is to the report (`report::Class`).
pub(super) const CLASS: &str = concat!(
    "multiIf(",
    api!(),
    " NOT IN ('chat', 'completions', 'responses', 'messages'), 'other',
            status = 429, 'throttled',
            status >= 400 AND status < 500, 'client_error',
            outcome = 'ok', 'served',
            outcome = 'client_cancelled', 'cancelled', 'failed')"
);
/// A cell's arm: the experiment's, else the route.
pub(super) const ARM: &str = "if(isNotNull(experiment_arm), experiment_arm, nullIf(route, ''))";
pub(super) const BUCKET: &str = "ifNull(bucket, 'unknown')";
pub(super) const LEVEL: &str = "if(isNotNull(request_rate) AND assumeNotNull(request_rate) > 0,
           toUInt64(round(assumeNotNull(request_rate) * 1000)),
           if(isNotNull(concurrency), assumeNotNull(concurrency),
           if(greatest(in_flight, 1) <= 2, greatest(in_flight, 1),
              toUInt64(pow(2, ceil(log2(greatest(in_flight, 1))))))))";
/// An open-loop record (the load generator's offered rate): its level is that rate.
pub(super) const RATE: &str =
    "toUInt8(isNotNull(request_rate) AND assumeNotNull(request_rate) > 0)";
/// Live traffic: neither a load generator's concurrency nor its rate.
pub(super) const LIVE: &str = "isNull(concurrency) AND isNull(request_rate)";
