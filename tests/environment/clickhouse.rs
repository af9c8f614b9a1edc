//! The ClickHouse sink against an HTTP server in this file that answers as ClickHouse's HTTP
//! interface does (and can be slow, refuse, or be down): batched `INSERT … FORMAT JSONEachRow`,
//! flat rows, credentials, back-pressure that drops and counts instead of waiting, and a server
//! that goes away and comes back. `scripts/clickhouse-test.sh` runs the same sink against a real
//! clickhouse-server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::time::Duration;

use support::*;

/// ClickHouse's HTTP interface stood in for by a [`Collector`]: the INSERTs it took.
struct FakeClickHouse {
    c: Collector,
}

impl FakeClickHouse {
    async fn on(addr: std::net::SocketAddr, delay: Duration) -> FakeClickHouse {
        FakeClickHouse {
            c: Collector::on(addr, delay).await,
        }
    }

    async fn spawn() -> FakeClickHouse {
        FakeClickHouse {
            c: Collector::spawn().await,
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.c.addr
    }

    /// Each accepted INSERT: its request line, its Authorization header, and its rows.
    fn inserts(&self) -> Vec<(String, Option<String>, Vec<serde_json::Value>)> {
        let got = self.c.got.lock().unwrap();
        got.iter()
            .filter(|(_, status)| *status == 200)
            .map(|(r, _)| {
                let rows = String::from_utf8(r.body.clone())
                    .unwrap()
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                (r.request_line().to_owned(), r.header("authorization"), rows)
            })
            .collect()
    }

    fn rows(&self) -> usize {
        self.inserts().iter().map(|g| g.2.len()).sum()
    }

    async fn wait_rows(&self, n: usize) {
        for _ in 0..500 {
            if self.rows() >= n {
                return;
            }
            tokio::time::sleep(MS(10)).await;
        }
        panic!("{} rows inserted, wanted {n}", self.rows());
    }

    fn down(self) {
        self.c.down();
    }
}

fn clickhouse(url: &str, extra: &str) -> String {
    format!("[clickhouse]\nurl = \"{url}\"\nflush_ms = 30\ntimeout_ms = 300\n{extra}")
}

/// A counter of `/metrics`, 0 when absent.
async fn counter(px: &TestProxy, line_start: &str) -> f64 {
    metric(&px.admin_get("/metrics").await.1, line_start).unwrap_or(0.0)
}

const DROPPED: &str = "tokentap_records_dropped_total{sink=\"clickhouse\"}";
const INSERTED: &str = "tokentap_clickhouse_rows_inserted_total";

#[tokio::test]
async fn records_go_in_batched_inserts_of_flat_rows_beside_the_file_log() {
    let up = Upstream::spawn(|_| {
        let mut s = Script::chat_stream(MS(1), MS(1), 3, true);
        s.headers.push(("x-request-id".into(), "engine-1".into()));
        s
    })
    .await;
    let ch = FakeClickHouse::spawn().await;
    std::env::set_var("TOKENTAP_TEST_CH_PASS", "pa55");
    let mut px = proxy(
        &up.url(),
        &clickhouse(
            &format!("http://{}", ch.addr()),
            "batch = 5\nuser = \"tt\"\npassword = \"${TOKENTAP_TEST_CH_PASS}\"\ntable = \"reqs\"",
        ),
    )
    .await;
    let c = client();
    for i in 0..12 {
        let id = format!("req-{i}");
        let got = send(
            &c,
            "POST",
            &px.url("/v1/chat/completions"),
            &[("x-request-id", &id)],
            chat_body("m", true),
        )
        .await
        .unwrap();
        assert_eq!(got.status, 200);
    }
    ch.wait_rows(12).await;
    let recs = px.records(12).await;
    assert_eq!(recs.len(), 12, "the file log is written as before");
    let got = ch.inserts();
    assert!(got.iter().all(|g| g.2.len() <= 5), "batches of at most 5");
    assert!(got.len() >= 3, "{} inserts", got.len());
    for (line, auth, _) in &got {
        assert_eq!(
            line,
            "POST /?database=default&input_format_skip_unknown_fields=1&query=INSERT%20INTO%20default.reqs%20FORMAT%20JSONEachRow HTTP/1.1"
        );
        // base64("tt:pa55")
        assert_eq!(auth.as_deref(), Some("Basic dHQ6cGE1NQ=="));
    }
    let rows: Vec<&serde_json::Value> = got.iter().flat_map(|g| &g.2).collect();
    for (i, (row, rec)) in rows.iter().zip(&recs).enumerate() {
        assert_eq!(
            row["id"],
            rec.id.as_str(),
            "rows in the order of the records"
        );
        assert_eq!(row["outcome"], "ok");
        assert_eq!(row["stream"], 1);
        assert_eq!(row["output_tokens"], 3);
        assert_eq!(row["e2e_ms"], rec.e2e_ms);
        // The ids, in the columns schema.sql gives them.
        assert_eq!(row["request_id"], format!("req-{i}"));
        assert_eq!(rec.request_id, Some(format!("req-{i}")));
        assert_eq!(row["upstream_request_id"], "engine-1");
        assert!(row.as_object().unwrap().values().all(|v| !v.is_object()));
    }
    assert_eq!(counter(&px, INSERTED).await, 12.0);
    assert_eq!(counter(&px, DROPPED).await, 0.0);
    px.shutdown().await;
}

#[tokio::test]
async fn a_clickhouse_that_refuses_once_gets_the_batch_again() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let ch = FakeClickHouse::spawn().await;
    ch.c.statuses.lock().unwrap().push_back(500);
    let mut px = proxy(&up.url(), &clickhouse(&format!("http://{}", ch.addr()), "")).await;
    assert_eq!(px.chat().await.status, 200);
    ch.wait_rows(1).await;
    assert_eq!(counter(&px, INSERTED).await, 1.0);
    assert_eq!(counter(&px, DROPPED).await, 0.0);
    assert_eq!(
        counter(&px, "tokentap_clickhouse_insert_failures_total").await,
        0.0
    );
    px.shutdown().await;
}

