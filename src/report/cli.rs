//! `tokentap report` on the command line: arguments, reading, rendering, exit status.

use std::path::PathBuf;

use super::board::BoardOpts;
use super::model::Window;
use super::sql::Params;
use super::{
    finish, gate, read::stream, render, Acc, Format, GateVerdict, Report, ReportError, SloGate,
    Slos, DEFAULT_EXACT_VALUES,
};
use crate::cli::Exit;

#[derive(clap::Args)]
pub struct Args {
    /// JSONL files or folders holding them (every *.jsonl* file below a folder).
    #[arg(required_unless_present_any = ["clickhouse", "sql", "tap"])]
    pub paths: Vec<PathBuf>,
    /// Report the records of a ClickHouse table instead of files, computed in ClickHouse:
    /// http[s]://[USER[:PASSWORD]@]HOST:PORT (else CLICKHOUSE_USER, CLICKHOUSE_PASSWORD).
    #[arg(long, value_name = "URL", conflicts_with_all = ["paths", "tap"])]
    pub clickhouse: Option<String>,
    /// The table `--clickhouse` reads (`[clickhouse]`'s database and table).
    #[arg(long, value_name = "[DB.]TABLE", default_value = "default.requests")]
    pub clickhouse_table: String,
    /// Print the queries `--clickhouse` runs (with these settings) and exit.
    #[arg(long, conflicts_with_all = ["paths", "tap", "clickhouse"])]
    pub sql: bool,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// SLO thresholds (TOML: ttft_interactive_ms, ttft_strict_ms, ttft_code_completion_ms,
    /// ttft_agents_ms, reading_tok_s, coding_tok_s, knee_factor, goodput_ttft_ms, goodput_tok_s).
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// Exit 1 when a cell misses one of these SLOs (interactive, strict, code_completion,
    /// agents, reading_speed, interactive_coding), a failed stream being a miss; exit 3 when
    /// no cell could judge one (nothing measured: a gate fails closed).
    #[arg(long, value_delimiter = ',')]
    pub fail_on_slo: Vec<String>,
    /// Keys in the per-key table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Split the per-key table by experiment arm.
    #[arg(long)]
    pub by_arm: bool,
    /// Records that feed only the gateway-tap section: a proxy log of the traffic whose
    /// client-side records are PATHS (e.g. the demo's `proxy.jsonl` beside its `bench/`), so nothing
    /// is counted twice. Repeat it for the tap across pods: the log of the tokentap in front of
    /// the gateway and the logs of those behind it, joined by their x-tokentap-join id (then
    /// PATHS may be left out).
    #[arg(long)]
    pub tap: Vec<PathBuf>,
    /// The experiment arms compared in the gateway-hop section: GATEWAY,DIRECT.
    #[arg(long, value_delimiter = ',', default_value = "gateway,direct")]
    pub hop_arms: Vec<String>,
    /// Values held for exact nearest-rank percentiles (about 8 bytes each). Past it, every
    /// percentile comes from an HDR sketch (within 0.1 %), and the output says so. 0: sketches
    /// from the start.
    #[arg(long, default_value_t = DEFAULT_EXACT_VALUES)]
    pub exact_values: usize,
    /// The gateway board's baseline arm (over `run.json`'s `experiment.baseline`); without
    /// either, the arm named `direct`.
    #[arg(long, value_name = "NAME")]
    pub board_baseline: Option<String>,
    /// The gateway board's pace (ms between tokens) that sustained streams are judged against
    /// (no silence over 2 × it); else the baseline's median inter-token gap at its lowest level.
    #[arg(long, value_name = "MS", value_parser = positive_ms)]
    pub pace_gap_ms: Option<f64>,
    /// With --clickhouse: only the rows of this bench run (`run_id`: every shard of a
    /// distributed run), which must hold every shard from 1 to N unless --allow-partial.
    #[arg(long, value_name = "ID", requires = "clickhouse")]
    pub run_id: Option<String>,
    /// Report a distributed bench run that is not whole: shards of different runs, or a run
    /// with shards missing (each shard's folder has its `run.json`). Without it, such a set is
    /// refused, naming what is wrong.
    #[arg(long)]
    pub allow_partial: bool,
    /// Only the records whose `ts` is at or after this time (RFC 3339, UTC, e.g.
    /// 2026-12-05T09:00:00Z), from files or ClickHouse.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only the records whose `ts` is before this time.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Take every closed-loop cell's figures from all its requests. By default a cell whose
    /// plateau (C in flight; ramp-up and drain left out) holds at least 20 requests takes its
    /// latency figures, SLO verdicts and goodput from the plateau (`cells[].figures`).
    #[arg(long)]
    pub whole_cell: bool,
}

