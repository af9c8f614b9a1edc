//! A run, from its settings to its `run.json`: the plan taken, the output folder claimed, the
//! session opened, the load sent by matching on the plan, the records and `run.json` written,
//! the table printed. Each stage is handed the settings it reads.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::cell::Out;
use super::model::settings::{Bench, Common, Experiment};
use super::plan::Plan;
use super::session::{self, Client, Session};
use super::stage::{replay, search, sweep, turns};
use super::view::run_json::{self, Findings};
use super::view::summary;
use super::{arms, estimate, resources, BenchError, RunInfo};
use crate::meter::RequestRecord;

/// Run the whole load; `stop` ends it early (Ctrl-C), keeping what was measured. The run's
/// verdict (`RunInfo::verdict`) says whether it measured what it was asked to.
pub async fn run(bench: &Bench, stop: Arc<AtomicBool>) -> Result<RunInfo, BenchError> {
    let mut plan = Plan::of(&bench.common, &bench.load)?;
    let cfg = &whole_groups(&bench.common, plan.experiment());
    claim_out(cfg)?;
    let client = Client::connect(cfg).await?;
    let requests = session::Requests {
        model: plan.model(cfg, &client.target).await?,
        prefixed: &plan.prefixed(),
        experiment: plan.experiment(),
    };
    let mut s = Session::open(cfg, client, requests, stop).await?;
    plan.announce(cfg, &s.load.model);
    let _beat = s.progress.heartbeat();
    let cells = (cfg.requests, cfg.warmup);
    if !cfg.quiet {
        let asked = estimate::Asked {
            probe: cfg.estimate,
            cells,
            shared_prefix: cfg.prompts.shared_prefix,
            seed: cfg.seed,
        };
        s.progress.plan(estimate::of(&s, &plan, &asked).await);
    }
    let mut out = Out::default();
    // The arms' own CPU and memory: from the first cell's start to the last one's end.
    let watch = plan.experiment().map_or(&[][..], |e| &e.watch[..]);
    let sampler = resources::Sampler::start(watch).await;
    let found = drive(&s, (&mut plan, (cells, cfg.seed)), &cfg.fleet, &mut out).await;
    let arm_resources = match sampler {
        Some(sm) => sm.finish().await,
        None => Vec::new(),
    };
    let run_id = cfg
        .fleet
        .run_id
        .clone()
        .unwrap_or_else(|| s.target.run_id());
    let shard = cfg.fleet.shard;
    for r in &mut out.records {
        r.run_id = Some(run_id.clone());
        (r.shard, r.shards) = (shard.map(|s| s.index), shard.map(|s| s.of));
    }
    write_records(cfg, &out.records)?;
    let inserted = match &cfg.clickhouse {
        Some((url, table)) => Some(insert(url, table, cfg, &out.records).await?),
        None => None,
    };
    let scrape = run_json::scraped((&mut s, cfg), &mut out).await;
    let late = std::mem::take(&mut out.late);
    let mut info = RunInfo::of((&s, cfg), &plan, found, scrape, &mut out);
    info.arm_resources = arm_resources;
    (info.run_id, info.shard, info.shards) = (run_id, shard.map(|s| s.index), shard.map(|s| s.of));
    info.fleet = cfg.fleet.windows.map(|w| super::shard::FleetInfo {
        start_at: Some(humantime::format_rfc3339_seconds(w.start).to_string()),
        cell_window_s: Some(w.window.as_secs_f64()),
        late_cells: late,
    });
    let dropped = inserted.as_ref().map_or(0, |i| i.dropped);
    info.clickhouse = inserted;
    let run_path = cfg.out.join("run.json");
    let json = serde_json::to_string_pretty(&info).unwrap_or_default();
    std::fs::write(&run_path, json + "\n").map_err(|source| BenchError::Io {
        path: run_path.display().to_string(),
        source,
    })?;
    if !cfg.quiet {
        crate::outln!("{}", summary::table(&out.records, &info));
        for r in &info.arm_resources {
            crate::outln!("{}", resources::line(r));
        }
    }
    if dropped > 0 {
        return Err(BenchError::ClickHouse(format!(
            "--clickhouse: {dropped} of {} rows were not inserted (see the warning above); every record is in {}",
            out.records.len(),
            cfg.out.join("requests.jsonl").display()
        )));
    }
    Ok(info)
}

