//! `tokentap report` on live logs: a proxy log of real traffic holds listings, probes and
//! client errors beside the generations, and only generations are judged. Over real sockets
//! (the sim behind the proxy, a real HTTP client), and on the recorded corpus in
//! `tests/fixtures/logs/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::path::Path;
use std::process::{Command, Output};

use support::load::sim_on;
use support::{client, proxy, send};
use tokentap::sim::Profile;

fn report(args: &[&str], path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("report")
        .args(args)
        .arg(path)
        .output()
        .unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    let out = report(&["--format", "json"], path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Two streamed chats without usage, a model listing while they stream, a 404 and a 400: the
/// gate passes, and the listing and the client errors are counted apart, not judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_log_with_a_listing_and_client_errors_passes_a_healthy_gate() {
    let sim = sim_on(Profile::v100());
    let px = proxy(&format!("http://{}", sim.engine), "").await;
    let c = client();
    let chat = br#"{"model":"sim","messages":[{"role":"user","content":"hello there"}],"max_tokens":24,"stream":true}"#.to_vec();
    let (chat_url, models_url) = (px.url("/v1/chat/completions"), px.url("/v1/models"));
    let (a, b, list) = tokio::join!(
        send(&c, "POST", &chat_url, &[], chat.clone()),
        send(&c, "POST", &chat_url, &[], chat),
        async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            send(&c, "GET", &models_url, &[], Vec::new()).await
        }
    );
    assert_eq!(
        (a.unwrap().status, b.unwrap().status, list.unwrap().status),
        (200, 200, 200)
    );
    let missing = send(&c, "GET", &px.url("/v1/nothing"), &[], Vec::new()).await;
    assert_eq!(missing.unwrap().status, 404);
    let bad = send(
        &c,
        "POST",
        &px.url("/v1/chat/completions"),
        &[("content-type", "application/json")],
        b"{not json".to_vec(),
    )
    .await;
    assert_eq!(bad.unwrap().status, 400);
    let recs = px.records(5).await;
    assert_eq!(recs.len(), 5);
    let listing = recs.iter().find(|r| r.endpoint == "/v1/models").unwrap();
    assert_eq!(listing.api.as_str(), "models");

    let out = report(&["--fail-on-slo", "interactive"], &px.log);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Not judged: client errors and other traffic"),
        "{text}"
    );

    let r = json(&px.log);
    assert_eq!(r["traffic"]["generation"], 2);
    assert_eq!(r["traffic"]["served"], 2);
    assert_eq!(r["traffic"]["client_errors"], 1);
    assert_eq!(r["traffic"]["other"], 2);
    // The sim's streams carry no usage unless asked: named, with the fix.
    assert_eq!(r["traffic"]["streams_without_usage"], 2);
    let judged = r["answers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["question"] == "What was judged?")
        .unwrap()["answer"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(judged.contains("--enable-force-include-usage"), "{judged}");
    assert!(judged.contains("always_include_stream_usage"), "{judged}");
    // Only the two chats are in cells, on the live in-flight axis.
    let cells = r["cells"].as_array().unwrap();
    let n: u64 = cells.iter().map(|c| c["requests"].as_u64().unwrap()).sum();
    assert_eq!(n, 2, "{cells:?}");
    assert!(cells.iter().all(|c| c["axis"] == "in_flight"));
    assert!(cells.iter().all(|c| c["errors"] == 0));
    let other = r["other_traffic"].as_array().unwrap();
    let row = |e: &str, m: &str, s: u64| {
        other
            .iter()
            .find(|o| o["endpoint"] == e && o["method"] == m && o["status"] == s)
            .unwrap_or_else(|| panic!("{e} {m} {s} in {other:?}"))["class"]
            .clone()
    };
    assert_eq!(row("/v1/models", "GET", 200), "other");
    assert_eq!(row("/v1/nothing", "GET", 404), "other");
    assert_eq!(row("/v1/chat/completions", "POST", 400), "client_error");
}

/// Every GFM table in `md`: its column count and each row's cell count (header first).
fn gfm_tables(md: &str) -> Vec<(usize, Vec<usize>)> {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let mut tables = Vec::new();
    let mut row: Option<usize> = None;
    for ev in Parser::new_ext(md, Options::ENABLE_TABLES) {
        match ev {
            Event::Start(Tag::Table(aligns)) => tables.push((aligns.len(), Vec::new())),
            Event::Start(Tag::TableHead | Tag::TableRow) => row = Some(0),
            Event::Start(Tag::TableCell) => *row.get_or_insert(0) += 1,
            Event::End(TagEnd::TableHead | TagEnd::TableRow) => {
                if let (Some(n), Some(t)) = (row.take(), tables.last_mut()) {
                    t.1.push(n);
                }
            }
            _ => {}
        }
    }
    tables
}

/// Tables as the report writes them: a header line followed by a delimiter line.
fn delimiter_rows(md: &str) -> usize {
    md.lines().filter(|l| l.starts_with("| ---")).count()
}

#[test]
fn every_markdown_table_renders_with_its_columns() {
    // The checker fails on the shape the report once wrote (`| --- ||`: no table at all).
    assert!(gfm_tables("| a | b |\n| --- | --- ||\n| 1 | 2 |\n").is_empty());
    let dir = support::scratch("report-md");
    // A mixed log: every API shape, outcomes, keys, levels; and a live log with listings.
    let mixed = dir.join("mixed.jsonl");
    std::fs::write(
        &mixed,
        support::records::jsonl(0, 400, 7, support::records::Mix::Everything),
    )
    .unwrap();
    let fixtures = support::fixtures_dir().join("../logs");
    let mut logs = vec![mixed];
    if let Ok(rd) = std::fs::read_dir(&fixtures) {
        logs.extend(
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl")),
        );
    }
    for log in logs {
        let out = report(&["--format", "md"], &log);
        assert!(out.status.success(), "{}", log.display());
        let md = String::from_utf8(out.stdout).unwrap();
        let tables = gfm_tables(&md);
        assert!(
            tables.len() >= 6,
            "{}: {} tables",
            log.display(),
            tables.len()
        );
        assert_eq!(tables.len(), delimiter_rows(&md), "{}", log.display());
        for (cols, rows) in tables {
            assert!(rows.len() >= 2, "a table with no row: {}", log.display());
            assert!(
                rows.iter().all(|n| *n == cols),
                "{}: {cols} columns, rows {rows:?}",
                log.display()
            );
        }
    }
}

/// A recorded log and what its report must say.
struct Case {
    file: &'static str,
    /// An SLO file beside the logs (the CPU rig's own bar), or the write-up's defaults.
    slo: Option<&'static str>,
    /// Whether `--fail-on-slo interactive` passes.
    healthy: bool,
    /// Arms (or routes) every answer names.
    arms: &'static [&'static str],
}

