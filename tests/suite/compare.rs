//! `tokentap compare` on real runs: bench against `tokentap sim` over real sockets, on four
//! simulated engines — BASE, BASE again and a decode step 10 % faster taken at once (so a loaded
//! machine slows them alike), then one 10 % slower — and compared: the known
//! change recovered in every cell, the null change inside its intervals, pairing narrower than
//! not pairing, and the gate (the binary) failing on the regression and naming the cells.
//!
//! The runs are at C=1: one sequence in the engine at a time, so a request's TPOT is its decode
//! steps alone and a decode step 10 % faster is exactly −10 % TPOT (the truth). Prompt lengths
//! vary within a bucket and prefill costs per token, so TTFT and E2E vary prompt by prompt:
//! what pairing takes out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use support::load::*;
use tokentap::compare::{self, side, Comparison};
use tokentap::report::Slos;
use tokentap::sim::Profile;

/// A small engine: prefill by prompt length, a 10 ms decode step (scaled by `decode`).
fn profile(decode: f64) -> Profile {
    Profile {
        prefill_base_ms: 4.0,
        prefill_per_token_ms: 0.05,
        prefill_per_seq_ms: 1.0,
        step_base_ms: 10.0 * decode,
        step_per_seq_ms: 0.2 * decode,
        ..Profile::v100()
    }
}

struct Runs {
    base: PathBuf,
    again: PathBuf,
    faster: PathBuf,
    slower: PathBuf,
    /// 8 requests a cell: BASE, and a decode step 10 % slower, taken at once.
    base8: PathBuf,
    slower8: PathBuf,
    /// 10 requests a cell: the same engine twice, at once.
    same10: [PathBuf; 2],
}

/// The runs, taken once for every test of this file.
fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = support::scratch("compare");
        let plan = [
            ("base", 1.0, 20),
            ("again", 1.0, 20),
            ("faster", 0.9, 20),
            ("slower", 1.1, 20),
            ("base8", 1.0, 8),
            ("slower8", 1.1, 8),
            ("same10a", 1.0, 10),
            ("same10b", 1.0, 10),
        ];
        let sims: Vec<SimApart> = plan.iter().map(|(_, d, _)| sim_on(profile(*d))).collect();
        let cfgs: Vec<_> = plan
            .iter()
            .zip(&sims)
            .map(|((name, _, requests), s)| {
                let mut b = bench_cfg(s, dir.join(name));
                b.common.requests = *requests;
                b.common.warmup = 1;
                b.common.prompts.outputs = [8, 8, 8];
                b.common.prompts.prompts_per_bucket = 20;
                b.common.estimate = false;
                // Nothing but the load on the sims: the null change is judged to its intervals.
                b.common.scrape.plan = tokentap::bench::scrape::ScrapePlan::Off;
                b.load = tokentap::bench::Load::closed(vec![1]);
                b
            })
            .collect();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        // BASE, BASE again and the faster decode at once (the null and the known change each
        // compare runs taken together); then the slower one, for the gate; then each small
        // pair at once.
        let mut cfgs = cfgs.into_iter();
        for n in [3, 1, 2, 2] {
            let phase: Vec<_> = cfgs.by_ref().take(n).collect();
            rt.block_on(async {
                let all: Vec<_> = phase
                    .into_iter()
                    .map(|c| tokio::spawn(async move { run_bench(&c).await }))
                    .collect();
                for h in all {
                    assert!(!h.await.unwrap().interrupted);
                }
            });
        }
        drop(sims);
        Runs {
            base: dir.join("base"),
            again: dir.join("again"),
            faster: dir.join("faster"),
            slower: dir.join("slower"),
            base8: dir.join("base8"),
            slower8: dir.join("slower8"),
            same10: [dir.join("same10a"), dir.join("same10b")],
        }
    })
}

/// `tokentap compare ARGS…`: its exit status, stdout and stderr.
fn tokentap(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("compare")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn compared(base: &Path, new: &Path, unpaired: bool) -> Comparison {
    let slos = Slos::default();
    let (b, n) = (
        side::read(base, &slos, false).unwrap(),
        side::read(new, &slos, false).unwrap(),
    );
    compare::compare(&b, &n, 42, unpaired)
}

fn cells(c: &Comparison) -> impl Iterator<Item = &compare::CellDiff> {
    c.cells.iter().filter(|c| !c.pooled)
}

fn diff<'a>(cell: &'a compare::CellDiff, m: &str) -> &'a compare::boot::Diff {
    cell.metrics.iter().find(|d| d.metric == m).unwrap()
}

