//! `cargo bench --bench report`: `tokentap report` on generated proxy logs of 1 and 10 million
//! records (`REPORT_BENCH_RECORDS=1000000,10000000`), timed as a user runs it: the release
//! binary, one process per run, wall and CPU time and peak resident memory read from /proc.
//! Two logs of each size: timings as tokentap writes them (`written`, about 1.31 KB a record)
//! and every timing at full double precision (`full`, about 1.43 KB: more digits than a proxy
//! writes). Logs are generated once into target/report-bench/ and kept; each is read once
//! before it is timed (page cache warm), and each figure is the better of two runs. The
//! `written` log of the first size is also timed gzipped, as logrotate leaves it, and its
//! instructions a record are counted with callgrind (when valgrind is there). Results
//! and the targets are in docs/report.md.
// Tests and benches time what they drive on their own process clock, and set the environment
// only where they must (tests/environment/): the one-door rules are for the record's path.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokentap::meter::RequestRecord;
use tokentap_test_support::records::{record, record_as_written, Mix};

fn generate(path: &Path, n: u64, make: fn(u64, u64, Mix) -> RequestRecord) {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        return;
    }
    let tmp = path.with_extension("part");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp).unwrap());
    for i in 0..n {
        serde_json::to_writer(&mut out, &make(i, 7, Mix::Live)).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.flush().unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Read a log once, so its pages are cached before it is timed (two 10 M-record logs do not
/// both fit in a 24 GB machine's page cache: a cold read would time the disk).
fn warm(path: &Path) {
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    while std::io::Read::read(&mut f, &mut buf).unwrap() > 0 {}
}

/// (utime + stime) in seconds and VmHWM in KiB of a live process.
fn sample(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime), counted from after the command name.
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((ticks / 100.0, hwm))
}

struct Run {
    wall: f64,
    cpu: f64,
    peak_mib: f64,
    method: String,
}

fn run(bin: &str, log: &Path, extra: &[&str]) -> Run {
    let start = Instant::now();
    let mut child = Command::new(bin)
        .args(["report", "--format", "json"])
        .arg(log)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut last = (0.0, 0);
    let reader = {
        let mut stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
            s
        })
    };
    while child.try_wait().unwrap().is_none() {
        if let Some(s) = sample(pid) {
            last = s;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let wall = start.elapsed().as_secs_f64();
    let out = reader.join().unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    Run {
        wall,
        cpu: last.0,
        peak_mib: last.1 as f64 / 1024.0,
        method: v["percentiles"]["method"]
            .as_str()
            .unwrap_or("?")
            .to_owned(),
    }
}

fn main() {
    let bin = env!("CARGO_BIN_EXE_tokentap");
    // `cargo test --all-targets` runs bench targets too: only `cargo bench` (which passes
    // --bench) measures. Under `cargo test`, one small log through both paths, then stop.
    if !std::env::args().any(|a| a == "--bench") {
        let dir =
            std::env::temp_dir().join(format!("tokentap-report-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("live-2000.jsonl");
        generate(&log, 2000, record_as_written);
        assert_eq!(run(bin, &log, &[]).method, "exact");
        assert_eq!(run(bin, &log, &["--exact-values", "0"]).method, "hdr");
        std::fs::remove_dir_all(&dir).unwrap();
        println!("report: run with `cargo bench --bench report` (REPORT_BENCH_RECORDS=N,M)");
        return;
    }
    let counts: Vec<u64> = std::env::var("REPORT_BENCH_RECORDS")
        .unwrap_or_else(|_| "1000000,10000000".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/report-bench");
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "records   timings  size      wall s  cpu s  records/s (cpu)  peak RSS MiB  percentiles"
    );
    for (i, n) in counts.into_iter().enumerate() {
        for (name, make) in [
            ("written", record_as_written as fn(_, _, _) -> _),
            ("full", record),
        ] {
            let log = dir.join(format!("{name}-{n}.jsonl"));
            generate(&log, n, make);
            warm(&log);
            for extra in [&[][..], &["--exact-values", "0"][..]] {
                let note = if extra.is_empty() {
                    ""
                } else {
                    " (--exact-values 0)"
                };
                timed(bin, n, name, &log, extra, note);
            }
        }
        // The first size only, as compressing and counting take a while: its written log
        // gzipped (logrotate's level, 6), and the instructions a record of it.
        if i == 0 {
            let log = dir.join(format!("written-{n}.jsonl"));
            let gz = dir.join(format!("written-{n}.jsonl.gz"));
            gzip(&log, &gz);
            warm(&gz);
            if n >= 200_000 {
                instructions(bin, &log);
            }
            timed(bin, n, "gzipped", &gz, &[], "");
        }
    }
}

/// One line of the table: `log` (its pages cached) reported on twice, the better run by CPU
/// (the machine's neighbours come and go).
fn timed(bin: &str, n: u64, name: &str, log: &Path, extra: &[&str], note: &str) {
    let size = std::fs::metadata(log).unwrap().len() as f64 / 1e9;
    let (a, b) = (run(bin, log, extra), run(bin, log, extra));
    let r = if a.cpu <= b.cpu { a } else { b };
    println!(
        "{n:>10}  {name:<7}  {size:>5.2} GB  {:>6.2}  {:>5.2}  {:>15.0}  {:>12.1}  {}{note}",
        r.wall,
        r.cpu,
        n as f64 / r.cpu.max(1e-9),
        r.peak_mib,
        r.method,
    );
}

/// Instructions a record, a count that does not move with the VM's speed as time does: the
/// difference callgrind counts between the first 200,000 and the first 100,000 records of a log
/// (`--exact-values 0`, so no sort at the end). Skipped, with a line, without valgrind.
fn instructions(bin: &str, log: &Path) {
    let count = |lines: usize| -> Option<u64> {
        let part = log.with_extension(format!("head-{lines}"));
        let mut from = std::io::BufReader::new(std::fs::File::open(log).ok()?);
        let mut to = std::io::BufWriter::new(std::fs::File::create(&part).ok()?);
        let mut line = Vec::new();
        for _ in 0..lines {
            line.clear();
            std::io::BufRead::read_until(&mut from, b'\n', &mut line).ok()?;
            to.write_all(&line).ok()?;
        }
        to.flush().ok()?;
        let out = Command::new("valgrind")
            .args(["--tool=callgrind", "--callgrind-out-file=/dev/null", bin])
            .args(["report", "--format", "json", "--exact-values", "0"])
            .arg(&part)
            .stdout(Stdio::null())
            .output()
            .ok()?;
        let _ = std::fs::remove_file(&part);
        let err = String::from_utf8_lossy(&out.stderr);
        let refs = err.lines().find_map(|l| l.split("I   refs:").nth(1))?;
        refs.trim().replace(',', "").parse().ok()
    };
    match (count(100_000), count(200_000)) {
        (Some(a), Some(b)) => println!(
            "instructions a record (callgrind, 200,000 minus 100,000 written records, --exact-values 0): {}",
            (b.saturating_sub(a)) / 100_000
        ),
        _ => println!("instructions a record: not counted (needs valgrind)"),
    }
}

fn gzip(from: &Path, to: &Path) {
    if std::fs::metadata(to).is_ok_and(|m| m.len() > 0) {
        return;
    }
    let tmp = to.with_extension("part");
    let mut out = flate2::write::GzEncoder::new(
        std::io::BufWriter::new(std::fs::File::create(&tmp).unwrap()),
        flate2::Compression::default(),
    );
    std::io::copy(&mut std::fs::File::open(from).unwrap(), &mut out).unwrap();
    out.finish().unwrap().flush().unwrap();
    std::fs::rename(&tmp, to).unwrap();
}
