//! `tokentap bench --runs N` against `tokentap sim` over real sockets: three runs' records in
//! rotated cell order, each record naming its run; run.json's per-cell spread recomputed from
//! the records; the report's run-to-run section in every format; `compare` on two three-run
//! folders taking its intervals from the runs; and one run staying exactly as before (no `run`,
//! no `spread`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use support::load::*;
use tokentap::meter::{Outcome, RequestRecord};
use tokentap::report::Slos;
use tokentap::sim::Profile;

fn profile(decode: f64) -> Profile {
    Profile {
        prefill_base_ms: 2.0,
        prefill_per_token_ms: 0.01,
        prefill_per_seq_ms: 0.5,
        step_base_ms: 3.0 * decode,
        step_per_seq_ms: 0.1 * decode,
        ..Profile::v100()
    }
}

struct Dirs {
    base: PathBuf,
    faster: PathBuf,
    single: PathBuf,
}

/// Two three-run sweeps (2 buckets × C=1,2: four cells) on two engines, the second's decode
/// 20 % faster, and one single run; taken at once, once for every test of this file.
fn dirs() -> &'static Dirs {
    static D: OnceLock<Dirs> = OnceLock::new();
    D.get_or_init(|| {
        let dir = support::scratch("bench-runs");
        let plan = [("base", 1.0, 3), ("faster", 0.8, 3), ("single", 1.0, 1)];
        let sims: Vec<SimApart> = plan.iter().map(|(_, d, _)| sim_on(profile(*d))).collect();
        let cfgs: Vec<_> = plan
            .iter()
            .zip(&sims)
            .map(|((name, _, runs), s)| {
                let mut c = bench_cfg(s, dir.join(name));
                (c.common.requests, c.common.warmup) = (6, 1);
                c.common.estimate = false;
                let p = &mut c.common.prompts;
                p.buckets = vec!["long-short".into(), "short-long".into()];
                (p.outputs, p.prompts_per_bucket) = ([8, 8, 8], 6);
                c.load = tokentap::bench::Load::Closed(tokentap::bench::Closed {
                    concurrency: vec![1, 2],
                    runs: *runs,
                    ..Default::default()
                });
                c
            })
            .collect();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let all: Vec<_> = cfgs
                .into_iter()
                .map(|c| tokio::spawn(async move { run_bench(&c).await }))
                .collect();
            for h in all {
                assert!(!h.await.unwrap().interrupted);
            }
        });
        drop(sims);
        Dirs {
            base: dir.join("base"),
            faster: dir.join("faster"),
            single: dir.join("single"),
        }
    })
}

fn run_json(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap()
}

/// The records' cells in the order they ran: (run, bucket, C), consecutive duplicates merged.
fn visits(records: &[RequestRecord]) -> Vec<(Option<u32>, String, u64)> {
    let mut v: Vec<(Option<u32>, String, u64)> = Vec::new();
    for r in records {
        let k = (r.run, r.bucket.clone().unwrap(), r.concurrency.unwrap());
        if v.last() != Some(&k) {
            v.push(k);
        }
    }
    v
}

#[test]
fn three_runs_visit_the_cells_in_rotated_order_and_every_record_names_its_run() {
    let d = dirs();
    let records = bench_records(&d.base);
    assert_eq!(records.len(), 3 * 4 * 6, "3 runs × 4 cells × 6 measured");
    let sweep = [
        ("long-short", 1),
        ("long-short", 2),
        ("short-long", 1),
        ("short-long", 2),
    ];
    // Run r starts ⌊(r − 1) · 4 ÷ 3⌋ cells into the sweep: at cell 0, 1, 2.
    let mut want = Vec::new();
    for (run, shift) in [(1, 0), (2, 1), (3, 2)] {
        for i in 0..4 {
            let (b, c) = sweep[(i + shift) % 4];
            want.push((Some(run), b.to_owned(), c));
        }
    }
    assert_eq!(visits(&records), want);
    let info = run_json(&d.base);
    assert_eq!(info["runs"], 3);
    let cells: Vec<(u64, String, u64)> = info["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].clone();
            (
                s("run").as_u64().unwrap(),
                s("bucket").as_str().unwrap().to_owned(),
                s("concurrency").as_u64().unwrap(),
            )
        })
        .collect();
    let want_cells: Vec<_> = want
        .iter()
        .map(|(r, b, c)| (u64::from(r.unwrap()), b.clone(), *c))
        .collect();
    assert_eq!(cells, want_cells, "run.json lists the cells as they ran");
}

