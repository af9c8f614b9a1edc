//! One side of a comparison: a bench output folder (its records and `run.json`) or logs, read
//! by the report's reader and cut into the report's cells (bucket × level × arm, per API shape),
//! each with its requests' figures kept one by one for the bootstrap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::meter::RequestRecord;
use crate::report::row::{level, Row};
use crate::report::{self, Axis, Cell, ReportError, Slos};

/// Where a cell sits: its API shape, bucket, arm and level. The per-shape rows pool every cell
/// of a shape (bucket and level `all`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CellKey {
    pub api: String,
    pub bucket: String,
    pub arm: Option<String>,
    pub axis: Axis,
    /// The level's sort key (a concurrency; a rate × 1000); `u64::MAX` for a pooled row.
    pub level: u64,
    pub label: String,
}

impl CellKey {
    /// As the tables name it: `chat long-short [arm] C=8`; `chat all cells` for a shape's row.
    pub fn name(&self) -> String {
        if self.pooled() {
            return format!("{} all cells", self.api);
        }
        let arm = self
            .arm
            .as_deref()
            .map(|a| format!(" [{a}]"))
            .unwrap_or_default();
        let level = match self.axis {
            Axis::Concurrency => format!("C={}", self.label),
            Axis::InFlight => format!("in flight {}", self.label),
            Axis::RequestRate => format!("{} req/s", self.label),
        };
        format!("{} {}{arm} {level}", self.api, self.bucket)
    }

    pub fn pooled(&self) -> bool {
        self.level == u64::MAX
    }
}

/// One request's figures; the latencies only when it was served.
#[derive(Debug, Clone, Default)]
pub struct Req {
    /// (its cell, prompt index, the prompt's occurrence in the cell in time order): the
    /// pairing key, unique in a pooled row too.
    pub prompt: Option<(u64, u64, u32)>,
    pub ttft: Option<f64>,
    pub ttfo: Option<f64>,
    pub tpot: Option<f64>,
    pub e2e: Option<f64>,
    pub tok_s: Option<f64>,
    /// Output tokens of a served request (0 otherwise).
    pub out_tokens: f64,
    /// E2E of any request: the aggregate throughput's denominator.
    pub any_e2e: f64,
    pub error: bool,
    pub good: bool,
    /// The run of a repeated sweep (`bench --runs N`) the request belongs to.
    pub run: Option<u32>,
}

/// A cell of one side: the report's figures (SLO verdicts, aggregate tok/s) and its requests.
#[derive(Debug, Clone)]
pub struct SideCell {
    pub key: CellKey,
    pub cell: Option<Cell>,
    pub reqs: Vec<Req>,
}

/// What was read for one argument of `compare`.
#[derive(Debug, Clone)]
pub struct Side {
    pub path: String,
    /// `run.json`, when the path is a bench folder that has one.
    pub run: Option<serde_json::Value>,
    pub records: usize,
    pub models: BTreeSet<String>,
    pub cells: Vec<SideCell>,
}

impl Side {
    /// The prompt set's hash from `run.json`, when there is one.
    pub fn prompt_set(&self) -> Option<&str> {
        self.run
            .as_ref()?
            .get("prompt_set_sha256")?
            .as_str()
            .filter(|s| !s.is_empty())
    }
}

/// Why a side could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No record at all: the run measured nothing (not judged, never a failure of the engine).
    #[error("{0}")]
    Nothing(ReportError),
    /// A file that cannot be read or parsed.
    #[error("{0}")]
    Unreadable(String),
    /// A distributed run's shards that are not one whole run.
    #[error("{0}")]
    NotOneRun(String),
}

/// Read one side: every `*.jsonl*` below `path` (the report's reader), and `run.json` beside
/// them when `path` is a folder (a distributed run's parent folder: its first shard's, once
/// the shards are checked to be one whole run, unless `allow_partial`).
pub fn read(path: &Path, slos: &Slos, allow_partial: bool) -> Result<Side, ReadError> {
    let dir = [PathBuf::from(path)];
    let shards = report::shards::check(&dir, allow_partial).map_err(ReadError::NotOneRun)?;
    let mut warn = |w: String| eprintln!("tokentap compare: warning: {w}");
    let records = report::load(&[PathBuf::from(path)], &mut warn).map_err(|e| match e {
        ReportError::Empty(_) | ReportError::NoRecords { .. } => ReadError::Nothing(e),
        e => ReadError::Unreadable(e.to_string()),
    })?;
    let run_file = match shards {
        Some(_) => report::engine::run_json_paths(&dir).into_iter().next(),
        None => Some(path.join("run.json")),
    };
    let run = match (path.is_dir(), run_file) {
        (true, Some(f)) => match std::fs::read(&f) {
            Ok(b) => Some(
                serde_json::from_slice(&b)
                    .map_err(|e| ReadError::Unreadable(format!("{}: {e}", f.display())))?,
            ),
            Err(_) => None,
        },
        _ => None,
    };
    Ok(of_records(path.display().to_string(), run, &records, slos))
}