/// Read the records, compute, render; with `--fail-on-slo`, exit 1 when a judged cell misses
/// one, 3 when no cell could judge one (a gate fails closed).
pub fn cli(a: Args) -> Exit {
    let slos = match &a.slo {
        None => Slos::default(),
        Some(p) => match Slos::load(p) {
            Ok(s) => s,
            Err(e) => return Exit::Usage(format!("config error: {e}")),
        },
    };
    let known: Vec<&str> = slos.list().iter().map(|s| s.0).collect();
    if let Some(bad) = a.fail_on_slo.iter().find(|n| !known.contains(&n.as_str())) {
        return Exit::Usage(format!(
            "--fail-on-slo {bad}: unknown SLO (one of {})",
            known.join(", ")
        ));
    }
    let (g, d) = match a.hop_arms.as_slice() {
        [g, d] => (g.as_str(), d.as_str()),
        _ => return Exit::Usage("--hop-arms takes two arm names: GATEWAY,DIRECT".into()),
    };
    let table = match super::clickhouse::qualified(&a.clickhouse_table) {
        Ok(t) => t,
        Err(e) => return Exit::Usage(e.to_string()),
    };
    let window = match Window::of(a.since.as_deref(), a.until.as_deref()) {
        Ok(w) => w,
        Err(e) => return Exit::Usage(e.to_string()),
    };
    if window.as_ref().is_some_and(Window::is_empty) {
        return Exit::Usage("--until must be after --since".into());
    }
    if let Some(id) = a.run_id.as_deref().filter(|id| !super::sql::run_id_ok(id)) {
        return Exit::Usage(format!(
            "--run-id {id:?}: a run id is letters, digits, '.', '_', '-' and ':'"
        ));
    }
    let params = Params {
        run_id: a.run_id.clone(),
        window,
        table,
        top: a.top,
        by_arm: a.by_arm,
        gateway: g.to_owned(),
        direct: d.to_owned(),
        goodput_ttft_ms: slos.goodput_ttft_ms,
        goodput_tok_s: slos.goodput_tok_s,
    };
    if a.sql {
        crate::cli::out(&super::sql::file(&params));
        return Exit::Ok;
    }
    let rep = match &a.clickhouse {
        Some(url) => match from_clickhouse(url, &params, &slos, &a) {
            Ok(r) => r,
            Err(e) => return e,
        },
        None => match from_files(&a, &params, &slos, (g, d)) {
            Ok(r) => r,
            Err(e) => return e,
        },
    };
    let text = render(&rep, a.format);
    match &a.out {
        Some(p) => {
            if let Err(e) = std::fs::write(p, text) {
                return Exit::Failed(format!("report: {}: {e}", p.display()));
            }
        }
        None => crate::cli::out(&text),
    }
    let gates = gate(&rep, &a.fail_on_slo);
    for g in &gates {
        say_gate(g, rep.traffic.generation);
    }
    match SloGate::verdict(&gates) {
        GateVerdict::Met => Exit::Ok,
        GateVerdict::Missed => Exit::No,
        GateVerdict::NotJudged => Exit::NotJudged,
    }
}

