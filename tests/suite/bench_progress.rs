//! What `tokentap bench` says while it runs, read as a log reader meets it: the binary against
//! the simulated V100 engine over real sockets, stderr piped (not a terminal), the heartbeat
//! shortened with `--progress-every`. An estimate comes before the first cell and is near what
//! the run took (a closed sweep, an open loop, a search's bound), a line per cell with its TTFT
//! p95, elapsed time and ETA, and heartbeat lines with an ETA between them. The runs take turns
//! (one lock), so the estimates are compared with runs that had the machine to themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use support::load::*;
use support::*;
use tokentap::sim::Profile;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The run's stderr lines, each with when it arrived, and its stdout.
struct Run {
    lines: Vec<(Instant, String)>,
    stdout: String,
}

impl Run {
    fn find(&self, prefix: &str) -> Vec<&(Instant, String)> {
        self.lines
            .iter()
            .filter(|l| l.1.starts_with(prefix))
            .collect()
    }

    fn estimate(&self) -> &(Instant, String) {
        let e = self.find("estimate: ");
        assert_eq!(e.len(), 1, "one estimate line: {:#?}", self.lines);
        e[0]
    }

    /// The cell lines (they carry `N measured, `), in order.
    fn cells(&self) -> Vec<&(Instant, String)> {
        self.lines
            .iter()
            .filter(|l| l.1.contains(" measured, ") && l.1.contains("TTFT p95"))
            .collect()
    }
}

fn bench(args: &[&str]) -> Run {
    let s = sim_on(Profile::v100());
    let dir = scratch("progress");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args([
            "bench",
            "--target",
            &format!("http://{}", s.engine),
            "--out",
        ])
        .arg(&dir)
        .args(["--no-calibrate", "--progress-every", "300ms"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map(|l| (Instant::now(), l.unwrap()))
            .collect::<Vec<_>>()
    });
    let out = child.wait_with_output().unwrap();
    let lines = reader.join().unwrap();
    assert!(out.status.success(), "{lines:#?}");
    assert!(dir.join("run.json").exists() && dir.join("requests.jsonl").exists());
    Run {
        lines,
        stdout: String::from_utf8(out.stdout).unwrap(),
    }
}

/// The figure after `after` in seconds: `12 s`, `3 min`, `1 h 05 min`.
fn seconds_after(line: &str, after: &str) -> f64 {
    let figure = line.split_once(after).map(|x| x.1).unwrap_or_default();
    let words: Vec<&str> = figure.split([' ', ':', ';', ')']).take(4).collect();
    match words.as_slice() {
        [n, "s", ..] => n.parse().unwrap(),
        [n, "min", ..] => n.parse::<f64>().unwrap() * 60.0,
        [h, "h", m, "min"] => h.parse::<f64>().unwrap() * 3600.0 + m.parse::<f64>().unwrap() * 60.0,
        _ => panic!("no figure after {after:?} in {line:?}"),
    }
}

/// The estimate line's figure: `estimate: about 12 s`, `estimate: at most 3 min`.
fn seconds(line: &str) -> f64 {
    match line.strip_prefix("estimate: about ") {
        Some(_) => seconds_after(line, "estimate: about "),
        None => seconds_after(line, "estimate: at most "),
    }
}

/// From the estimate line to the last cell's line.
fn run_time(run: &Run) -> f64 {
    let last = run.cells().last().unwrap().0;
    last.duration_since(run.estimate().0).as_secs_f64()
}

/// Heartbeats between cells, each with an ETA.
fn heartbeats_with_an_eta(run: &Run) {
    let since = run.estimate().0;
    let beats: Vec<_> = run
        .find("progress: ")
        .into_iter()
        .filter(|(t, _)| *t > since)
        .collect();
    assert!(!beats.is_empty(), "no heartbeat: {:#?}", run.lines);
    for (_, b) in &beats {
        assert!(b.contains("elapsed ") && b.contains(", ETA "), "{b}");
        assert!(!b.ends_with("ETA -"), "an estimate was made: {b}");
    }
    let (first, last) = (run.estimate().0, run.cells().last().unwrap().0);
    assert!(
        beats.iter().any(|(t, _)| *t > first && *t < last),
        "a heartbeat while the load ran"
    );
}

