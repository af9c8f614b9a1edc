//! The streaming report: today's output on inputs that fit in memory (golden files written by
//! the report before it streamed), the same figures from files as from records in memory, HDR
//! sketches within their stated bound, a lenient reader, and a clear failure on no records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use serde_json::Value;
use support::records::{jsonl, Mix};
use tokentap::report::{self, Slos};

/// The cases of `tests/fixtures/report/`: name, records, mix, `--by-arm`.
const GOLDEN: [(&str, u64, Mix, bool); 3] = [
    ("everything", 6000, Mix::Everything, false),
    ("everything-by-arm", 6000, Mix::Everything, true),
    ("live", 3000, Mix::Live, false),
];

fn golden(name: &str) -> Value {
    let p = support::fixtures_dir().join(format!("../report/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// The report's JSON without what is newer than the golden files: the key that says how
/// percentiles were computed, the prefix-cache answer, what the cache gave back and the gateway
/// board (each checked on its own elsewhere).
fn without_method(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    o.remove("percentiles");
    o.remove("gateway_board");
    if let Some(Value::Array(a)) = o.get_mut("answers") {
        a.retain(|x| x["question"] != "What does the prefix cache give back?");
    }
    if let Some(Value::Object(c)) = o.get_mut("prefix_cache") {
        c.remove("ttft_saved_ms");
        if let Some(Value::Object(b)) = c.get_mut("by_bucket") {
            for s in b.values_mut() {
                s.as_object_mut().unwrap().remove("ttft_saved_ms");
            }
        }
    }
    v
}

/// Equal to the golden file; otherwise the report is left beside the scratch log to diff.
/// `TOKENTAP_BLESS=1` writes the golden file instead (after an intended change of the report:
/// review the diff).
fn same_as_golden(name: &str, text: &str, dir: &std::path::Path) {
    let got: Value = serde_json::from_str(text).unwrap();
    assert_eq!(got["percentiles"]["method"], "exact", "{name}");
    if std::env::var_os("TOKENTAP_BLESS").is_some() {
        let p = support::fixtures_dir().join(format!("../report/{name}.json"));
        let pretty = serde_json::to_string_pretty(&without_method(got)).unwrap();
        std::fs::write(p, pretty + "\n").unwrap();
        return;
    }
    if without_method(got) != golden(name) {
        let out = dir.join(format!("{name}.json"));
        std::fs::write(&out, text).unwrap();
        panic!("{name}: differs from today's report; see {}", out.display());
    }
}

#[test]
fn records_in_memory_give_todays_report() {
    for (name, n, mix, by_arm) in GOLDEN {
        let dir = support::scratch("golden-mem");
        let path = dir.join("log.jsonl");
        std::fs::write(&path, jsonl(0, n, 7, mix)).unwrap();
        let recs = report::load(&[path], &mut |w| panic!("{w}")).unwrap();
        let r = report::compute(&recs, &Slos::default(), 20, by_arm);
        same_as_golden(name, &report::render(&r, report::Format::Json), &dir);
    }
}

fn report_cli(args: &[&str]) -> (String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("report")
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "report {args:?}: {stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

fn gz(text: &str) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

/// The golden inputs as a rotated log: two compressed files and the one being written (its
/// last line cut short, which is not a warning).
fn rotated(dir: &std::path::Path, n: u64, mix: Mix) {
    let third = n / 3;
    std::fs::write(dir.join("log.jsonl.2.gz"), gz(&jsonl(0, third, 7, mix))).unwrap();
    std::fs::write(dir.join("log.jsonl.1.gz"), gz(&jsonl(third, third, 7, mix))).unwrap();
    let mut live = jsonl(2 * third, n - 2 * third, 7, mix);
    live.push_str(r#"{"ts":"2026-12-01T00:00:00Z","outcome":"ok","e2e"#);
    std::fs::write(dir.join("log.jsonl"), live).unwrap();
}

#[test]
fn files_stream_to_todays_report() {
    for (name, n, mix, by_arm) in GOLDEN {
        let dir = support::scratch("golden-files");
        rotated(&dir, n, mix);
        let d = dir.to_str().unwrap();
        let mut args = vec![d, "--format", "json", "--top", "20"];
        if by_arm {
            args.push("--by-arm");
        }
        let (out, err) = report_cli(&args);
        assert!(err.is_empty(), "{name}: no warnings expected: {err}");
        same_as_golden(name, &out, &dir);
    }
}

/// Past the budget of exact values every percentile comes from a sketch: counts and maxima
/// stay exact, percentiles are within the stated bound, and the output says which was used.
#[test]
fn sketches_are_within_their_stated_bound() {
    let dir = support::scratch("sketch");
    rotated(&dir, 6000, Mix::Everything);
    let (out, _) = report_cli(&[
        dir.to_str().unwrap(),
        "--format",
        "json",
        "--top",
        "20",
        "--exact-values",
        "5000",
    ]);
    let got: Value = serde_json::from_str(&out).unwrap();
    let m = &got["percentiles"];
    assert_eq!(m["method"], "hdr", "{m}");
    assert_eq!(m["relative_error"], 1.0 / 1024.0);
    assert_eq!(m["exact_values_budget"], 5000);
    let want = golden("everything");
    let mut checked = 0;
    let mut close = |path: &str, a: &Value, b: &Value| {
        for k in ["n", "max"] {
            assert_eq!(a[k], b[k], "{path}.{k}");
        }
        for k in ["p50", "p95", "p99"] {
            let (x, y) = (a[k].as_f64(), b[k].as_f64());
            assert_eq!(x.is_some(), y.is_some(), "{path}.{k}");
            if let (Some(x), Some(y)) = (x, y) {
                assert!(
                    (x - y).abs() <= x.abs() / 1024.0,
                    "{path}.{k}: exact {x}, sketch {y}"
                );
                checked += 1;
            }
        }
    };
    let (wc, gc) = (
        want["cells"].as_array().unwrap(),
        got["cells"].as_array().unwrap(),
    );
    assert_eq!(wc.len(), gc.len());
    for (i, (a, b)) in wc.iter().zip(gc).enumerate() {
        assert_eq!(a["requests"], b["requests"]);
        assert_eq!(a["errors"], b["errors"]);
        for f in ["ttft_ms", "tpot_ms", "e2e_ms", "tok_s_per_stream"] {
            close(&format!("cells[{i}].{f}"), &a[f], &b[f]);
        }
    }
    for (i, (a, b)) in want["keys"]
        .as_array()
        .unwrap()
        .iter()
        .zip(got["keys"].as_array().unwrap())
        .enumerate()
    {
        assert_eq!(a["key_id"], b["key_id"]);
        for f in ["ttft_ms", "tpot_ms", "e2e_ms"] {
            close(&format!("keys[{i}].{f}"), &a[f], &b[f]);
        }
    }
    for (bucket, a) in want["by_bucket"].as_object().unwrap() {
        for f in ["ttft_ms", "ttfo_ms", "tpot_ms", "e2e_ms"] {
            close(
                &format!("by_bucket.{bucket}.{f}"),
                &a[f],
                &got["by_bucket"][bucket][f],
            );
        }
    }
    close("in_flight", &want["in_flight"], &got["in_flight"]);
    assert!(checked > 500, "{checked}");
    // The sections that need every pair stay exact.
    assert_eq!(want["gateway_hop"], got["gateway_hop"]);
    assert_eq!(want["gateway_tap"], got["gateway_tap"]);
    // So does the gateway board (the golden files are older than it): against the exact report.
    let (exact, _) = report_cli(&[dir.to_str().unwrap(), "--format", "json"]);
    let exact: Value = serde_json::from_str(&exact).unwrap();
    assert!(exact["gateway_board"]
        .as_array()
        .is_some_and(|b| !b.is_empty()));
    assert_eq!(exact["gateway_board"], got["gateway_board"]);
}

/// Old logs, and logs from tools that write fewer fields, lack fields the report does not
/// need: they are read with defaults and give the same figures.
#[test]
fn records_missing_fields_the_report_does_not_need_are_read() {
    let dir = support::scratch("lenient");
    let mut text = String::new();
    for line in jsonl(0, 3000, 7, Mix::Live).lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let o = v.as_object_mut().unwrap();
        // (`method`, `endpoint`, `status` and `stream` are read: what is judged depends on them.)
        for k in [
            "content_events",
            "events",
            "id",
            "model",
            "done",
            "parse_errors",
            "oversize_events",
            "request_bytes",
            "response_bytes",
            "itl_p50_ms",
            "itl_p99_ms",
            "itl_max_ms",
            "trace_id",
            "span_id",
            "max_tokens",
            "tokens_source",
            "body_read_ms",
            "first_byte_ms",
            "first_event_ms",
            "last_token_ms",
            "upstream_sent_ms",
            "response_model",
            "error",
        ] {
            o.remove(k);
        }
        text.push_str(&serde_json::to_string(&v).unwrap());
        text.push('\n');
    }
    std::fs::write(dir.join("old.jsonl"), text).unwrap();
    let (out, err) = report_cli(&[dir.to_str().unwrap(), "--format", "json", "--top", "20"]);
    assert!(err.is_empty(), "{err}");
    same_as_golden("live", &out, &dir);
}

/// Other tools' JSON and binary garbage are named in one grouped warning each; the records
/// around them are read.
#[test]
fn garbage_is_grouped_and_skipped() {
    let dir = support::scratch("garbage");
    let mut text = jsonl(0, 100, 7, Mix::Live);
    for _ in 0..250 {
        text.push_str("{\"level\":\"info\",\"msg\":\"another tool\"}\n");
    }
    text.push_str("\u{1}\u{7f}PK\u{3}\u{4}binary\n");
    text.push_str(&jsonl(100, 100, 7, Mix::Live));
    std::fs::write(dir.join("mixed.jsonl"), text).unwrap();
    let (out, err) = report_cli(&[dir.to_str().unwrap(), "--format", "json"]);
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["records"], 200);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    let first = dir.join("mixed.jsonl");
    assert!(
        err.contains(&format!(
            "250 lines skipped: missing field `outcome`; first at {}:101",
            first.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "1 line skipped: not a JSON object; first at {}:351",
            first.display()
        )),
        "{err}"
    );
}

/// Open-loop cells and conversation turns read from files (the fast path) equal the same
/// records read in memory, and say what they should.
#[test]
fn open_loop_cells_and_turns_read_the_same_from_files() {
    let dir = support::scratch("load-mix");
    let path = dir.join("log.jsonl");
    std::fs::write(&path, jsonl(0, 3000, 7, Mix::Load)).unwrap();
    let recs = report::load(std::slice::from_ref(&path), &mut |w| panic!("{w}")).unwrap();
    let mem = report::render(
        &report::compute(&recs, &Slos::default(), 20, false),
        report::Format::Json,
    );
    let (files, err) = report_cli(&[path.to_str().unwrap(), "--format", "json", "--top", "20"]);
    assert!(err.is_empty(), "{err}");
    let (a, b): (Value, Value) = (
        serde_json::from_str(&mem).unwrap(),
        serde_json::from_str(&files).unwrap(),
    );
    assert_eq!(without_method(a), without_method(b.clone()));
    let cells = b["cells"].as_array().unwrap();
    let rates: Vec<&str> = cells
        .iter()
        .filter(|c| c["request_rate"].is_number())
        .map(|c| c["concurrency"].as_str().unwrap())
        .collect();
    assert!(
        rates.contains(&"2/s") && rates.contains(&"32/s"),
        "{rates:?}"
    );
    let fast = cells.iter().find(|c| c["concurrency"] == "32/s").unwrap();
    assert!(fast["client_queue_ms"]["p50"].as_f64().unwrap() > 10.0);
    assert!(fast["scheduled_rate"].as_f64().unwrap() > 0.0);
    assert!(b["provisioning"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["axis"] == "request_rate"));
    let turns = b["by_turn"].as_object().unwrap();
    assert_eq!(turns.len(), 5);
    assert_eq!(turns["1"]["cache_hit_rate"], 0.0);
    assert_eq!(turns["3"]["cache_hit_rate"], 1.0);
}