/// One SLO's gate on stderr: its misses, its cells not judged, or that nothing could judge it.
fn say_gate(g: &SloGate, generations: usize) {
    let p = "tokentap report:";
    for m in &g.missed {
        eprintln!("{p} SLO missed: {}: {m}", g.name);
    }
    let cells = g.judged + g.not_judged.len();
    if g.judged == 0 {
        let why = if generations == 0 {
            "no generation request in these records".to_owned()
        } else {
            format!("none of {cells} cells streamed a request, served or failed")
        };
        eprintln!("{p} SLO {}: not judged: {why}", g.name);
    } else if !g.not_judged.is_empty() {
        eprintln!(
            "{p} SLO {}: judged in {} of {cells} cells; not judged (nothing streamed): {}",
            g.name,
            g.judged,
            g.not_judged.join(", ")
        );
    }
}

/// A pace in milliseconds: a finite number above 0.
fn positive_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s}: not a number of milliseconds above 0")),
    }
}

/// What the gateway board is told besides the records: `run.json`'s baseline and resources
/// beside `paths`, and the flags.
fn board_opts(a: &Args, paths: &[PathBuf]) -> BoardOpts {
    let (run_baseline, resources) = super::engine::board_run(paths);
    BoardOpts {
        run_baseline,
        flag_baseline: a.board_baseline.clone(),
        pace_gap_ms: a.pace_gap_ms,
        resources,
    }
}

fn from_files(a: &Args, p: &Params, slos: &Slos, arms: (&str, &str)) -> Result<Report, Exit> {
    let mut warn = |w: String| eprintln!("tokentap report: warning: {w}");
    let distributed = super::shards::check(&a.paths, a.allow_partial)
        .map_err(|e| Exit::Usage(format!("report: {e}")))?;
    if let Some(why) = distributed.as_ref().and_then(|d| d.partial.as_ref()) {
        eprintln!("tokentap report: warning: {why}; reported as it is (--allow-partial)");
    }
    let mut acc = Acc::new(slos, a.by_arm, arms, a.exact_values);
    let mut window = p.window.clone();
    acc.whole_cell = a.whole_cell;
    acc.board_opts = board_opts(a, &a.paths);
    // `report --tap A --tap B`: no client-side records, the tap's section alone.
    let client_side = !a.paths.is_empty() || a.tap.is_empty();
    let read = if client_side {
        stream(&a.paths, &mut warn, &mut acc, false, window.as_mut())
    } else {
        Ok(0)
    };
    read.map_err(|e| match e {
        // Files with no line at all: nothing was measured, so nothing is judged (exit 3).
        ReportError::NoRecords { ref skipped, .. } if skipped.is_empty() => {
            eprintln!("tokentap report: not judged: {e}");
            Exit::NotJudged
        }
        e => Exit::Failed(format!("report: {e}")),
    })?;
    if !a.tap.is_empty() {
        stream(&a.tap, &mut warn, &mut acc, true, window.as_mut())
            .map_err(|e| Exit::Failed(format!("report: --tap: {e}")))?;
    }
    let mut rep = finish(acc, slos, a.top, arms);
    super::engine::attach(&mut rep, &a.paths, &mut warn);
    if let Some(w) = &window {
        if w.outside > 0 {
            eprintln!(
                "tokentap report: {} records left out: outside {}, or without a readable ts",
                w.outside,
                w.words()
            );
        }
    }
    rep.window = window;
    rep.distributed = distributed;
    Ok(rep)
}

fn from_clickhouse(url: &str, p: &Params, slos: &Slos, a: &Args) -> Result<Report, Exit> {
    let src =
        super::clickhouse::Source::new(url, &p.table).map_err(|e| Exit::Usage(e.to_string()))?;
    let mut read = super::clickhouse::read(&src, p, a.exact_values)
        .map_err(|e| Exit::Failed(format!("report: {e}")))?;
    // No run.json beside a table: the board's baseline and pace from the flags alone.
    read.board_opts = board_opts(a, &[]);
    let distributed = match &p.run_id {
        Some(id) => super::shards::of_rows(id, &read.shards, a.allow_partial)
            .map_err(|e| Exit::Usage(format!("report: {e}")))?,
        None => None,
    };
    let mut rep = super::report_of(read, slos, (&p.gateway, &p.direct));
    rep.window.clone_from(&p.window);
    rep.distributed = distributed;
    Ok(rep)
}