/// A slow ClickHouse never slows traffic: the queue fills, then records are dropped and
/// counted; what was queued is inserted once it answers.
#[tokio::test]
async fn a_slow_clickhouse_fills_the_queue_then_records_are_dropped_and_counted() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let ch = FakeClickHouse::on("127.0.0.1:0".parse().unwrap(), MS(1500)).await;
    let mut px = proxy(
        &up.url(),
        &format!(
            "[clickhouse]\nurl = \"http://{}\"\nflush_ms = 30\ntimeout_ms = 5000\nqueue = 4\nbatch = 2",
            ch.addr()
        ),
    )
    .await;
    let c = client();
    let t = std::time::Instant::now();
    for _ in 0..30 {
        assert_eq!(px.chat_with(&c).await.status, 200);
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "30 requests took {took:?}");
    assert_eq!(px.records(30).await.len(), 30, "every record is in the log");
    // Each record is inserted or dropped, never both, never lost.
    let mut seen = (0.0, 0.0);
    for _ in 0..200 {
        seen = (counter(&px, INSERTED).await, counter(&px, DROPPED).await);
        if seen.0 + seen.1 == 30.0 {
            break;
        }
        tokio::time::sleep(MS(50)).await;
    }
    assert_eq!(
        seen.0 + seen.1,
        30.0,
        "inserted {} dropped {}",
        seen.0,
        seen.1
    );
    assert!(seen.1 >= 20.0, "most were dropped: {seen:?}");
    assert_eq!(ch.rows() as f64, seen.0);
    px.shutdown().await;
}

/// ClickHouse down: traffic goes on, rows are dropped and counted; back up: rows flow again,
/// on the same connection settings, without a restart.
#[tokio::test]
async fn clickhouse_down_and_back_up() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let ch = FakeClickHouse::spawn().await;
    let addr = ch.addr();
    ch.down();
    let mut px = proxy(
        &up.url(),
        &clickhouse(&format!("http://{addr}"), "queue = 4\nbatch = 2"),
    )
    .await;
    let c = client();
    let t = std::time::Instant::now();
    for _ in 0..20 {
        assert_eq!(px.chat_with(&c).await.status, 200);
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let mut dropped = 0.0;
    for _ in 0..200 {
        dropped = counter(&px, DROPPED).await;
        if dropped == 20.0 {
            break;
        }
        tokio::time::sleep(MS(50)).await;
    }
    assert_eq!(
        dropped, 20.0,
        "every row while it was down is counted as dropped"
    );
    assert!(counter(&px, "tokentap_clickhouse_insert_failures_total").await >= 1.0);

    let ch = FakeClickHouse::on(addr, Duration::ZERO).await;
    for _ in 0..6 {
        assert_eq!(px.chat_with(&c).await.status, 200);
    }
    ch.wait_rows(6).await;
    assert_eq!(counter(&px, INSERTED).await, 6.0);
    assert_eq!(counter(&px, DROPPED).await, 20.0);
    assert_eq!(px.records(26).await.len(), 26);
    px.shutdown().await;
}
