//! One run from many bench processes (docs/bench.md "One run from many processes"): the
//! report and compare read a distributed run's shard folders as one run, and refuse a set that
//! is not one whole run, naming what is wrong.

use std::path::Path;
use std::process::{Command, Output};

use tokentap_test_support as support;

use support::records::{jsonl, Mix};

fn tokentap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(args)
        .output()
        .unwrap()
}

/// A shard's folder: its records and its `run.json`.
fn shard(root: &Path, run_id: &str, i: u32, n: u32, records: &str) {
    let dir = root.join(format!("shard-{i}-of-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("requests.jsonl"), records).unwrap();
    let run = serde_json::json!({"run_id": run_id, "shard": i, "shards": n, "cells": []});
    std::fs::write(dir.join("run.json"), run.to_string()).unwrap();
}

#[test]
fn a_distributed_runs_shards_read_as_one_run_and_a_partial_one_is_refused() {
    let root = support::scratch("fleet-shards");
    // Four shards of one run, 100 records each: their union is one run of 400.
    let all: Vec<String> = jsonl(0, 400, 11, Mix::Load)
        .lines()
        .map(str::to_owned)
        .collect();
    for i in 0..4u32 {
        let part = all[(i as usize) * 100..(i as usize + 1) * 100].join("\n") + "\n";
        shard(&root, "r-1", i + 1, 4, &part);
    }
    let one = root.join("one.jsonl");
    std::fs::write(&one, all.join("\n") + "\n").unwrap();
    let json = |args: &[&str]| -> serde_json::Value {
        let out = tokentap(&[&["report", "--format", "json"], args].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let merged = json(&[
        root.join("shard-1-of-4").to_str().unwrap(),
        root.join("shard-2-of-4").to_str().unwrap(),
        root.join("shard-3-of-4").to_str().unwrap(),
        root.join("shard-4-of-4").to_str().unwrap(),
    ]);
    assert_eq!(merged["records"], 400);
    assert_eq!(merged["distributed"]["run_id"], "r-1");
    assert_eq!(
        merged["distributed"]["present"],
        serde_json::json!([1, 2, 3, 4])
    );
    // The union's figures are those of the same records in one file: exact, not merged
    // summaries.
    let single = json(&[one.to_str().unwrap()]);
    assert_eq!(merged["cells"], single["cells"]);
    assert_eq!(merged["keys"], single["keys"]);

    // The parent folder holds the shards: the same run. (Its one.jsonl is set aside first.)
    std::fs::remove_file(&one).unwrap();
    let parent = json(&[root.to_str().unwrap()]);
    assert_eq!(parent["cells"], single["cells"]);
    let text = tokentap(&["report", root.to_str().unwrap()]);
    let first = String::from_utf8_lossy(&text.stdout)
        .lines()
        .next()
        .unwrap()
        .to_owned();
    assert!(first.contains("run r-1, its 4 shards merged"), "{first}");

    // A shard missing: refused, naming it; told, reported with what is missing.
    std::fs::remove_dir_all(root.join("shard-3-of-4")).unwrap();
    let out = tokentap(&["report", root.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("run r-1: shard 3 of 4 missing (read 3 of 4)"),
        "{err}"
    );
    let partial = json(&["--allow-partial", root.to_str().unwrap()]);
    assert_eq!(partial["records"], 300);
    assert_eq!(
        partial["distributed"]["present"],
        serde_json::json!([1, 2, 4])
    );
    assert!(partial["distributed"]["partial"]
        .as_str()
        .unwrap()
        .contains("shard 3"));

    // A shard of another run beside them: refused.
    shard(&root, "r-2", 3, 4, &(all[200..300].join("\n") + "\n"));
    let out = tokentap(&["report", root.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shards of different runs: r-1 (shards 1/4, 2/4, 4/4); r-2 (shards 3/4)"),
        "{err}"
    );
    // compare refuses it too, and reads it when told.
    let out = tokentap(&["compare", root.to_str().unwrap(), root.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tokentap(&[
        "compare",
        "--allow-partial",
        root.to_str().unwrap(),
        root.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Nearest-rank percentile of sorted values.
fn rank(sorted: &[f64], p: f64) -> f64 {
    let i = ((p * sorted.len() as f64).ceil() as usize).max(1);
    sorted[i.min(sorted.len()) - 1]
}

/// The most requests in flight at once among `spans` (start, end) in ms. A record's `ts` is the
/// process's clock at the head, its `e2e_ms` runs from the kernel's stamp of it, a little
/// earlier: each span's end is taken 2 ms in, far less than a request lasts (55 ms here).
fn most_in_flight(spans: &[(f64, f64)]) -> usize {
    let mut edges: Vec<(f64, i32)> = spans
        .iter()
        .flat_map(|(a, b)| [(*a, 1), (*b - 2.0, -1)])
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_bench_shards_through_two_replicas_are_one_run() {
    use tokentap::sim::Pace;
    let ms = std::time::Duration::from_millis;
    let sim = support::load::sim_paced(Pace {
        first: ms(20),
        gap: ms(5),
        tokens: 8,
        delta_bytes: None,
    });
    let engine = format!("http://{}", sim.engine);
    let mut replicas = [
        support::proxy(&engine, "").await,
        support::proxy(&engine, "").await,
    ];
    let root = support::scratch("fleet-run");
    let out = root.join("run");
    let start = std::time::SystemTime::now() + std::time::Duration::from_secs(4);
    let start_at = humantime::format_rfc3339_seconds(start + std::time::Duration::from_secs(1));
    let flags = |target: String, out: &Path| -> Vec<String> {
        [
            "bench",
            "--target",
            &target,
            "--concurrency",
            "4,8",
            "--requests",
            "24",
            "--warmup",
            "4",
            "--buckets",
            "balanced",
            "--no-estimate",
            "--no-calibrate",
            "--scrape",
            "off",
            "--out",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // Shards 1 and 2 through one replica, 3 and 4 through the other, as processes.
    let shards: Vec<std::process::Child> = (1..=4)
        .map(|i| {
            let px = &replicas[(i - 1) / 2];
            let mut args = flags(format!("http://{}", px.addr), &out);
            let window = [
                "--shard",
                &format!("{i}/4"),
                "--start-at",
                &start_at.to_string(),
                "--cell-window",
                "3s",
            ];
            args.extend(window.iter().map(|s| s.to_string()));
            Command::new(env!("CARGO_BIN_EXE_tokentap"))
                .args(&args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in shards {
        let o = tokio::task::spawn_blocking(move || c.wait_with_output().unwrap())
            .await
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // The same load from one process, through the first replica, for the figures' sake.
    let single = root.join("single");
    let one = tokentap(
        &flags(format!("http://{}", replicas[0].addr), &single)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );

    let report = |p: &Path| -> serde_json::Value {
        let o = tokentap(&[
            "report",
            "--format",
            "json",
            "--whole-cell",
            p.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let merged = report(&out);
    assert_eq!(
        merged["distributed"]["present"],
        serde_json::json!([1, 2, 3, 4])
    );
    let records: Vec<tokentap::meter::RequestRecord> = (1..=4)
        .flat_map(|i| support::load::bench_records(&out.join(format!("shard-{i}-of-4"))))
        .collect();
    assert_eq!(records.len(), 48, "24 measured requests a cell, two cells");
    let run_id = records[0].run_id.clone().unwrap();
    assert!(records
        .iter()
        .all(|r| r.run_id.as_deref() == Some(run_id.as_str())));
    for (level, cell) in [(4u64, "4"), (8, "8")] {
        let mine: Vec<&tokentap::meter::RequestRecord> = records
            .iter()
            .filter(|r| r.concurrency == Some(level))
            .collect();
        // Every request of the one plan once: positions 4..28, each sent by one shard.
        let mut prompts: Vec<u64> = mine.iter().filter_map(|r| r.prompt_index).collect();
        prompts.sort_unstable();
        let plan: Vec<u64> = support::load::bench_records(&single)
            .iter()
            .filter(|r| r.concurrency == Some(level))
            .filter_map(|r| r.prompt_index)
            .collect();
        let mut plan_sorted = plan.clone();
        plan_sorted.sort_unstable();
        assert_eq!(prompts, plan_sorted, "C={level}");
        // The merged cell's percentiles are the union's.
        let mut ttft: Vec<f64> = mine.iter().filter_map(|r| r.ttft_ms).collect();
        ttft.sort_by(f64::total_cmp);
        let c = merged["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["concurrency"] == cell)
            .unwrap();
        assert_eq!(c["requests"], 24);
        for (p, key) in [(0.5, "p50"), (0.95, "p95")] {
            let got = c["ttft_ms"][key].as_f64().unwrap();
            assert!(
                (got - rank(&ttft, p)).abs() < 1e-6,
                "C={level} {key}: {got} against {}",
                rank(&ttft, p)
            );
        }
        // The level is the fleet's: the two replicas together held C requests at once, never
        // more, though each shard ran C ÷ 4 of them.
        let proxied: Vec<(f64, f64)> = replicas
            .iter()
            .flat_map(|px| support::load::read_records(&px.log))
            .filter(|r| {
                r.concurrency == Some(level)
                    && r.request_id
                        .as_deref()
                        .is_some_and(|id| mine.iter().any(|m| m.request_id.as_deref() == Some(id)))
            })
            .map(|r| {
                let t = humantime::parse_rfc3339(&r.ts).unwrap();
                let a = t
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64()
                    * 1000.0;
                (a, a + r.e2e_ms)
            })
            .collect();
        assert_eq!(proxied.len(), 24, "C={level}");
        assert_eq!(most_in_flight(&proxied), level as usize, "C={level}");
        // As one process measured it: the paced engine's TTFT is the same load or not.
        let single_c = report(&single)["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["concurrency"] == cell)
            .unwrap()["ttft_ms"]["p50"]
            .as_f64()
            .unwrap();
        let fleet_c = c["ttft_ms"]["p50"].as_f64().unwrap();
        assert!(
            (fleet_c - single_c).abs() < 5.0,
            "C={level}: {fleet_c} against {single_c}"
        );
    }
    for px in &mut replicas {
        px.shutdown().await;
    }
}