#[test]
fn a_decode_step_10_percent_faster_is_recovered_in_every_cell() {
    let r = runs();
    let c = compared(&r.base, &r.faster, false);
    assert_eq!(c.pairing, "paired", "{}", c.pairing_note);
    assert!(c.mismatches.is_empty(), "{:?}", c.mismatches);
    assert_eq!(cells(&c).count(), 3, "three buckets at C=1");
    for cell in cells(&c) {
        assert!(cell.paired && cell.pairs == Some(20), "{cell:?}");
        let d = diff(cell, "tpot_p50");
        let ci = d.rel_ci.unwrap();
        // Within half a point of the truth: a loaded machine's timer adds its own few µs.
        assert!(
            ci[0] <= -0.095 && -0.105 <= ci[1],
            "{}: TPOT p50 {:?} [{ci:?}] misses the truth −10 %",
            cell.cell,
            d.rel
        );
        assert!((d.rel.unwrap() + 0.10).abs() < 0.03, "{d:?}");
        // The decode's change shows in per-stream throughput too, and never in errors.
        assert!(diff(cell, "tok_s_per_stream_p50").rel.unwrap() > 0.05);
        assert_eq!(diff(cell, "error_rate").abs, Some(0.0));
    }
    let tpot = c.verdicts.iter().find(|v| v.metric == "tpot_p50").unwrap();
    assert_eq!((tpot.lower, tpot.cells), (3, 3), "{}", tpot.line);
    assert!(tpot.line.contains("lower in 3 of 3 cells"), "{}", tpot.line);
}

#[test]
fn the_same_config_twice_stays_within_its_intervals_and_passes_the_gate() {
    let r = runs();
    let c = compared(&r.base, &r.again, false);
    assert_eq!(c.pairing, "paired");
    let mut total = 0;
    let mut missed = Vec::new();
    for cell in &c.cells {
        for d in &cell.metrics {
            if let Some(ci) = d.abs_ci {
                total += 1;
                // Two runs on one 2-core machine at once differ by what the scheduler did to
                // each: an interval that misses 0 by less than 1 % of BASE (0.5 ms more for a
                // time) is that, not a change.
                let tol =
                    0.01 * d.base.unwrap_or(0.0).abs() + if d.unit == "ms" { 0.5 } else { 0.0 };
                if !(ci[0] <= tol && -tol <= ci[1]) {
                    missed.push(format!("{} {} {ci:?}", cell.cell, d.metric));
                }
            }
        }
    }
    assert!(total >= 40, "{total} intervals");
    assert!(
        missed.len() * 20 <= total,
        "{} of {total} intervals miss 0: {missed:?}",
        missed.len()
    );
    // The decode step is deterministic: 20 requests a side put TPOT p50's interval within ±3 %
    // in every cell, so that gate passes.
    let mut g = c.clone();
    compare::gate(&mut g, &compare::gate::parse("tpot_p50:+3%").unwrap());
    let gate = g.gate.unwrap();
    assert_eq!(gate.verdict, compare::gate::Outcome::Pass, "{gate:?}");
    assert!(gate.not_judged.is_empty(), "{:?}", gate.not_judged);
    assert!(gate
        .thresholds
        .iter()
        .all(|t| t.judged == 3 && t.cells == 3));
    // No error in 20 requests a side cannot show the error rate stayed within +0.5 pp (by the
    // rule of three, up to 15 % could hide there): not judged, and the gate fails closed.
    let mut g = c.clone();
    compare::gate(&mut g, &compare::gate::parse("error_rate:+0.5pp").unwrap());
    assert!(g.regressions.is_empty(), "{:?}", g.regressions);
    let gate = g.gate.unwrap();
    assert_eq!(gate.verdict, compare::gate::Outcome::NotJudged, "{gate:?}");
    assert_eq!(gate.not_judged.len(), 3, "{:?}", gate.not_judged);
    for u in &gate.not_judged {
        assert_eq!(u.why, compare::evidence::Why::Straddles, "{u:?}");
        assert!(u.need.is_some_and(|n| n > 1000), "{u:?}");
    }
}