/// `--clickhouse`: every record inserted; a ClickHouse that cannot be reached is an error.
async fn insert(
    url: &str,
    table: &str,
    cfg: &Common,
    records: &[RequestRecord],
) -> Result<super::clickhouse::Inserted, BenchError> {
    let ch = super::clickhouse::config(url, table, records.len())
        .map_err(|e| BenchError::Usage(format!("--clickhouse: {e}")))?;
    let done = super::clickhouse::insert(&ch, records)
        .await
        .map_err(|e| BenchError::ClickHouse(format!("--clickhouse: {e}")))?;
    if !cfg.quiet {
        crate::outln!("ClickHouse {}: {} rows inserted", done.table, done.rows);
    }
    Ok(done)
}

/// The shared settings with, for two or more arms, `--requests` and `--warmup` rounded up to
/// whole groups (one copy per arm), so that every group is measured whole or not at all.
fn whole_groups(cfg: &Common, experiment: Option<&Experiment>) -> Common {
    let n = experiment.map_or(0, |e| e.arms.len());
    Common {
        requests: arms::whole_groups(cfg.requests, n),
        warmup: arms::whole_groups(cfg.warmup, n),
        ..cfg.clone()
    }
}

/// The output folder, made; one that already holds a run (its `run.json` or `requests.jsonl`)
/// is refused unless `--force`: it may be the baseline of a comparison.
fn claim_out(cfg: &Common) -> Result<(), BenchError> {
    let held: Vec<&str> = ["run.json", "requests.jsonl"]
        .into_iter()
        .filter(|f| cfg.out.join(f).exists())
        .collect();
    if !held.is_empty() && !cfg.force {
        return Err(BenchError::Usage(format!(
            "--out {}: already holds a run ({}); choose another folder, or --force to overwrite it",
            cfg.out.display(),
            held.join(", ")
        )));
    }
    std::fs::create_dir_all(&cfg.out).map_err(|source| BenchError::Io {
        path: cfg.out.display().to_string(),
        source,
    })
}

/// Send the plan's load, each cell `(requests, warmup)` with the run's `seed`; its cells kept
/// in `out`.
async fn drive(
    s: &Session,
    (plan, (cells, seed)): (&mut Plan, ((usize, usize), u64)),
    fleet: &super::shard::Fleet,
    out: &mut Out,
) -> Findings {
    match plan {
        Plan::Closed(w) | Plan::Open(w) => {
            let chosen = sweep::with_prompts(s, &w.prompts.chosen, &w.prompts.empty);
            let how = (&w.levels[..], w.runs, w.open.as_ref());
            sweep::run(s, &chosen, how, (cells, fleet), out).await;
            Findings::default()
        }
        Plan::Search {
            prompts,
            search,
            ladder,
        } => {
            let chosen = sweep::with_prompts(s, &prompts.chosen, &prompts.empty);
            let saturation = search::buckets(s, &chosen, (search, *ladder), cells, out).await;
            Findings {
                saturation,
                replay: None,
            }
        }
        Plan::Replay {
            requests,
            info,
            replay,
        } => {
            let requests = std::mem::take(requests);
            let sent = ((**info).clone(), replay.max_concurrency);
            let info = replay::send(s, requests, sent, out).await;
            Findings {
                saturation: BTreeMap::new(),
                replay: Some(info),
            }
        }
        Plan::Conversations {
            convs,
            specs,
            turns,
            ..
        } => {
            turns::run(s, (convs, specs), turns, (cells, seed), out).await;
            Findings::default()
        }
    }
}

fn write_records(cfg: &Common, records: &[RequestRecord]) -> Result<(), BenchError> {
    use std::io::Write;
    let path = cfg.out.join("requests.jsonl");
    let io = |source| BenchError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    for r in records {
        let line = serde_json::to_string(r).unwrap_or_default();
        writeln!(w, "{line}").map_err(io)?;
    }
    w.flush().map_err(io)
}