#[test]
fn one_run_writes_no_run_field_and_no_spread() {
    let d = dirs();
    let text = std::fs::read_to_string(d.single.join("requests.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 4 * 6);
    assert!(!text.contains("\"run\""), "{text}");
    let info = run_json(&d.single);
    assert!(info.get("runs").is_none() && info.get("spread").is_none());
    assert!(info["cells"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c.get("run").is_none()));
    let records = bench_records(&d.single);
    let v = visits(&records);
    let order: Vec<(&str, u64)> = v.iter().map(|(_, b, c)| (b.as_str(), *c)).collect();
    assert_eq!(
        order,
        [
            ("long-short", 1),
            ("long-short", 2),
            ("short-long", 1),
            ("short-long", 2)
        ]
    );
}

/// Nearest rank, as DESIGN.md defines percentiles.
fn nearest(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let k = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[k - 1]
}

#[test]
fn run_json_spread_matches_a_recomputation_from_the_records() {
    let d = dirs();
    let records = bench_records(&d.base);
    let info = run_json(&d.base);
    let spread = info["spread"].as_array().unwrap();
    assert_eq!(spread.len(), 4);
    for cell in spread {
        let (b, c) = (
            cell["bucket"].as_str().unwrap(),
            cell["concurrency"].as_u64().unwrap(),
        );
        assert_eq!(cell["runs"], 3);
        for (metric, q, f) in [
            (
                "ttft_p50",
                0.5,
                (|r: &RequestRecord| r.ttft_ms) as fn(&_) -> _,
            ),
            ("tpot_p95", 0.95, |r| r.tpot_ms),
            ("e2e_p50", 0.5, |r| Some(r.e2e_ms)),
            ("tok_s_per_stream_p50", 0.5, |r| {
                r.tpot_ms.map(|t| 1000.0 / t)
            }),
        ] {
            let per_run: Vec<f64> = (1..=3)
                .map(|run| {
                    let v: Vec<f64> = records
                        .iter()
                        .filter(|r| r.run == Some(run) && r.outcome == Outcome::Ok)
                        .filter(|r| r.bucket.as_deref() == Some(b) && r.concurrency == Some(c))
                        .filter_map(f)
                        .collect();
                    nearest(v, q)
                })
                .collect();
            let m = cell["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["metric"] == metric)
                .unwrap();
            let got: Vec<f64> = m["per_run"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            let mean = per_run.iter().sum::<f64>() / 3.0;
            let sd = (per_run.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
            // A record's double read back from its JSON line can land one unit in the last
            // place away (serde_json's default parse), and 1000 ÷ TPOT carries it.
            assert!(
                got.len() == 3 && got.iter().zip(&per_run).all(|(a, b)| close(*a, *b)),
                "{b} C={c} {metric}: {got:?} vs {per_run:?}"
            );
            assert!(close(m["mean"].as_f64().unwrap(), mean), "{m}");
            assert!(close(m["sd"].as_f64().unwrap(), sd), "{m}");
            if sd > 0.0 {
                assert!(close(m["cv"].as_f64().unwrap(), sd / mean), "{m}");
            }
            // t(2) at 97.5 % = 4.303.
            let h = 4.303 * sd / 3f64.sqrt();
            let ci = &m["ci95"];
            assert!(close(ci[0].as_f64().unwrap(), mean - h), "{m}");
            assert!(close(ci[1].as_f64().unwrap(), mean + h), "{m}");
        }
    }
}

fn tokentap(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_report_shows_the_run_to_run_spread_in_every_format() {
    let d = dirs();
    let dir = d.base.to_str().unwrap();
    let info = run_json(&d.base);
    let first = &info["spread"][0];
    let tpot = first["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "tpot_p50")
        .unwrap();
    let mean = format!("{:.2}", tpot["mean"].as_f64().unwrap());
    for f in ["table", "md", "html"] {
        let out = tokentap(&["report", dir, "--format", f]);
        assert!(out.contains("Run to run (bench --runs N)"), "{f}");
        assert!(
            out.contains("tpot_p50 (ms)") && out.contains(&mean),
            "{f}: {mean}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&tokentap(&["report", dir, "--format", "json"])).unwrap();
    assert_eq!(
        json["spread"], info["spread"],
        "the report's spread is run.json's"
    );
    assert!(json["cells"].is_array(), "existing keys stay");
    let single = tokentap(&["report", d.single.to_str().unwrap()]);
    assert!(!single.contains("Run to run"));
}

#[test]
fn compare_on_two_three_run_folders_takes_its_intervals_from_the_runs() {
    let d = dirs();
    let slos = Slos::default();
    let (b, n) = (
        tokentap::compare::side::read(&d.base, &slos, false).unwrap(),
        tokentap::compare::side::read(&d.faster, &slos, false).unwrap(),
    );
    let c = tokentap::compare::compare(&b, &n, 42, false);
    assert_eq!(c.intervals, "runs", "{}", c.intervals_note);
    assert!(c.intervals_note.contains("BASE 3 runs, NEW 3 runs"));
    let spread = |dir: &Path, bucket: &str, conc: u64, metric: &str| -> Vec<f64> {
        let info = run_json(dir);
        let cell = info["spread"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["bucket"] == bucket && c["concurrency"] == conc)
            .unwrap()
            .clone();
        let m = cell["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == metric)
            .unwrap()
            .clone();
        m["per_run"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let cells: Vec<_> = c.cells.iter().filter(|c| !c.pooled).collect();
    assert_eq!(cells.len(), 4);
    for cell in cells {
        assert_eq!(cell.runs, Some([3, 3]), "{}", cell.cell);
        let conc: u64 = cell.level.parse().unwrap();
        let t = cell
            .metrics
            .iter()
            .find(|d| d.metric == "tpot_p50")
            .unwrap();
        assert_eq!(t.interval, "runs");
        let (vb, vn) = (
            spread(&d.base, &cell.bucket, conc, "tpot_p50"),
            spread(&d.faster, &cell.bucket, conc, "tpot_p50"),
        );
        assert_eq!(t.abs_ci, tokentap::stats::welch(&vn, &vb), "{}", cell.cell);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!((t.abs.unwrap() - (mean(&vn) - mean(&vb))).abs() < 1e-9);
        // A decode step 20 % faster: TPOT down by about that in every cell.
        assert!(t.rel.unwrap() < -0.1, "{}: {t:?}", cell.cell);
        let err = cell.metrics.iter().find(|d| d.metric == "error_rate");
        assert_eq!(err.unwrap().interval, "bootstrap");
    }
    let text = tokentap(&[
        "compare",
        d.base.to_str().unwrap(),
        d.faster.to_str().unwrap(),
    ]);
    assert!(
        text.contains("Intervals:\n  run-to-run spread: Welch 95 %"),
        "{text}"
    );
    let one = tokentap(&[
        "compare",
        d.single.to_str().unwrap(),
        d.faster.to_str().unwrap(),
    ]);
    assert!(
        one.contains("Intervals:\n  bootstrap 95 % over requests"),
        "{one}"
    );
}

#[test]
fn runs_must_be_positive_and_repeat_a_sweep_only() {
    // A usage error (64), before anything is sent: the target is a closed port.
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(["bench", "--target", "http://127.0.0.1:9", "--out"])
            .arg(support::scratch("bench-runs-usage"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert_eq!(
        run(&["--runs", "0"]),
        "tokentap: bench: --runs must be at least 1\n"
    );
    assert!(run(&["--runs", "2", "--multi-turn"])
        .starts_with("tokentap: bench: --runs repeats a sweep of cells"));
}