#[test]
fn pairing_by_prompt_narrows_the_intervals() {
    let r = runs();
    let paired = compared(&r.base, &r.faster, false);
    let unpaired = compared(&r.base, &r.faster, true);
    assert_eq!(unpaired.pairing, "unpaired");
    assert!(unpaired
        .cells
        .iter()
        .all(|c| !c.paired && c.pairs.is_none()));
    let width = |c: &Comparison, m: &str| -> Vec<f64> {
        cells(c)
            .map(|cell| {
                let ci = diff(cell, m).abs_ci.unwrap();
                ci[1] - ci[0]
            })
            .collect()
    };
    // TTFT and E2E follow the prompt's length: pairing takes that out.
    let mut ratios = Vec::new();
    for m in ["ttft_p50", "e2e_p50"] {
        for (p, u) in width(&paired, m).into_iter().zip(width(&unpaired, m)) {
            ratios.push(p / u);
        }
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    assert!(
        median < 0.9,
        "paired ÷ unpaired interval widths: {ratios:?}"
    );
}

#[test]
fn the_gate_fails_on_a_10_percent_tpot_regression_and_names_the_cells() {
    let r = runs();
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("compare")
        .arg(&r.base)
        .arg(&r.slower)
        .args(["--fail-on-regression", "tpot_p50:+3%", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for bucket in ["long-short", "balanced", "short-long"] {
        let line = format!("chat {bucket} C=1: tpot_p50 [+");
        assert!(err.contains(&line), "no {line:?} in {err}");
    }
    assert!(err.contains("beyond tpot_p50:+3%"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["comparisons"][0]["regressions"].as_array().unwrap().len(),
        3
    );
    // The same runs pass a threshold the change stays under, and a bad spec is named.
    let ok = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("compare")
        .arg(&r.base)
        .arg(&r.slower)
        .args(["--fail-on-regression", "tpot_p50:+25%"])
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("compare")
        .arg(&r.base)
        .arg(&r.slower)
        .args(["--fail-on-regression", "tpot_p50:+3%,ttft_p96:+5%"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("\"ttft_p96:+5%\": unknown metric"), "{err}");
}

#[test]
fn every_format_renders_and_html_draws_both_runs() {
    let r = runs();
    let run = |fmt: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokentap"));
        cmd.arg("compare").arg(&r.base).arg(&r.faster);
        if fmt == "table" {
            cmd.arg(&r.again);
        }
        let out = cmd.args(["--format", fmt]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let table = run("table");
    assert!(table.contains("paired by prompt"), "{table}");
    assert!(table.contains("tpot_p50") && table.contains("SLO verdict changes"));
    assert_eq!(
        table.matches("tokentap compare: ").count(),
        2,
        "BASE against each NEW"
    );
    let md = run("md");
    assert!(
        md.contains("| cell |") && md.contains("## Verdicts"),
        "{md}"
    );
    let html = run("html");
    assert!(html.contains("TPOT p50: BASE dashed, NEW solid"));
    assert!(html.contains("TPOT p50: NEW − BASE per cell, 95 % interval"));
    assert!(html.contains("stroke-dasharray"), "BASE is dashed");
    assert!(!html.contains("<script"));
}

#[test]
fn mismatches_and_slo_changes_are_named() {
    let r = runs();
    let slos = Slos::default();
    let base = side::read(&r.base, &slos, false).unwrap();
    // NEW: the faster run without its long-short cell, under another model name, with its
    // balanced TTFTs pushed past the interactive SLO, and a different requests_per_cell.
    let mut recs = bench_records(&r.faster);
    recs.retain(|x| x.bucket.as_deref() != Some("long-short"));
    for x in &mut recs {
        x.model = Some("other-model".into());
        if x.bucket.as_deref() == Some("balanced") {
            x.ttft_ms = x.ttft_ms.map(|t| t + 600.0);
        }
    }
    let mut run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.faster.join("run.json")).unwrap()).unwrap();
    run["requests_per_cell"] = 21.into();
    let new = side::of_records("edited".into(), Some(run), &recs, &slos);
    let c = compare::compare(&base, &new, 42, false);
    let m = c.mismatches.join("\n");
    assert!(m.contains("cells in BASE only: chat long-short C=1"), "{m}");
    assert!(
        m.contains("models differ: BASE sim, NEW other-model"),
        "{m}"
    );
    assert!(m.contains("load differs: requests_per_cell 20 → 21"), "{m}");
    assert_eq!(c.pairing, "paired", "the prompt set is the same");
    assert!(
        c.slo_changes
            .contains(&"chat balanced C=1: interactive met → MISS".to_owned()),
        "{:?}",
        c.slo_changes
    );
    // Logs without run.json: unpaired, and said why.
    let logs = side::of_records("logs".into(), None, &recs, &slos);
    let u = compare::compare(&base, &logs, 42, false);
    assert_eq!(u.pairing, "unpaired");
    assert!(
        u.pairing_note.contains("not both bench runs"),
        "{}",
        u.pairing_note
    );
    assert!(u
        .mismatches
        .contains(&"BASE is a bench run (run.json), NEW is not".to_owned()));
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

fn verdict<'a>(c: &'a Comparison, m: &str) -> &'a compare::Verdict {
    c.verdicts.iter().find(|v| v.metric == m).unwrap()
}

#[test]
fn eight_requests_a_cell_cannot_judge_a_real_regression_and_the_gate_says_so() {
    let r = runs();
    // The decode step is 10 % slower: the truth is +10 % TPOT, but 8 requests a side give a
    // median no covering interval (a p50 needs 9), so the gate cannot pass it, nor fail it on it.
    let c = compared(&r.base8, &r.slower8, false);
    for cell in cells(&c) {
        let d = diff(cell, "tpot_p50");
        // +10 % quiet; +16 % was read on a loaded machine: slower is what matters here.
        assert!((0.03..0.25).contains(&d.rel.unwrap()), "{d:?}");
        let nj = d.not_judged.expect("not judged");
        assert_eq!((nj.why, nj.need), (compare::evidence::Why::TooFew, Some(9)));
        assert_eq!(d.verdict, compare::evidence::Change::NotJudged);
    }
    let v = verdict(&c, "tpot_p50");
    assert_eq!(v.verdict, compare::MetricChange::NotJudged, "{}", v.line);
    assert!(v.line.contains("p50 needs 9 values a side"), "{}", v.line);
    let gated = |allow: bool| {
        let mut args = vec![
            r.base8.as_os_str(),
            r.slower8.as_os_str(),
            os("--fail-on-regression"),
            os("tpot_p50:+3%"),
            os("--format"),
            os("json"),
        ];
        if allow {
            args.push(os("--allow-unjudged"));
        }
        tokentap(&args)
    };
    let (code, out, err) = gated(false);
    assert_eq!(code, Some(3), "{err}");
    for bucket in ["long-short", "balanced", "short-long"] {
        let line = format!(
            "not judged: {} → {}: chat {bucket} C=1: tpot_p50 (p50 needs 9 values a side: BASE 8, NEW 8)",
            r.base8.display(),
            r.slower8.display()
        );
        assert!(err.contains(&line), "no {line:?} in {err}");
    }
    assert!(err.contains("tpot_p50:+3% judged in 0 of 3 cells"), "{err}");
    assert!(
        !err.contains("no regression beyond tpot_p50:+3% (every cell"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let g = &v["comparisons"][0]["gate"];
    assert_eq!(g["verdict"], "not_judged");
    assert_eq!(g["not_judged"].as_array().unwrap().len(), 3);
    assert_eq!(g["not_judged"][0]["why"], "too_few");
    assert_eq!(g["thresholds"][0]["judged"], 0);
    assert_eq!(v["comparisons"][0]["regressions"], serde_json::json!([]));
    // --allow-unjudged: passes, and still names each cell it could not judge.
    let (code, out, err) = gated(true);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err.matches("not judged: ").count(), 3, "{err}");
    assert!(
        err.contains("3 cell and threshold pair(s) not judged, passed by --allow-unjudged"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["comparisons"][0]["gate"]["verdict"], "pass");
    assert_eq!(v["comparisons"][0]["gate"]["allow_unjudged"], true);
    assert_eq!(
        v["comparisons"][0]["gate"]["not_judged"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // The table says it too.
    let (code, table, _) = tokentap(&[
        r.base8.as_os_str(),
        r.slower8.as_os_str(),
        os("--fail-on-regression"),
        os("tpot_p50:+3%"),
    ]);
    assert_eq!(code, Some(3));
    assert!(table.contains("Gate (--fail-on-regression):"), "{table}");
    assert!(table.contains("not judged (exit 3)"), "{table}");
    assert!(
        table.contains("not judged: p50 needs 9 values a side"),
        "{table}"
    );
}

#[test]
fn the_same_engine_twice_at_10_requests_is_inconclusive_not_unchanged() {
    let r = runs();
    let [a, b] = &r.same10;
    for unpaired in [false, true] {
        let c = compared(a, b, unpaired);
        for v in &c.verdicts {
            // Whatever a metric reads, `unchanged` only with every cell judged and within ±5 %.
            if v.verdict == compare::MetricChange::Unchanged {
                for cell in cells(&c) {
                    let d = diff(cell, v.metric);
                    let (_, ci, _) = compare::reading(d).unwrap();
                    assert!(ci[0] >= -5.0 && ci[1] <= 5.0, "{}: {ci:?}", v.line);
                }
            }
        }
        // No error in 10 requests a side bounds the error rate only to 30 pp (the rule of
        // three); 300 a cell would bring it within ±1 pp.
        for m in ["error_rate", "goodput"] {
            let v = verdict(&c, m);
            assert_eq!(v.verdict, compare::MetricChange::Inconclusive, "{}", v.line);
            assert_eq!(v.settle.unwrap().n, 300, "{}", v.line);
            assert_eq!(v.widest.as_ref().unwrap().interval, [-30.0, 30.0]);
        }
        assert_eq!(
            verdict(&c, "ttft_p95").verdict,
            compare::MetricChange::NotJudged
        );
    }
    // Unpaired, TTFT follows each prompt's length: the same engine's medians of 10 requests
    // are far from settled, and the line says how far and what would settle it.
    let c = compared(a, b, true);
    let v = verdict(&c, "ttft_p50");
    assert_eq!(v.verdict, compare::MetricChange::Inconclusive, "{}", v.line);
    let w = v.widest.as_ref().unwrap();
    assert!(w.interval[1] - w.interval[0] > 10.0, "{}", v.line);
    assert!(v.settle.unwrap().n > 10, "{}", v.line);
    assert!(
        v.line
            .contains("would settle it, an estimate: an interval narrows as 1/√n"),
        "{}",
        v.line
    );
    assert!(!v.line.contains("unchanged"), "{}", v.line);
}

#[test]
fn the_same_engine_twice_at_20_requests_is_unchanged_within_the_margin() {
    let r = runs();
    let c = compared(&r.base, &r.again, false);
    for m in ["tpot_p50", "tok_s_per_stream_p50"] {
        let v = verdict(&c, m);
        assert_eq!(v.verdict, compare::MetricChange::Unchanged, "{}", v.line);
        assert_eq!((v.unchanged, v.compared, v.not_judged), (3, 3, 0));
        assert!(
            v.line
                .contains("unchanged: every cell's interval within ±5 %"),
            "{}",
            v.line
        );
    }
    // A margin narrower than the intervals: the same runs are then inconclusive, never
    // unchanged.
    let (b, n) = (
        side::read(&r.base, &Slos::default(), false).unwrap(),
        side::read(&r.again, &Slos::default(), false).unwrap(),
    );
    let tight = compare::evidence::Equivalence {
        relative_pct: 1e-6,
        rates_pp: 1.0,
    };
    let c = compare::compare_within(&b, &n, 42, false, tight);
    let v = verdict(&c, "tpot_p50");
    assert_ne!(v.verdict, compare::MetricChange::Unchanged, "{}", v.line);
    // And the flag reaches it.
    let (code, out, err) = tokentap(&[
        r.base.as_os_str(),
        r.again.as_os_str(),
        os("--equivalence"),
        os("50%,40pp"),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("unchanged within ±50 %"), "{out}");
    assert!(
        out.contains("error_rate unchanged: every cell's interval within ±40 pp"),
        "{out}"
    );
    let (code, _, err) = tokentap(&[
        r.base.as_os_str(),
        r.again.as_os_str(),
        os("--equivalence"),
        os("5"),
    ]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("--equivalence: \"5\""), "{err}");
}

#[test]
fn a_regression_exits_1_even_beside_cells_not_judged() {
    let r = runs();
    // tpot_p50 is judged in every cell and beyond +3 %; ttft_p99 needs 100 values a side and is
    // judged in none. The regression (1) wins over not judged (3), and both are said.
    let (code, out, err) = tokentap(&[
        r.base.as_os_str(),
        r.slower.as_os_str(),
        os("--fail-on-regression"),
        os("tpot_p50:+3%,ttft_p99:+5%"),
        os("--format"),
        os("json"),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("tpot_p50:+3% judged in 3 of 3 cells"), "{err}");
    assert!(err.contains("ttft_p99:+5% judged in 0 of 3 cells"), "{err}");
    assert!(
        err.contains("ttft_p99 (p99 needs 100 values a side: BASE 20, NEW 20)"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = &v["comparisons"][0];
    assert_eq!(c["gate"]["verdict"], "regression");
    assert_eq!(c["regressions"].as_array().unwrap().len(), 3);
    assert_eq!(c["gate"]["thresholds"][0]["beyond"], 3);
    assert_eq!(c["gate"]["not_judged"].as_array().unwrap().len(), 3);
    // Each difference carries its verdict and what it rests on; each metric its verdict.
    let tpot = c["cells"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "tpot_p50")
        .unwrap();
    assert_eq!(tpot["verdict"], "higher");
    assert_eq!(tpot["n"], serde_json::json!([20, 20]));
    let verdict = c["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "tpot_p50")
        .unwrap();
    assert_eq!(verdict["verdict"], "higher");
    assert!(verdict["line"]
        .as_str()
        .unwrap()
        .contains("higher in 3 of 3 cells"));
}

#[test]
fn a_cell_in_one_run_only_is_not_judged_by_the_gate() {
    let r = runs();
    // NEW: the faster run without its long-short cell, as a bench folder.
    let dir = support::scratch("compare-one-side");
    let mut recs = bench_records(&r.faster);
    recs.retain(|x| x.bucket.as_deref() != Some("long-short"));
    let lines: String = recs
        .iter()
        .map(|x| serde_json::to_string(x).unwrap() + "\n")
        .collect();
    std::fs::write(dir.join("requests.jsonl"), lines).unwrap();
    std::fs::copy(r.faster.join("run.json"), dir.join("run.json")).unwrap();
    let args = |allow: bool| {
        let mut a = vec![
            r.base.as_os_str(),
            dir.as_os_str(),
            os("--fail-on-regression"),
            os("tpot_p50:+3%"),
        ];
        if allow {
            a.push(os("--allow-unjudged"));
        }
        a
    };
    let (code, out, err) = tokentap(&args(false));
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("chat long-short C=1: tpot_p50 (the cell is in BASE only)"),
        "{err}"
    );
    assert!(err.contains("tpot_p50:+3% judged in 2 of 3 cells"), "{err}");
    assert!(
        out.contains("cells in BASE only: chat long-short C=1"),
        "{out}"
    );
    let (code, _, err) = tokentap(&args(true));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("(the cell is in BASE only)"), "{err}");
    // The other way round: the cell is in NEW only.
    let (code, _, err) = tokentap(&[
        dir.as_os_str(),
        r.base.as_os_str(),
        os("--fail-on-regression"),
        os("tpot_p50:+30%"),
    ]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("(the cell is in NEW only)"), "{err}");
}

#[test]
fn runs_with_no_cell_or_no_record_are_not_judged_even_when_unjudged_cells_are_allowed() {
    let slos = Slos::default();
    let empty = side::of_records("empty".into(), None, &[], &slos);
    let mut c = compare::compare(&empty, &empty, 42, false);
    assert!(c.cells.is_empty() && c.verdicts.is_empty());
    let t = compare::gate::parse("tpot_p50:+3%").unwrap();
    compare::gate_with(&mut c, &t, true);
    let g = c.gate.unwrap();
    assert_eq!(g.verdict, compare::gate::Outcome::NotJudged);
    assert_eq!((g.thresholds[0].judged, g.thresholds[0].cells), (0, 0));
    // A run folder without a record measured nothing: not judged (3), with or without a gate.
    let dir = support::scratch("compare-empty");
    std::fs::write(dir.join("requests.jsonl"), "").unwrap();
    for gate in [
        &[][..],
        &[os("--fail-on-regression"), os("tpot_p50:+3%")][..],
    ] {
        let mut args = vec![dir.as_os_str(), dir.as_os_str()];
        args.extend_from_slice(gate);
        let (code, _, err) = tokentap(&args);
        assert_eq!(code, Some(3), "{err}");
        assert!(err.contains("nothing measured to compare"), "{err}");
    }
}