#[test]
fn a_sweep_says_how_long_before_it_starts_and_as_it_goes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = bench(&[
        "--concurrency",
        "1,2",
        "--requests",
        "6",
        "--warmup",
        "2",
        "--outputs",
        "8,8,8",
    ]);
    let (at, e) = run.estimate();
    assert!(
        e.contains("(6 cells, 48 requests with warm-up; from a probe request per bucket: TTFT "),
        "{e}"
    );
    let cells = run.cells();
    assert_eq!(cells.len(), 6, "a line per cell: {:#?}", run.lines);
    assert!(cells[0].0 > *at, "the estimate comes first");
    let first = run.lines.iter().position(|l| l.1 == *e).unwrap();
    let header = run
        .lines
        .iter()
        .position(|l| l.1.starts_with("tokentap bench → "));
    assert!(header.is_some_and(|h| h < first));
    let labels = [
        "long-short C=1",
        "long-short C=2",
        "balanced C=1",
        "balanced C=2",
        "short-long C=1",
        "short-long C=2",
    ];
    for (k, ((_, line), label)) in cells.iter().zip(labels).enumerate() {
        // The line bench always printed, then what it says now.
        assert!(
            line.starts_with(&format!("{label:<20} 6 measured, 0 errors, ")),
            "{line}"
        );
        let tail = line.split_once(" s; TTFT p95 ").unwrap().1;
        let (p95, rest) = tail.split_once(" ms; ").unwrap();
        let p95: f64 = p95.parse().unwrap();
        assert!(p95 > 30.0 && p95 < 2000.0, "{line}");
        assert!(
            rest.starts_with(&format!("cell {}/6, elapsed ", k + 1)),
            "{line}"
        );
        assert!(rest.contains(", ETA "), "{line}");
    }
    assert!(cells[5].1.ends_with("ETA 0s"), "{}", cells[5].1);
    heartbeats_with_an_eta(&run);
    let (est, took) = (seconds(e), run_time(&run));
    assert!(
        est > took / 2.0 && est < took * 2.0,
        "estimated {est} s, took {took} s: {e}"
    );
    // stdout is as it was: the summary table alone.
    assert!(run.stdout.starts_with("bucket "), "{}", run.stdout);
    assert!(!run.stdout.contains("estimate") && !run.stdout.contains("progress:"));
}

#[test]
fn repeated_runs_are_in_the_estimate_the_cell_count_and_the_eta() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = bench(&[
        "--runs",
        "2",
        "--buckets",
        "long-short,short-long",
        "--concurrency",
        "1",
        "--requests",
        "4",
        "--warmup",
        "1",
        "--outputs",
        "8,8,8",
    ]);
    let (_, e) = run.estimate();
    assert!(
        e.contains("(4 cells, 20 requests with warm-up; 2 runs of 2 cells; from a probe"),
        "{e}"
    );
    assert_eq!(run.find("run 1 of 2").len(), 1, "{:#?}", run.lines);
    assert_eq!(run.find("run 2 of 2").len(), 1, "{:#?}", run.lines);
    let cells = run.cells();
    // Run 2 starts one cell into the sweep (⌊1 · 2 ÷ 2⌋).
    let labels = [
        "long-short C=1",
        "short-long C=1",
        "short-long C=1",
        "long-short C=1",
    ];
    assert_eq!(cells.len(), 4, "{:#?}", run.lines);
    for (k, ((_, line), label)) in cells.iter().zip(labels).enumerate() {
        assert!(line.starts_with(label), "{line}");
        assert!(
            line.contains(&format!("cell {}/4, elapsed ", k + 1)),
            "{line}"
        );
    }
    assert!(cells[3].1.ends_with("ETA 0s"), "{}", cells[3].1);
    assert!(run.stdout.contains("long-short r2") && run.stdout.contains("2 runs (rN: run N)"));
}

