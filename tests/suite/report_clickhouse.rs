//! `tokentap report --clickhouse` where ClickHouse is not what it should be: an answer that is
//! an error, no server, an empty table, a bad URL or table name; and `--sql`, the queries it
//! runs. `scripts/clickhouse-test.sh` runs it against real ClickHouse engines (chdb and
//! clickhouse-server 18.16) and compares every figure with the report of the same files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::process::{Command, Output};

use support::Collector;

async fn report(args: &[&str], env: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .arg("report")
            .args(&args)
            .env_remove("CLICKHOUSE_USER")
            .env_remove("CLICKHOUSE_PASSWORD")
            .envs(env)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn an_error_from_clickhouse_is_named_with_its_query_and_no_credential() {
    let ch = Collector::spawn().await;
    ch.statuses.lock().unwrap().push_back(500);
    let url = format!("http://ops:hunter2@{}", ch.addr);
    let out = report(
        &[
            "--clickhouse",
            &url,
            "--clickhouse-table",
            "tokentap.requests",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "ClickHouse at http://{}/: totals query: HTTP 500",
            ch.addr
        )) && err.contains("refused"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    let got = ch.got.lock().unwrap();
    assert_eq!(got.len(), 1, "it stops at the first failed query");
    let (req, _) = &got[0];
    assert!(
        req.head
            .starts_with("POST /?output_format_json_quote_64bit_integers=0 "),
        "{}",
        req.head
    );
    assert_eq!(
        req.header("authorization").as_deref(),
        Some("Basic b3BzOmh1bnRlcjI=")
    );
    let sql = String::from_utf8_lossy(&req.body);
    assert!(sql.contains("FROM tokentap.requests"), "{sql}");
    assert!(sql.trim_end().ends_with("FORMAT JSONEachRow"), "{sql}");
}

#[tokio::test]
async fn credentials_come_from_the_environment_too() {
    let ch = Collector::spawn().await;
    ch.statuses.lock().unwrap().push_back(401);
    let url = format!("http://{}", ch.addr);
    let env = [("CLICKHOUSE_USER", "reader"), ("CLICKHOUSE_PASSWORD", "pw")];
    let out = report(&["--clickhouse", &url], &env).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(!stderr(&out).contains("pw"), "{}", stderr(&out));
    let got = ch.got.lock().unwrap();
    assert_eq!(
        got[0].0.header("authorization").as_deref(),
        Some("Basic cmVhZGVyOnB3")
    );
    let sql = String::from_utf8_lossy(&got[0].0.body);
    assert!(sql.contains("FROM default.requests"), "{sql}");
}

#[tokio::test]
async fn an_empty_table_or_no_server_is_a_failure() {
    // Every query answered with no rows: no record at all.
    let ch = Collector::spawn().await;
    let url = format!("http://{}", ch.addr);
    let out = report(&["--clickhouse", &url], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("table default.requests holds no record"),
        "{}",
        stderr(&out)
    );
    // Nothing listening.
    let addr = ch.addr;
    ch.down();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let out = report(&["--clickhouse", &format!("http://{addr}")], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("totals query: connect 127.0.0.1"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn bad_urls_and_tables_are_usage_errors() {
    for (args, want) in [
        (
            vec!["--clickhouse", "clickhouse:8123"],
            "--clickhouse clickhouse:8123: not a URL",
        ),
        (
            vec!["--clickhouse", "http://u:secret@h:8123/?database=x"],
            "--clickhouse http://u:***@h:8123/?database=x: no query string",
        ),
        (
            vec!["--clickhouse", "http://h", "--clickhouse-table", "a.b.c"],
            "--clickhouse-table a.b.c: names are",
        ),
        (
            vec!["--clickhouse", "http://h", "some.jsonl"],
            "cannot be used with",
        ),
    ] {
        let out = report(&args, &[]).await;
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("secret"), "{}", stderr(&out));
    }
}

#[tokio::test]
async fn sql_prints_the_queries_with_the_settings_given() {
    let out = report(&["--sql"], &[]).await;
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let file = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/clickhouse/report.sql"),
    )
    .unwrap();
    assert_eq!(text, file);
    let out = report(
        &[
            "--sql",
            "--clickhouse-table",
            "fleet.reqs",
            "--top",
            "5",
            "--by-arm",
            "--hop-arms",
            "litellm,vllm",
        ],
        &[],
    )
    .await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("default.requests"));
    assert!(text.contains("here for table fleet.reqs, --top 5, --by-arm, --hop-arms litellm,vllm,"));
    assert!(text.contains("FROM fleet.reqs"));
    assert!(text.contains("LIMIT 5"));
    assert!(text.contains("experiment_arm IN ('litellm', 'vllm')"));
    assert!(text.contains("GROUP BY key, arm"));
}
