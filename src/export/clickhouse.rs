//! `[clickhouse]`: every record also inserted into a ClickHouse table (`deploy/clickhouse/
//! schema.sql`), as `INSERT … FORMAT JSONEachRow` over HTTP in batches, from the exporter's
//! bounded queue (`crate::export`): a ClickHouse that is down or slow fills the queue, then
//! records are dropped and counted (`tokentap_records_dropped_total{sink="clickhouse"}`),
//! never waited for. The file log is written as before, beside it.
//!
//! Rows are the records with their nested objects flattened as the table has them
//! (`experiment.arm` → `experiment_arm`, `gateway_tap.side` → `tap_side`,
//! `ttft_split.proxy_ms` → `ttft_split_proxy_ms`, `delivery.verdict` → `delivery_verdict`) and
//! booleans as 0/1: ClickHouse 18.16's JSONEachRow reads no objects and no booleans
//! (`tests/suite/schema.rs` holds these rows to the record and to the table). Fields the table lacks
//! are skipped by the server (`input_format_skip_unknown_fields`), so a newer tokentap inserts
//! into an older table.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::{Encode, Target};
use crate::config::ClickHouseConfig;
use crate::export;
use crate::meter::RequestRecord;

pub use export::Counters as ClickHouseCounters;

/// The record queue the sink keeps.
pub type ClickHouse = export::Queue<Box<RequestRecord>>;

/// The record's objects, and the prefix their fields take as columns.
const FLATTENED: [(&str, &str); 4] = [
    ("experiment", "experiment_"),
    ("gateway_tap", "tap_"),
    ("ttft_split", "ttft_split_"),
    ("delivery", "delivery_"),
];

/// A record as a row of the `requests` table.
pub fn row(rec: &RequestRecord) -> Map<String, Value> {
    let Ok(Value::Object(mut o)) = serde_json::to_value(rec) else {
        return Map::new();
    };
    for (object, prefix) in FLATTENED {
        if let Some(Value::Object(fields)) = o.remove(object) {
            for (k, v) in fields {
                o.insert(format!("{prefix}{k}"), v);
            }
        }
    }
    o.retain(|_, v| !v.is_object());
    for v in o.values_mut() {
        if let Value::Bool(b) = v {
            *v = Value::from(u8::from(*b));
        }
    }
    o
}

struct Rows;

impl Encode<Box<RequestRecord>> for Rows {
    fn encode(&mut self, batch: &[Box<RequestRecord>]) -> Bytes {
        let mut out = Vec::with_capacity(batch.len() * 1200);
        for r in batch {
            // A map of JSON values always serialises.
            if serde_json::to_writer(&mut out, &row(r)).is_ok() {
                out.push(b'\n');
            }
        }
        Bytes::from(out)
    }
}

/// Start the inserting task.
pub fn spawn(
    cfg: &ClickHouseConfig,
) -> Result<(ClickHouse, tokio::task::JoinHandle<()>), export::ExportError> {
    let target = Target {
        name: "ClickHouse",
        sink: "clickhouse",
        endpoint: cfg.url.clone(),
        path: cfg.insert_path(),
        content_type: "application/x-ndjson",
        headers: cfg.auth_header(),
        queue: cfg.queue,
        batch: cfg.batch,
        flush: cfg.flush,
        timeout: cfg.timeout,
        // ClickHouse answers 500 for a server-side failure that can pass (too many parts, a
        // replica or ZooKeeper away, a table being altered).
        also_retry: &[http::StatusCode::INTERNAL_SERVER_ERROR],
    };
    export::spawn(target, Rows)
}

#[cfg(test)]
mod tests {
    use crate::meter::{Experiment, GatewayTap, JoinBy, TapSide};

    #[test]
    fn rows_are_flat_and_booleans_are_numbers() {
        let mut r: crate::meter::RequestRecord = serde_json::from_str(
            r#"{"ts":"2026-12-01T00:00:00.000001Z","outcome":"ok","e2e_ms":5.5,"stream":true,"done":true,
                "ttft_split":{"proxy_ms":0.1}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        r.experiment = Some(Experiment {
            arm: "gateway".into(),
            pair_id: Some("p1".into()),
        });
        r.gateway_tap = Some(GatewayTap {
            side: TapSide::Outer,
            peer: Some("abc".into()),
            join: Some(JoinBy::Header),
            unjoined: None,
            admission_ms: Some(1.5),
            relay_ms: None,
            ttft_ms: Some(2.0),
            relay_p50_ms: None,
            relay_max_ms: None,
            held_tokens: None,
            relay_verdict: None,
        });
        let row = super::row(&r);
        assert_eq!(row["stream"], 1);
        assert_eq!(row["done"], 1);
        assert_eq!(row["experiment_arm"], "gateway");
        assert_eq!(row["experiment_pair_id"], "p1");
        assert_eq!(row["tap_side"], "outer");
        assert_eq!(row["tap_join"], "header");
        assert_eq!(row["tap_admission_ms"], 1.5);
        assert_eq!(row["e2e_ms"], 5.5);
        assert!(row.values().all(|v| !v.is_object()), "{row:?}");
        assert_eq!(row["ttft_split_proxy_ms"], 0.1);
        assert!(!row.contains_key("ttft_split") && !row.contains_key("experiment"));
    }
}
