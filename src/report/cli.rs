//! `tokentap report` on the command line: arguments, reading, rendering, exit status.

use std::path::PathBuf;

use super::{finish, missed, read::stream, render, Acc, Format, Slos, DEFAULT_EXACT_VALUES};
use crate::cli::Exit;

#[derive(clap::Args)]
pub struct Args {
    /// JSONL files or folders holding them (every *.jsonl* file below a folder).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// SLO thresholds (TOML: ttft_interactive_ms, ttft_strict_ms, ttft_code_completion_ms,
    /// ttft_agents_ms, reading_tok_s, coding_tok_s, knee_factor, goodput_ttft_ms, goodput_tok_s).
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// Exit 1 when any cell misses one of these SLOs (interactive, strict, code_completion,
    /// agents, reading_speed, interactive_coding).
    #[arg(long, value_delimiter = ',')]
    pub fail_on_slo: Vec<String>,
    /// Keys in the per-key table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Split the per-key table by experiment arm.
    #[arg(long)]
    pub by_arm: bool,
    /// Records that feed only the gateway-tap section: a proxy log of the traffic whose
    /// client-side records are PATHS (e.g. the demo's `tap/`), so nothing is counted twice.
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
}

/// Read the records, compute, render; exit 1 when `--fail-on-slo` names a missed SLO.
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
    let mut warn = |w: String| eprintln!("tokentap report: warning: {w}");
    let mut acc = Acc::new(&slos, a.by_arm, (g, d), a.exact_values);
    if let Err(e) = stream(&a.paths, &mut warn, &mut acc, false) {
        return Exit::Failed(format!("report: {e}"));
    }
    if !a.tap.is_empty() {
        if let Err(e) = stream(&a.tap, &mut warn, &mut acc, true) {
            return Exit::Failed(format!("report: --tap: {e}"));
        }
    }
    let rep = finish(acc, &slos, a.top, (g, d));
    let text = render(&rep, a.format);
    match &a.out {
        Some(p) => {
            if let Err(e) = std::fs::write(p, text) {
                return Exit::Failed(format!("report: {}: {e}", p.display()));
            }
        }
        None => print!("{text}"),
    }
    let missed = missed(&rep, &a.fail_on_slo);
    if !missed.is_empty() {
        for m in &missed {
            eprintln!("tokentap report: SLO missed: {m}");
        }
        return Exit::No;
    }
    Exit::Ok
}