#[test]
fn an_open_loop_is_estimated_by_its_schedule() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = bench(&[
        "--request-rate",
        "3,6",
        "--arrival",
        "constant",
        "--requests",
        "9",
        "--warmup",
        "0",
        "--outputs",
        "16,16,16",
        "--buckets",
        "balanced",
    ]);
    let (_, e) = run.estimate();
    assert!(
        e.contains("(2 cells, 18 requests with warm-up; from a probe request: TTFT"),
        "{e}"
    );
    assert_eq!(run.cells().len(), 2);
    heartbeats_with_an_eta(&run);
    // 8 gaps at 3/s and at 6/s (4 s), each cell's last request (about half a second).
    let (est, took) = (seconds(e), run_time(&run));
    assert!((4.0..8.0).contains(&est), "{e}");
    assert!(
        est > took / 1.5 && est < took * 1.5,
        "estimated {est} s, took {took} s: {e}"
    );
}

/// A saturation search on long prompts that nothing breaks, with `extra` flags.
fn search(extra: &[&str]) -> Run {
    let mut args = vec![
        "--until",
        "ttft_p95_ms:100000",
        "--requests",
        "4",
        "--warmup",
        "1",
        "--outputs",
        "8,8,8",
        "--buckets",
        "long-short",
    ];
    args.extend_from_slice(extra);
    bench(&args)
}

#[test]
fn a_search_says_at_most_and_keeps_to_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = search(&["--max-level", "4"]);
    let (_, e) = run.estimate();
    // The bound is --max-time's (30 minutes by default); the likely figure, the levels' pace.
    assert!(e.starts_with("estimate: at most 30 min (--max-time"), "{e}");
    assert!(e.contains("every level up to C=4 and a refinement below it would take "));
    // C=1, 2, 4: nothing breaks, so every level runs.
    assert_eq!(run.cells().len(), 3, "{:#?}", run.lines);
    for (_, c) in run.cells() {
        assert!(c.contains(", ETA at most "), "{c}");
    }
    let (likely, took) = (seconds_after(e, "would take "), run_time(&run));
    assert!(
        likely > took / 2.0 && likely < took * 2.0,
        "likely {likely} s, took {took} s: {e}"
    );

    // Bounded by --max-time: the line says so, and the run stops near it.
    let run = search(&["--max-time", "2s"]);
    let (_, e) = run.estimate();
    assert!(e.starts_with("estimate: at most 2 s (--max-time"), "{e}");
    let took = run_time(&run);
    assert!(took > 2.0 && took < 15.0, "{took} s: {:#?}", run.lines);
}

#[test]
fn without_probes_the_eta_comes_with_the_first_cell() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = bench(&[
        "--no-estimate",
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--warmup",
        "1",
        "--outputs",
        "8,8,8",
        "--buckets",
        "long-short,balanced",
    ]);
    let (_, e) = run.estimate();
    assert_eq!(
        e,
        "estimate: none yet (no probe sent); an ETA follows the first cell"
    );
    let cells = run.cells();
    assert_eq!(cells.len(), 4);
    for (_, c) in &cells {
        assert!(!c.ends_with("ETA -"), "the first cell sets the pace: {c}");
    }
    // The first cell's pace, scaled to the three left, is near what they took.
    let eta: f64 = cells[0]
        .1
        .rsplit_once("ETA ")
        .unwrap()
        .1
        .trim_end_matches('s')
        .parse()
        .unwrap();
    let rest = cells[3].0.duration_since(cells[0].0).as_secs_f64();
    assert!(
        eta > rest / 2.0 && eta < rest * 2.0,
        "ETA {eta} s, took {rest} s"
    );
}
