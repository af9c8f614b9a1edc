//! The report being read, record by record: counts and sums per group, and the values behind
//! each percentile (exact while the budget of held values lasts, then HDR sketches). Memory
//! grows with the number of groups and, in exact mode, with the values held, never with the
//! bytes read — but for a load generator's closed-loop cells, whose requests are held (about
//! 64 bytes each) to find each cell's plateau: a bench run is bounded; live traffic never is.
//! The gateway-hop and gateway-tap sections keep a compact row per paired or tapped request,
//! because their bootstrap intervals need every pair.

use std::collections::BTreeMap;

use super::board::{BoardOpts, BoardRec};
use super::clock::Clock;
use super::hop::HopRec;
use super::names::{Map, Names, NONE};
use super::row::{level, level_of, Class, Row};
use super::shapes::{CacheAcc, ShapeAcc, TurnAcc};
use super::tap::TapRec;
use super::traffic::{drop_single_arm, other_rows, OTHER_ENDPOINTS_HELD, OTHER_PATHS};
use super::values::{Method, Values};
use super::{Dist, KeyRow, OtherRow, Traffic};
use crate::openai::Api;

/// Values held exactly before the report switches to sketches: about 8 bytes each, so the
/// default is ~100 MB (about 600,000 live records).
pub const DEFAULT_EXACT_VALUES: usize = 12_000_000;

/// Every API shape, at its index (`Api as usize`).
const API_ORDER: [Api; 7] = [
    Api::Chat,
    Api::Completions,
    Api::Responses,
    Api::Messages,
    Api::Embeddings,
    Api::Models,
    Api::Other,
];

pub(super) use super::cellacc::{CellAcc, CellIn, Kind};

#[derive(Debug)]
struct KeyAcc {
    requests: usize,
    errors: usize,
    client_errors: usize,
    input: u64,
    output: u64,
    ttft: Values,
    tpot: Values,
    e2e: Values,
}

pub(super) use super::words::rate_label;

/// The order of (bucket, arm, axis, level, label): a bucket's concurrency cells, then its live
/// in-flight cells, then its open-loop (rate) cells, each axis in level order.
pub(super) fn sort_cells(cells: &mut [CellIn]) {
    cells.sort_by(|x, y| {
        (&x.bucket, &x.arm, x.kind, x.level, &x.label)
            .cmp(&(&y.bucket, &y.arm, y.kind, y.level, &y.label))
    });
}

/// Most requests first, then by key and arm.
pub(super) fn sort_keys(keys: &mut [KeyRow]) {
    keys.sort_by(|a, b| {
        b.requests
            .cmp(&a.requests)
            .then_with(|| a.key_id.cmp(&b.key_id))
            .then_with(|| a.arm.cmp(&b.arm))
    });
}

/// Everything read, ready to become a report.
pub(super) struct Read {
    pub records: usize,
    pub live: usize,
    pub method: Method,
    pub cells: Vec<CellIn>,
    pub keys: Vec<KeyRow>,
    pub in_flight: Dist,
    pub by_api: BTreeMap<String, super::shapes::ShapeRow>,
    pub by_bucket: BTreeMap<String, super::shapes::ShapeRow>,
    pub prefix_cache: Option<super::shapes::CacheSplit>,
    pub by_turn: BTreeMap<String, super::shapes::TurnRow>,
    pub hop: Vec<HopRec>,
    pub tap: Vec<TapRec>,
    pub board: Vec<BoardRec>,
    pub board_opts: BoardOpts,
    pub traffic: Traffic,
    pub other: Vec<OtherRow>,
    pub streaming: Vec<super::streaming::StreamRow>,
    /// Whether cells keep their whole-cell figures even when a plateau holds enough.
    pub whole_cell: bool,
    /// `report --clickhouse --run-id`: (shard, N, records) of the run's rows.
    pub shards: Vec<(u32, u32, usize)>,
}

