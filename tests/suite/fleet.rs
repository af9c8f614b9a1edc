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
