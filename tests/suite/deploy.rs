//! The shipped deploy files agree with each other and with tokentap, checked without outside
//! software (the opt-in scripts add the checks that need it: kubernetes-validate, promtool, a
//! real Prometheus): the PrometheusRule carries exactly `deploy/prometheus/tokentap-rules.yml`'s
//! groups, every tokentap config a Kubernetes ConfigMap embeds passes `tokentap check`, and the
//! Grafana ConfigMap carries the dashboard file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap()
}

/// The block under the line `key`, dedented by that block's own indent: the lines after it that
/// are blank or indented deeper than `key`'s line.
fn block_after(text: &str, key: &str) -> Vec<String> {
    let mut lines = text.lines();
    let at = lines
        .by_ref()
        .position(|l| l.trim_end() == key.trim_end())
        .unwrap();
    let key_indent = text.lines().nth(at).unwrap().len() - key.trim_start().len();
    let block: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > key_indent)
        .collect();
    let indent = block
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out: Vec<String> = block
        .iter()
        .map(|l| l.get(indent..).unwrap_or("").trim_end().to_owned())
        .collect();
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

#[test]
fn the_prometheus_rule_carries_the_rules_file() {
    let rules = block_after(&read("deploy/prometheus/tokentap-rules.yml"), "groups:");
    let manifest = block_after(&read("deploy/kubernetes/monitoring.yaml"), "  groups:");
    assert!(rules.len() > 20, "{rules:?}");
    for (i, (a, b)) in rules.iter().zip(&manifest).enumerate() {
        assert_eq!(a, b, "deploy/kubernetes/monitoring.yaml differs from tokentap-rules.yml at line {} of the groups", i + 1);
    }
    assert_eq!(
        rules.len(),
        manifest.len(),
        "the two groups blocks differ in length"
    );
}

#[test]
fn every_embedded_config_passes_check() {
    let mut n = 0;
    let dir = root().join("deploy/kubernetes");
    let scratch = std::env::temp_dir().join(format!("tokentap-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap();
        if !text.lines().any(|l| l.trim_end() == "  tokentap.toml: |") {
            continue;
        }
        let toml = block_after(&text, "  tokentap.toml: |").join("\n") + "\n";
        n += 1;
        let p = scratch.join(format!("{n}.toml"));
        std::fs::write(&p, toml).unwrap();
        let args = tokentap::check::Args { config: p.clone() };
        if let Err(err) = tokentap::check::run(&args) {
            panic!(
                "{}: its tokentap.toml fails check: {err}",
                e.path().display()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(
        n >= 2,
        "the vLLM and LiteLLM manifests embed configs: found {n}"
    );
}

#[test]
fn the_grafana_configmap_carries_the_dashboard() {
    let dash: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/tokentap-dashboard.json")).unwrap();
    let cm = block_after(&read("deploy/grafana/configmap.yaml"), "  tokentap.json: |").join("\n");
    let carried: serde_json::Value = serde_json::from_str(&cm).unwrap();
    assert_eq!(carried, dash, "deploy/grafana/configmap.yaml is stale");
}

/// Every bench Job's arguments are ones `tokentap bench` accepts: run as the manifest runs them
/// (the Indexed Job's index and start time in its environment), aimed at a closed port, the run
/// gets past its flags and stops at the target (exit 1), never at a usage error (64).
#[test]
fn every_bench_job_runs_bench_with_flags_it_accepts() {
    let mut n = 0;
    for f in [
        "deploy/kubernetes/bench-job.yaml",
        "deploy/kubernetes/bench-indexed-job.yaml",
    ] {
        let text = read(f);
        let args: Vec<String> = block_after(&text, "          args:")
            .iter()
            .filter_map(|l| l.strip_prefix("- "))
            .map(str::to_owned)
            .collect();
        assert_eq!(args.first().map(String::as_str), Some("bench"), "{f}");
        let out =
            std::env::temp_dir().join(format!("tokentap-deploy-bench-{}-{n}", std::process::id()));
        let args: Vec<String> = args
            .into_iter()
            .map(|a| {
                let a = a.replace("$(START_AT)", "2026-12-05T10:00:00Z");
                match a.split_once('=') {
                    Some(("--target", _)) => "--target=http://127.0.0.1:1".into(),
                    Some(("--out", _)) => format!("--out={}", out.display()),
                    _ => a,
                }
            })
            .collect();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(&args)
            .env("JOB_COMPLETION_INDEX", "2")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{f}: {args:?}: {err}");
        assert!(
            err.contains("127.0.0.1:1"),
            "{f}: stopped at the target: {err}"
        );
        if f.ends_with("indexed-job.yaml") {
            assert!(
                out.join("shard-3-of-4").is_dir(),
                "{f}: the pod's shard folder"
            );
        }
        let _ = std::fs::remove_dir_all(&out);
        n += 1;
    }
    assert_eq!(n, 2);
}
