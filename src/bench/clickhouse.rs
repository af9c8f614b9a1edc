//! `bench --clickhouse URL`: every record also inserted into ClickHouse, into the table of
//! `deploy/clickhouse/schema.sql`, with the rows and the exporter serve's `[clickhouse]` uses
//! (`crate::export`; bench never reaches `sink`). The URL is read as `report --clickhouse` reads
//! it. The records are in `OUT/requests.jsonl` first: rows that could not be inserted are counted,
//! and the run then fails, saying where the records are.

use std::time::Duration;

use crate::config::ClickHouseConfig;
use crate::export::clickhouse;
use crate::meter::RequestRecord;

/// What `run.json` says of the insert.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Inserted {
    pub table: String,
    pub rows: u64,
    pub dropped: u64,
}

/// The ClickHouse `url` and `[db.]table` as the sink's config.
pub fn config(url: &str, table: &str, rows: usize) -> Result<ClickHouseConfig, String> {
    let src = crate::report::clickhouse::Source::new(url, table).map_err(|e| e.to_string())?;
    let (database, table) = src.table.split_once('.').unwrap_or(("default", &src.table));
    Ok(ClickHouseConfig {
        url: src.endpoint.clone(),
        base: src.base.clone(),
        database: database.to_owned(),
        table: table.to_owned(),
        auth: src.auth.first().map(|(_, v)| v.clone()),
        queue: rows.max(1),
        batch: 10_000,
        flush: Duration::from_millis(200),
        timeout: Duration::from_secs(30),
    })
}

/// Insert every record; the rows inserted and dropped.
pub async fn insert(cfg: &ClickHouseConfig, records: &[RequestRecord]) -> Result<Inserted, String> {
    let (queue, task) = clickhouse::spawn(cfg).map_err(|e| e.to_string())?;
    let counters = queue.counters.clone();
    for r in records {
        queue.send(Box::new(r.clone()));
    }
    queue.close().await;
    let _ = task.await;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    Ok(Inserted {
        table: format!("{}.{}", cfg.database, cfg.table),
        rows: n(&counters.exported),
        dropped: n(&counters.dropped),
    })
}