/// The report's reading state. Feed it with [`Acc::add`] (and [`Acc::add_tap_only`]), then
/// [`Acc::finish`].
pub struct Acc {
    goodput_ttft_ms: f64,
    goodput_tok_s: f64,
    by_arm: bool,
    arms: (String, String),
    budget: usize,
    held: usize,
    sketch: bool,
    records: usize,
    live: usize,
    names: Names,
    clock: Clock,
    /// By (bucket, arm, level, kind): see [`Kind`].
    cells: Map<(u32, u32, u64, Kind), CellAcc>,
    by_turn: BTreeMap<u64, TurnAcc>,
    keys: Map<(u32, u32), KeyAcc>,
    in_flight: Values,
    /// By [`Api`] as an index.
    by_api: [Option<ShapeAcc>; 7],
    cache: CacheAcc,
    hop: Vec<HopRec>,
    tap: Vec<TapRec>,
    board: Vec<BoardRec>,
    /// What the gateway board is told besides the records (`run.json`, flags).
    pub board_opts: BoardOpts,
    /// Records of the tap across pods, joined once every file is read.
    across: super::join::Pending,
    /// Records read, by [`Class`] as an index.
    classes: [usize; 6],
    /// Served generation streams without usage (no input tokens, so no bucket).
    no_usage: usize,
    /// Served generation streams.
    streams: usize,
    /// Whether a generation carried an experiment arm; else the cells' arm is the route.
    armed: bool,
    /// Not-judged requests by (endpoint, method, status, class).
    other: BTreeMap<(String, String, u16, Class), usize>,
    other_endpoints: std::collections::HashSet<String>,
    streaming: super::streaming::StreamingAcc,
    /// Generations of a repeated sweep (`bench --runs N`), by cell and run.
    runs: crate::spread::Collect,
    /// `report --whole-cell`: every cell's figures from all its requests, never its plateau.
    pub whole_cell: bool,
}

impl Acc {
    /// `exact_values`: how many values to hold before switching every percentile to a sketch.
    pub fn new(slos: &super::Slos, by_arm: bool, arms: (&str, &str), exact_values: usize) -> Acc {
        Acc {
            goodput_ttft_ms: slos.goodput_ttft_ms,
            goodput_tok_s: slos.goodput_tok_s,
            by_arm,
            arms: (arms.0.to_owned(), arms.1.to_owned()),
            budget: exact_values,
            held: 0,
            sketch: exact_values == 0,
            records: 0,
            live: 0,
            names: Names::default(),
            clock: Clock::default(),
            cells: Map::default(),
            by_turn: BTreeMap::new(),
            keys: Map::default(),
            in_flight: Values::new(exact_values == 0),
            by_api: Default::default(),
            cache: CacheAcc::default(),
            hop: Vec::new(),
            tap: Vec::new(),
            board: Vec::new(),
            board_opts: BoardOpts::default(),
            across: Default::default(),
            classes: [0; 6],
            no_usage: 0,
            streams: 0,
            armed: false,
            other: BTreeMap::new(),
            other_endpoints: std::collections::HashSet::new(),
            streaming: Default::default(),
            runs: Default::default(),
            whole_cell: false,
        }
    }

    /// A request that is not judged (client error, listing, probe, …): counted by endpoint,
    /// method and status, at most [`OTHER_ENDPOINTS`] endpoints by name.
    fn add_other(&mut self, r: &Row<'_>, class: Class) {
        let mut endpoint = r.endpoint.as_str();
        if !self.other_endpoints.contains(endpoint) {
            if self.other_endpoints.len() < OTHER_ENDPOINTS_HELD {
                self.other_endpoints.insert(endpoint.to_owned());
            } else {
                endpoint = OTHER_PATHS;
            }
        }
        *self
            .other
            .entry((
                endpoint.to_owned(),
                r.method.as_str().to_owned(),
                r.status,
                class,
            ))
            .or_insert(0) += 1;
    }

    /// A generation of a repeated sweep: kept for its cell's run-to-run spread.
    fn add_run(&mut self, r: &Row<'_>) {
        let Some(run) = r.run.filter(|n| *n >= 1 && r.class().is_generation()) else {
            return;
        };
        self.runs.add(crate::spread::Obs {
            key: crate::spread::CellKey {
                bucket: r.bucket.as_ref().map_or("-", |b| b.as_str()).to_owned(),
                concurrency: r.concurrency,
                request_rate: r.request_rate,
                arm: r.arm().map(str::to_owned),
            },
            run: u32::try_from(run).unwrap_or(u32::MAX),
            ok: r.ok(),
            ttft_ms: r.ttft_ms,
            tpot_ms: r.tpot_ms,
            e2e_ms: r.e2e_ms,
        });
    }

    /// The run-to-run spread of what was read (`bench --runs N`), taken out.
    pub(super) fn take_spread(&mut self) -> Vec<crate::spread::CellSpread> {
        std::mem::take(&mut self.runs).finish()
    }

