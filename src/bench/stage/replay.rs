//! Replay of recorded traffic (`--replay`): the capacity question asked of your own traffic,
//! "would this deployment have held last Tuesday's peak?". Reads tokentap logs (rotated and
//! `.gz` too) or Mooncake traces (`{"timestamp", "input_length", "output_length",
//! "hash_ids"}`, the format AIPerf and GuideLLM replay), and sends each request when it
//! arrived (scaled by `--speed`, sliced by `--window`), with its recorded input and output token
//! counts, API shape and model. tokentap never stores prompt text, so prompts are synthetic
//! text of the recorded length (seeded); a Mooncake trace's `hash_ids` become shared text
//! blocks, so its shared prefixes stay shared. The gateway's own requests (a tap's inner side)
//! and shapes bench cannot send (embeddings, other) are left out and counted.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::open::Planned;
use crate::bench::cell::Out;
use crate::bench::model::settings::{Common, Replay};
pub use crate::bench::model::window::{Bound, Window};
use crate::bench::request::{overhead, text_of_tokens, Req};
use crate::bench::session::Session;
use crate::bench::{BenchError, OpenInfo};
use crate::meter::Buckets;
use crate::openai::Api;

/// Tokens in one Mooncake `hash_ids` block.
const MOONCAKE_BLOCK: u64 = 512;

/// What `run.json` says of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayInfo {
    pub files: Vec<String>,
    /// `tokentap` (a tokentap log) or `mooncake` (a Mooncake trace).
    pub format: &'static str,
    /// Requests read from the files.
    pub read: usize,
    /// Requests sent (inside the window and the time bound).
    pub replayed: usize,
    /// Requests left out, by reason.
    pub left_out: BTreeMap<String, usize>,
    /// Requests whose input size came from their body size (no usage recorded).
    pub input_estimated: usize,
    /// Requests whose output size came from `max_tokens` (or 64 without it).
    pub output_estimated: usize,
    pub window: Option<String>,
    pub speed: f64,
    /// First to last request of the replay, after `--speed` (seconds).
    pub span_s: f64,
    /// The replay's mean rate: requests ÷ span.
    pub offered_rate: f64,
    /// The recorded model, when every request names the same one.
    pub model: Option<String>,
    /// What the client sent, against the schedule (once the replay has run).
    pub sent: Option<OpenInfo>,
}

#[derive(Deserialize)]
struct TapSide {
    side: Option<String>,
}

/// A line of either format (the fields a replay needs).
#[derive(Deserialize)]
struct Line {
    // A tokentap record.
    ts: Option<String>,
    outcome: Option<serde::de::IgnoredAny>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    api: Option<Api>,
    model: Option<String>,
    request_bytes: Option<u64>,
    max_tokens: Option<u64>,
    bucket: Option<String>,
    gateway_tap: Option<TapSide>,
    // A Mooncake trace line.
    timestamp: Option<f64>,
    input_length: Option<u64>,
    output_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
}

struct Item {
    at: Option<SystemTime>,
    offset_ms: f64,
    input: Option<u64>,
    input_estimated: bool,
    output: u64,
    output_estimated: bool,
    api: Api,
    model: Option<String>,
    bucket: Option<String>,
    hash_ids: Vec<u64>,
}