const CORPUS: [Case; 4] = [
    // LiteLLM throttled (429) every stream of the gateway's `unknown` cells at 2 and 3-4 in
    // flight: a throttled stream is a miss (docs/report.md "What each verdict needs").
    Case {
        file: "live-rig.jsonl",
        slo: Some("rig-slo.toml"),
        healthy: false,
        arms: &["gateway"],
    },
    Case {
        file: "live-rig-slow.jsonl",
        slo: Some("rig-slo.toml"),
        healthy: false,
        arms: &["direct", "gateway"],
    },
    // The demo's long-short cells at C=8 miss 500 ms on both arms (565 ms).
    Case {
        file: "demo-bench.jsonl",
        slo: None,
        healthy: false,
        arms: &["direct", "gateway"],
    },
    Case {
        file: "demo-proxy.jsonl",
        slo: None,
        healthy: false,
        arms: &["direct", "gateway"],
    },
];

#[test]
fn recorded_logs_are_judged_on_their_generations_alone() {
    let dir = support::fixtures_dir().join("../logs");
    for case in CORPUS {
        let log = dir.join(case.file);
        let slo: Vec<String> = case
            .slo
            .map(|s| vec!["--slo".into(), dir.join(s).display().to_string()])
            .unwrap_or_default();
        let mut args: Vec<&str> = slo.iter().map(String::as_str).collect();
        args.extend(["--fail-on-slo", "interactive"]);
        let out = report(&args, &log);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), case.healthy, "{}: {err}", case.file);
        if !case.healthy {
            assert!(err.contains("SLO missed: interactive"), "{err}");
            for arm in case.arms {
                assert!(
                    err.contains(&format!("[{arm}]")),
                    "{}: {arm}: {err}",
                    case.file
                );
            }
        }
        args.extend(["--format", "json"]);
        let out = report(&args, &log);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let t = &r["traffic"];
        // Cells hold the generations and nothing else; the rest is in its own table.
        let cells = r["cells"].as_array().unwrap();
        let in_cells: u64 = cells.iter().map(|c| c["requests"].as_u64().unwrap()).sum();
        assert_eq!(in_cells, t["generation"].as_u64().unwrap(), "{}", case.file);
        let apart: u64 = r["other_traffic"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["requests"].as_u64().unwrap())
            .sum();
        assert_eq!(
            apart,
            t["client_errors"].as_u64().unwrap() + t["other"].as_u64().unwrap(),
            "{}",
            case.file
        );
        // Every answer that judges names every arm.
        for a in r["answers"].as_array().unwrap() {
            let q = a["question"].as_str().unwrap();
            if q.contains("one user") || q.contains("ceiling") || q.contains("failure mode") {
                for arm in case.arms {
                    assert!(
                        a["answer"].as_str().unwrap().contains(arm),
                        "{}: {q} names no {arm}: {}",
                        case.file,
                        a["answer"]
                    );
                }
            }
        }
    }
}