    /// A record of the traffic being reported.
    pub fn add(&mut self, r: &Row<'_>) {
        self.records += 1;
        let ts = self.clock.time(r.ts.as_str());
        let bucket = self.names.id(r.bucket());
        if let Some(e) = &r.experiment {
            let name = self.names.arc(bucket);
            if let Some(h) = HopRec::of(r, &self.arms.0, &self.arms.1, name, ts) {
                self.hop.push(h);
            }
            if e.pair_id.is_some() && r.client_facing() {
                let arm = self.names.id(e.arm.as_str());
                if let Some(b) = BoardRec::of(r, self.names.arc(arm)) {
                    self.board.push(b);
                }
            }
        }
        self.add_tap(r, bucket);
        self.streaming.add(r, &mut self.names);
        if !r.client_facing() {
            return;
        }
        self.add_run(r);
        let sketch = self.sketch;
        let mut held = 0;
        let live = r.concurrency.is_none() && r.request_rate.is_none();
        self.live += usize::from(live);
        held += self.by_api[r.api() as usize]
            .get_or_insert_with(|| ShapeAcc::new(sketch))
            .add(r);
        let class = r.class();
        self.classes[class as usize] += 1;
        if !class.is_generation() {
            if class == Class::ClientError {
                let key_arm = match r.arm() {
                    Some(a) if self.by_arm => self.names.id(a),
                    _ => NONE,
                };
                self.add_key(r, key_arm, class);
            }
            self.add_other(r, class);
            self.note_held(held);
            return;
        }
        if class == Class::Served && r.stream {
            self.streams += 1;
            self.no_usage += usize::from(r.input_tokens.is_none());
        }
        // The cells' arm: the experiment's, else the route (kept only when there are two).
        let arm = match r.arm() {
            Some(a) => {
                self.armed = true;
                self.names.id(a)
            }
            None if r.route.as_str().is_empty() => NONE,
            None => self.names.id(r.route.as_str()),
        };
        let (lvl, kind) = match r.request_rate.filter(|r| r.is_finite() && *r > 0.0) {
            Some(rate) => ((rate * 1000.0).round() as u64, Kind::Rate),
            None if live => (level(None, r.in_flight), Kind::Live),
            None => (level(r.concurrency, r.in_flight), Kind::Concurrency),
        };
        let c = self
            .cells
            .entry((bucket, arm, lvl, kind))
            .or_insert_with(|| CellAcc::new(sketch));
        held += c.add(
            r,
            ts,
            kind,
            class,
            (self.goodput_ttft_ms, self.goodput_tok_s),
        );

        let key_arm = match r.arm() {
            Some(a) if self.by_arm => self.names.id(a),
            _ => NONE,
        };
        held += self.add_key(r, key_arm, class);
        if live {
            held += self.in_flight.push(r.in_flight as f64);
        }
        if let Some(turn) = r.turn {
            held += self
                .by_turn
                .entry(turn)
                .or_insert_with(|| TurnAcc::new(sketch))
                .add(r);
        }
        held += self.cache.add(r, bucket, sketch);
        self.note_held(held);
    }

    fn note_held(&mut self, held: usize) {
        self.held += held;
        if !self.sketch && self.held > self.budget {
            self.switch_to_sketches();
        }
    }

    /// Per-key accounting of a generation or a client error; the values it held.
    fn add_key(&mut self, r: &Row<'_>, key_arm: u32, class: Class) -> usize {
        let sketch = self.sketch;
        let key = match &r.key_id {
            Some(k) => self.names.id(k.as_str()),
            None => self.names.id("(no key)"),
        };
        let k = self.keys.entry((key, key_arm)).or_insert_with(|| KeyAcc {
            requests: 0,
            errors: 0,
            client_errors: 0,
            input: 0,
            output: 0,
            ttft: Values::new(sketch),
            tpot: Values::new(sketch),
            e2e: Values::new(sketch),
        });
        k.requests += 1;
        k.errors += usize::from(r.is_error());
        k.client_errors += usize::from(class == Class::ClientError);
        k.input += r.input_tokens.unwrap_or(0);
        k.output += r.output_tokens.unwrap_or(0);
        if r.ok() && class == Class::Served {
            k.ttft.opt(r.ttft_ms) + k.tpot.opt(r.tpot_ms) + k.e2e.push(r.e2e_ms)
        } else {
            0
        }
    }

    /// A record that feeds the gateway-tap section alone (`report --tap`).
    pub fn add_tap_only(&mut self, r: &Row<'_>) {
        let bucket = self.names.id(r.bucket());
        self.add_tap(r, bucket);
        self.streaming.add_tap_only(r, &mut self.names);
    }