/// Read the files into the replay's plan; every request measured, none warm-up.
pub fn plan(cfg: &Replay, common: &Common) -> Result<(Vec<Planned>, ReplayInfo), BenchError> {
    let (mut items, mut left_out, format) = read(&cfg.files, common.api)?;
    let read = items.len() + left_out.values().sum::<usize>();
    if let Some(w) = &cfg.window {
        if format == "mooncake"
            && [w.from, w.to]
                .iter()
                .flatten()
                .any(|b| matches!(b, Bound::At(_)))
        {
            return Err(BenchError::Usage(
                "--window: a Mooncake trace has no wall-clock times; give offsets (10m..20m)"
                    .into(),
            ));
        }
        let before = items.len();
        items.retain(|i| i.window_ok(w));
        *left_out.entry("outside --window".into()).or_default() += before - items.len();
    }
    // The replay starts with the first request of the slice, scaled by --speed.
    let base = items.first().map_or(0.0, |i| i.offset_ms);
    let due =
        |i: &Item| Duration::from_secs_f64((i.offset_ms - base).max(0.0) / 1000.0 / cfg.speed);
    let before = items.len();
    items.retain(|i| due(i) <= cfg.max_time);
    if before > items.len() {
        *left_out.entry("past --max-time".into()).or_default() += before - items.len();
    }
    if items.is_empty() {
        return Err(BenchError::Replay(format!(
            "--replay {}: no request to replay ({})",
            cfg.files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            left_out
                .iter()
                .map(|(k, v)| format!("{v} left out: {k}"))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    let mut models: Vec<&str> = items.iter().filter_map(|i| i.model.as_deref()).collect();
    models.sort_unstable();
    models.dedup();
    let model = (models.len() == 1 && items.iter().all(|i| i.model.is_some()))
        .then(|| models[0].to_owned());
    let span_s = items.last().map_or(0.0, |i| due(i).as_secs_f64());
    let planned: Vec<Planned> = items
        .iter()
        .enumerate()
        .map(|(n, i)| planned(common, n, i, due(i)))
        .collect();
    let info = ReplayInfo {
        files: cfg
            .files
            .iter()
            .map(|p: &PathBuf| p.display().to_string())
            .collect(),
        format,
        read,
        replayed: planned.len(),
        input_estimated: items.iter().filter(|i| i.input_estimated).count(),
        output_estimated: items.iter().filter(|i| i.output_estimated).count(),
        left_out,
        window: cfg.window.as_ref().map(|w| w.text.clone()),
        speed: cfg.speed,
        span_s,
        offered_rate: if span_s > 0.0 {
            (planned.len().saturating_sub(1)) as f64 / span_s
        } else {
            0.0
        },
        model,
        sent: None,
    };
    Ok((planned, info))
}

/// The files' requests in arrival order (offsets from the first), what was left out and why, and
/// the files' format.
fn read(files: &[PathBuf], api: Api) -> Result<Read, BenchError> {
    let mut items: Vec<Item> = Vec::new();
    let mut left_out: BTreeMap<String, usize> = BTreeMap::new();
    let mut format: Option<&'static str> = None;
    let mut warnings = Vec::new();
    crate::report::read::scan(files, &mut |w| warnings.push(w), &mut |line| {
        let l: Line = serde_json::from_slice(line)?;
        items.extend(item(l, api, &mut format, &mut left_out)?);
        Ok(())
    })
    .map_err(|e| BenchError::Replay(format!("--replay {e}")))?;
    for w in warnings {
        eprintln!("tokentap bench: --replay: {w}");
    }
    let format = format.unwrap_or("tokentap");
    // Arrival offsets from the first request.
    if format == "tokentap" {
        let first = items.iter().filter_map(|i| i.at).min();
        for i in &mut items {
            if let (Some(a), Some(f)) = (i.at, first) {
                i.offset_ms = a.duration_since(f).unwrap_or_default().as_secs_f64() * 1000.0;
            }
        }
    }
    items.sort_by(|a, b| a.offset_ms.total_cmp(&b.offset_ms));
    Ok((items, left_out, format))
}

/// What `read` returns.
type Read = (Vec<Item>, BTreeMap<String, usize>, &'static str);

/// A line as a request to replay, or `None` when it is left out (counted in `left_out`); every
/// line of the files is of one format (`format`, set by the first).
fn item(
    l: Line,
    api: Api,
    format: &mut Option<&'static str>,
    left_out: &mut BTreeMap<String, usize>,
) -> Result<Option<Item>, serde_json::Error> {
    let this = match (&l.ts, &l.outcome, l.timestamp, l.input_length) {
        (Some(_), Some(_), ..) => "tokentap",
        (_, _, Some(_), Some(_)) => "mooncake",
        _ => return Err(bad("neither a tokentap record (ts, outcome) nor a Mooncake trace line (timestamp, input_length)".into())),
    };
    if *format.get_or_insert(this) != this {
        return Err(bad(format!(
            "a {this} line among {} lines",
            format.unwrap_or(this)
        )));
    }
    let item = if this == "mooncake" {
        Item {
            at: None,
            offset_ms: l.timestamp.unwrap_or(0.0),
            input: l.input_length,
            input_estimated: false,
            output: l.output_length.unwrap_or(64).max(1),
            output_estimated: l.output_length.is_none(),
            api,
            model: None,
            bucket: None,
            hash_ids: l.hash_ids.unwrap_or_default(),
        }
    } else {
        let at =
            l.ts.as_deref()
                .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
                .ok_or_else(|| bad("ts is not an RFC 3339 time".into()))?;
        if l.gateway_tap.as_ref().and_then(|g| g.side.as_deref()) == Some("inner") {
            *left_out
                .entry("the inner side of a gateway tap (the gateway's own request)".into())
                .or_default() += 1;
            return Ok(None);
        }
        let api = l.api.unwrap_or(Api::Other);
        if !matches!(
            api,
            Api::Chat | Api::Completions | Api::Responses | Api::Messages
        ) {
            *left_out
                .entry(format!(
                    "API shape {} (bench sends chat, completions, responses, messages)",
                    api.as_str()
                ))
                .or_default() += 1;
            return Ok(None);
        }
        let input_est = l.request_bytes.filter(|b| *b > 0).map(|b| b.div_ceil(4));
        let output = l.output_tokens.filter(|o| *o > 0);
        Item {
            at: Some(at),
            offset_ms: 0.0,
            input: l.input_tokens.or(input_est),
            input_estimated: l.input_tokens.is_none() && input_est.is_some(),
            output: output.or(l.max_tokens).unwrap_or(64).max(1),
            output_estimated: output.is_none(),
            api,
            model: l.model,
            bucket: l.bucket,
            hash_ids: Vec::new(),
        }
    };
    if item.input.is_none() {
        *left_out
            .entry("no input size (no usage, no body size)".into())
            .or_default() += 1;
        return Ok(None);
    }
    Ok(Some(item))
}

fn bad(m: String) -> serde_json::Error {
    serde::de::Error::custom(m)
}

/// Request `n` of the replay, due at `at`: synthetic text of its recorded input length (a
/// Mooncake request's shared blocks shared), its recorded output length, shape and model.
fn planned(cfg: &Common, n: usize, i: &Item, at: Duration) -> Planned {
    let buckets = Buckets::default();
    let input = i.input.unwrap_or(1);
    let text_tokens = input.saturating_sub(overhead(i.api)).max(1);
    let seed = cfg.seed ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let text = if i.hash_ids.is_empty() {
        text_of_tokens(text_tokens, seed)
    } else {
        blocks(&i.hash_ids, text_tokens, cfg.seed, seed)
    };
    let bucket = i
        .bucket
        .clone()
        .or_else(|| buckets.of(Some(input), Some(i.output)).map(str::to_owned))
        .unwrap_or_else(|| "other".into());
    Planned {
        at,
        req: Req {
            fixed: cfg.fixed_output,
            stream: cfg.stream,
            ..Req::plain(
                cfg.model
                    .as_deref()
                    .or(i.model.as_deref())
                    .unwrap_or("")
                    .into(),
                i.api,
                text,
                i.output,
                &bucket,
            )
        },
        measured: true,
    }
}

impl Item {
    fn window_ok(&self, w: &Window) -> bool {
        w.holds(
            Duration::from_secs_f64(self.offset_ms.max(0.0) / 1000.0),
            self.at,
        )
    }
}

/// A Mooncake request's prompt: its blocks' texts (the same id, the same text, so shared
/// prefixes stay shared), cut to `tokens`, padded with text of its own when the blocks fall
/// short.
fn blocks(ids: &[u64], tokens: u64, seed: u64, own: u64) -> String {
    let want = (tokens * 4) as usize;
    let mut s = String::with_capacity(want);
    for id in ids {
        if s.len() >= want {
            break;
        }
        s.push_str(&text_of_tokens(
            MOONCAKE_BLOCK,
            seed ^ id.wrapping_mul(0xA24B_AED4_963E_E407),
        ));
    }
    if s.len() < want {
        let rest = (want - s.len()) as u64;
        s.push_str(&text_of_tokens(rest.div_ceil(4), own));
    }
    s.truncate(want);
    s
}

/// Send the replay's requests on their schedule, as one cell kept in `out`; what `run.json` says
/// of the replay, with what was sent.
pub(crate) async fn send(
    s: &Session,
    requests: Vec<Planned>,
    (mut info, cap): (ReplayInfo, Option<usize>),
    out: &mut Out,
) -> ReplayInfo {
    let begun = s.load.mark().await;
    let r = super::open::run(s, "replay", requests, cap).await;
    let sent = r.info(info.offered_rate);
    info.sent = Some(sent.clone());
    out.push("replay", None, r.records, r.wall_s, Some(sent));
    out.own_lag(r.stall_share, r.reader_lag_ms);
    out.window(begun, s.load.mark().await);
    info
}

/// Fill in the model of requests that named none (no `--model`, none recorded).
pub fn default_model(plan: &mut [Planned], model: &Arc<str>) {
    for p in plan {
        if p.req.model.is_empty() {
            p.req.model = model.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_offsets_and_times() {
        let w = Window::parse("90s..2m").unwrap();
        assert_eq!(w.from, Some(Bound::Offset(Duration::from_secs(90))));
        assert!(w.holds(Duration::from_secs(100), None));
        assert!(!w.holds(Duration::from_secs(121), None));
        let w = Window::parse("2026-12-01T14:00:00Z..").unwrap();
        assert!(matches!(w.from, Some(Bound::At(_))) && w.to.is_none());
        assert!(Window::parse("10m").is_err());
        let e = Window::parse("soon..later").unwrap_err();
        assert!(e.contains("soon"), "{e}");
    }

    #[test]
    fn mooncake_blocks_share_text_and_have_the_length_asked_for() {
        let a = blocks(&[1, 2, 3], 1200, 42, 7);
        let b = blocks(&[1, 2, 9], 1200, 42, 8);
        assert_eq!(crate::tokens::estimate_tokens(&a), 1200);
        assert_eq!(a[..4096], b[..4096], "two shared blocks");
        assert_ne!(a[4096..], b[4096..]);
        let long = blocks(&[1], 700, 42, 7);
        assert_eq!(crate::tokens::estimate_tokens(&long), 700);
    }
}