/// The mixed rig log: listings, probes, LiteLLM's 401s and 429s, bad bodies and unknown
/// models each land where they belong.
#[test]
fn the_rig_log_puts_each_kind_of_request_in_its_place() {
    let r = json(&support::fixtures_dir().join("../logs/live-rig.jsonl"));
    let t = &r["traffic"];
    assert_eq!(t["throttled"], 9, "LiteLLM's 429s");
    assert_eq!(t["cancelled"], 6);
    assert_eq!(t["client_errors"], 12);
    let other = r["other_traffic"].as_array().unwrap();
    let class = |e: &str, s: u64| {
        other
            .iter()
            .filter(|o| o["endpoint"] == e && o["status"] == s)
            .map(|o| o["class"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(class("/v1/models", 200), ["other"]);
    assert_eq!(class("/health", 200), ["other"]);
    assert_eq!(class("/gateway/metrics", 401), ["other"]);
    assert_eq!(class("/gateway/v1/chat/completions", 401), ["client_error"]);
    assert_eq!(class("/v1/chat/completions", 404), ["client_error"]);
    // No cell is all refusals of the client's own making; 429s are throttling, named.
    let fm = r["answers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["question"] == "What is the failure mode?")
        .unwrap()["answer"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(fm.contains("9 throttled (429)"), "{fm}");
    assert!(t["streams_without_usage"].as_u64().unwrap() > 0);
}

/// One bucket for a request everywhere: the gateway tap's rows (from the proxy's records) use
/// the buckets of the cells (bench's), not the proxy's own thresholds.
#[test]
fn the_tap_rows_use_the_cells_buckets() {
    let dir = support::fixtures_dir().join("../logs");
    let tap = dir.join("demo-proxy.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["report", "--format", "json", "--tap"])
        .arg(&tap)
        .arg(dir.join("demo-bench.jsonl"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut cells: Vec<String> = r["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bucket"].as_str().unwrap().to_owned())
        .collect();
    cells.sort();
    cells.dedup();
    let mut taps: Vec<String> = r["gateway_tap"]["by_bucket"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    taps.sort();
    assert_eq!(taps, cells);
    let joined: u64 = r["gateway_tap"]["by_bucket"]
        .as_object()
        .unwrap()
        .values()
        .map(|s| s["joined"].as_u64().unwrap())
        .sum();
    assert_eq!(joined, r["gateway_tap"]["joined"].as_u64().unwrap());
}