    fn add_tap(&mut self, r: &Row<'_>, bucket: u32) {
        if r.gateway_tap.is_none() {
            if r.join_sent || r.join_id.is_some() {
                let route = self.names.id(r.route.as_str());
                let (route, bucket) = (self.names.arc(route), self.names.arc(bucket));
                let boot = r.boot_id.as_ref().map(|b| {
                    let id = self.names.id(b.as_str());
                    self.names.arc(id)
                });
                let at = self.clock.time(r.ts.as_str());
                self.across.add(r, route, bucket, at, boot);
            }
            return;
        }
        let route = self.names.id(r.route.as_str());
        let (route, bucket) = (self.names.arc(route), self.names.arc(bucket));
        if let Some(t) = TapRec::of(r, route, bucket) {
            self.tap.push(t);
        }
    }

    /// The budget is spent: every percentile from here on comes from a sketch.
    fn switch_to_sketches(&mut self) {
        self.sketch = true;
        self.held = 0;
        for c in self.cells.values_mut() {
            c.values().for_each(Values::to_sketch);
        }
        for k in self.keys.values_mut() {
            for v in [&mut k.ttft, &mut k.tpot, &mut k.e2e] {
                v.to_sketch();
            }
        }
        self.in_flight.to_sketch();
        for s in self.by_api.iter_mut().flatten() {
            s.values().into_iter().for_each(Values::to_sketch);
        }
        self.cache.values().for_each(Values::to_sketch);
        for t in self.by_turn.values_mut() {
            t.ttft.to_sketch();
        }
    }

    /// How many records were read.
    pub fn records(&self) -> usize {
        self.records
    }

    pub(super) fn finish(self, top: usize) -> Read {
        let names = self.names;
        let label = |s: u32| names.name(s);
        // Per bucket, every level and arm pooled: the cells of the bucket, merged.
        let mut by_bucket: BTreeMap<String, ShapeAcc> = BTreeMap::new();
        for ((b, ..), c) in &self.cells {
            by_bucket
                .entry(names.name(*b).unwrap_or_default())
                .or_insert_with(|| ShapeAcc::new(self.sketch))
                .absorb(
                    c.requests,
                    c.errors,
                    c.tokens,
                    [&c.ttft, &c.ttfo, &c.tpot, &c.e2e],
                );
        }
        let mut cells: Vec<CellIn> = self
            .cells
            .into_iter()
            .map(|((b, a, lvl, kind), acc)| {
                let (level, label) = match kind {
                    Kind::Live => level_of(None, lvl),
                    Kind::Concurrency => level_of(Some(lvl), 0),
                    Kind::Rate => (lvl, rate_label(lvl as f64 / 1000.0)),
                };
                CellIn {
                    bucket: names.name(b).unwrap_or_default(),
                    arm: names.name(a),
                    level,
                    label,
                    rate: (kind == Kind::Rate).then_some(lvl as f64 / 1000.0),
                    kind,
                    acc,
                }
            })
            .collect();
        drop_single_arm(&mut cells, self.armed);
        sort_cells(&mut cells);
        let mut keys: Vec<KeyRow> = self
            .keys
            .into_iter()
            .map(|((k, a), acc)| KeyRow {
                key_id: label(k).unwrap_or_default(),
                arm: label(a),
                requests: acc.requests,
                error_rate: acc.errors as f64 / acc.requests.max(1) as f64,
                client_errors: acc.client_errors,
                input_tokens: acc.input,
                output_tokens: acc.output,
                ttft_ms: acc.ttft.dist(),
                tpot_ms: acc.tpot.dist(),
                e2e_ms: acc.e2e.dist(),
            })
            .collect();
        sort_keys(&mut keys);
        keys.truncate(top);
        let method = if self.sketch {
            Method::sketch(self.budget)
        } else {
            Method::exact(self.budget)
        };
        Read {
            records: self.records,
            live: self.live,
            method,
            cells,
            keys,
            in_flight: self.in_flight.dist(),
            by_api: self
                .by_api
                .into_iter()
                .zip(API_ORDER)
                .filter_map(|(v, api)| Some((api.as_str().to_owned(), v?.finish())))
                .collect(),
            by_bucket: by_bucket
                .into_iter()
                .map(|(b, v)| (b, v.finish()))
                .collect(),
            prefix_cache: self.cache.finish(|b| names.name(b).unwrap_or_default()),
            by_turn: self
                .by_turn
                .into_iter()
                .map(|(t, v)| (t.to_string(), v.finish()))
                .collect(),
            hop: self.hop,
            tap: {
                let mut tap = self.tap;
                tap.extend(self.across.finish());
                tap
            },
            board: self.board,
            board_opts: self.board_opts,
            traffic: Traffic::of(self.classes, self.streams, self.no_usage),
            other: other_rows(self.other),
            streaming: self.streaming.finish(&names),
            whole_cell: self.whole_cell,
            shards: Vec::new(),
        }
    }
}