/// A side of records in memory.
pub fn of_records(
    path: String,
    run: Option<serde_json::Value>,
    records: &[RequestRecord],
    slos: &Slos,
) -> Side {
    let mut records: Vec<&RequestRecord> = records.iter().collect();
    // Occurrences of a prompt are counted in time order (RFC 3339 times of one writer sort).
    records.sort_by(|a, b| a.ts.cmp(&b.ts));
    let mut by_api: BTreeMap<&'static str, Vec<RequestRecord>> = BTreeMap::new();
    let mut models = BTreeSet::new();
    for r in &records {
        let row = Row::of(r);
        if row.client_facing() && row.class().is_generation() {
            by_api.entry(r.api.as_str()).or_default().push((*r).clone());
            if let Some(m) = &r.model {
                models.insert(m.clone());
            }
        }
    }
    let mut cells = Vec::new();
    for (api, recs) in &by_api {
        let rep = report::compute(recs, slos, 0, false);
        let mut pooled = SideCell {
            key: CellKey {
                api: (*api).to_owned(),
                bucket: "all".into(),
                arm: None,
                axis: Axis::Concurrency,
                level: u64::MAX,
                label: "all".into(),
            },
            cell: None,
            reqs: Vec::new(),
        };
        for c in rep.cells {
            let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
            let id = super::fnv(&format!(
                "{} {:?} {:?} {}",
                c.bucket, c.arm, c.axis, c.level
            ));
            let reqs: Vec<Req> = recs
                .iter()
                .filter(|r| in_cell(r, &c))
                .map(|r| req_of(r, id, slos, &mut seen))
                .collect();
            pooled.reqs.extend(reqs.iter().cloned());
            cells.push(SideCell {
                key: CellKey {
                    api: (*api).to_owned(),
                    bucket: c.bucket.clone(),
                    arm: c.arm.clone(),
                    axis: c.axis,
                    level: c.level,
                    label: c.concurrency.clone(),
                },
                cell: Some(c),
                reqs,
            });
        }
        cells.push(pooled);
    }
    Side {
        path,
        run,
        records: records.len(),
        models,
        cells,
    }
}

/// Whether a generation record is in a report cell: the report's own key (bucket, arm, level
/// and what the level is).
fn in_cell(r: &RequestRecord, c: &Cell) -> bool {
    let row = Row::of(r);
    let live = r.concurrency.is_none() && r.request_rate.is_none();
    let (lvl, axis) = match r.request_rate.filter(|x| x.is_finite() && *x > 0.0) {
        Some(rate) => ((rate * 1000.0).round() as u64, Axis::RequestRate),
        None if live => (level(None, r.in_flight), Axis::InFlight),
        None => (level(r.concurrency, r.in_flight), Axis::Concurrency),
    };
    let arm = row
        .arm()
        .or((!r.route.is_empty()).then_some(r.route.as_str()));
    row.bucket() == c.bucket
        && lvl == c.level
        && axis == c.axis
        && (c.arm.is_none() || c.arm.as_deref() == arm)
}

fn req_of(r: &RequestRecord, cell: u64, slos: &Slos, seen: &mut BTreeMap<u64, u32>) -> Req {
    let row = Row::of(r);
    let prompt = r.prompt_index.map(|p| {
        let k = seen.entry(p).or_insert(0);
        *k += 1;
        (cell, p, *k)
    });
    let ok = row.ok();
    let served = |v: Option<f64>| v.filter(|x| ok && x.is_finite());
    let tok_s = served(row.tok_s());
    Req {
        prompt,
        ttft: served(r.ttft_ms),
        ttfo: served(r.ttfo_ms),
        tpot: served(r.tpot_ms),
        e2e: served(Some(r.e2e_ms)),
        tok_s,
        out_tokens: if ok {
            r.output_tokens.unwrap_or(0) as f64
        } else {
            0.0
        },
        any_e2e: r.e2e_ms.max(0.0),
        error: row.is_error(),
        // The report's goodput: served, TTFT and tok/s within the goodput pair.
        good: ok
            && r.ttft_ms.is_none_or(|t| t <= slos.goodput_ttft_ms)
            && tok_s.is_none_or(|s| s >= slos.goodput_tok_s),
        run: r.run,
    }
}
