//! Conversations turn by turn (`--multi-turn`): C conversations in flight, each sending its
//! turns in order, every request carrying the conversation so far, with a think time between
//! turns (exponential around `--think-time`, seeded). The assistant's turns in the history are
//! the dataset's own replies, so the prompts are the same on every run and a prefix cache sees
//! each turn extend the last one — which is where prefix caching pays, and what the report's
//! TTFT by turn shows. A request's bucket is its prompt's shape (by estimated prompt tokens);
//! its output length is the dataset's reply's (16 to 1,024 tokens; 128 where there is none).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::closed::{CellResult, Tally};
use super::join::join_all;
use crate::bench::cell::{Load, Out};
use crate::bench::dataset::{BucketSpec, Conversation};
use crate::bench::model::settings::Conversations;
use crate::bench::request::{Message, Req, Role, Sent};
use crate::bench::session::Session;
use crate::tokens::estimate_tokens;

/// The bucket whose prompt range holds `tokens`.
fn bucket_of(specs: &[BucketSpec], tokens: u64) -> &'static str {
    specs
        .iter()
        .find(|s| tokens >= s.input_min && tokens < s.input_max)
        .map_or("other", |s| s.name)
}

/// The request for turn `k` (from 0) of a conversation.
fn turn_request(
    load: &Load,
    specs: &[BucketSpec],
    (n, conv): (usize, &Conversation),
    k: usize,
    conc: usize,
) -> Req {
    let mut messages = Vec::with_capacity(2 * k + 1);
    for (human, reply) in &conv.turns[..k] {
        messages.push(Message::user(human.as_str()));
        messages.push(Message {
            role: Role::Assistant,
            text: reply.as_deref().unwrap_or("").into(),
        });
    }
    let (human, reply) = &conv.turns[k];
    messages.push(Message::user(human.as_str()));
    let system = load
        .prefixes
        .get("conversations")
        .filter(|g| !g.is_empty())
        .map(|g| g[n % g.len()].clone());
    let prompt: u64 = messages
        .iter()
        .map(|m| estimate_tokens(&m.text) + 4)
        .sum::<u64>()
        + system.as_ref().map_or(0, |s| estimate_tokens(s) + 4)
        + 3;
    let out = reply
        .as_deref()
        .map_or(128, |r| estimate_tokens(r).clamp(16, 1024));
    Req {
        model: load.model.clone(),
        api: load.api,
        system,
        messages,
        out,
        fixed: load.fixed,
        stream: load.stream,
        bucket: bucket_of(specs, prompt).into(),
        concurrency: Some(conc as u64),
        request_rate: None,
        turn: Some(k as u32 + 1),
        arm: None,
        cache_salt: false,
        route_header: None,
        prompt: None,
    }
}

/// Think time before turn `k` of a conversation: exponential around the mean, seeded.
fn think(mean: Duration, seed: u64, conv: usize, k: usize) -> Duration {
    if mean.is_zero() {
        return mean;
    }
    let mut rng = fastrand::Rng::with_seed(seed ^ (conv as u64) << 20 ^ k as u64);
    mean.mul_f64(-(1.0 - rng.f64()).ln())
}

/// Every level, `conc` conversations in flight at each, each cell `(requests, warmup)` turns,
/// think times drawn from `seed`; a cell per level kept in `out`.
pub(crate) async fn run(
    s: &Session,
    (convs, specs): (&[Conversation], &[BucketSpec]),
    turns: &Conversations,
    (cells, seed): ((usize, usize), u64),
    out: &mut Out,
) {
    for &conc in &turns.concurrency {
        if s.stop.load(Ordering::Relaxed) {
            break;
        }
        let begun = s.load.mark().await;
        let cell = run_cell(s, (convs, specs), (turns, conc), (cells, seed)).await;
        out.push("conversations", Some(conc), cell.records, cell.wall_s, None);
        out.own_lag(cell.stall_share, cell.reader_lag_ms);
        out.window(begun, s.load.mark().await);
    }
}

/// One level: `conc` conversations in flight until W warm-up and N measured requests (turns)
/// are sent.
async fn run_cell(
    s: &Session,
    (convs, specs): (&[Conversation], &[BucketSpec]),
    (turns, conc): (&Conversations, usize),
    ((requests, warmup), seed): ((usize, usize), u64),
) -> CellResult {
    let (load, target, stop) = (&s.load, &s.target, &s.stop);
    let total = warmup + requests;
    let label = format!("conversations C={conc}");
    let next_conv = AtomicUsize::new(0);
    let next_req = AtomicUsize::new(0);
    let tally = Tally::new(&label, requests, warmup, &s.progress);
    let sent = Sent {
        in_flight: conc as u64,
        schedule: None,
    };
    if conc > warmup {
        target.preconnect(conc).await;
    }
    let worker = || async {
        'conversations: loop {
            let n = next_conv.fetch_add(1, Ordering::Relaxed);
            let Some(conv) = convs.get(n % convs.len().max(1)) else {
                return;
            };
            for k in 0..conv.turns.len().min(turns.max_turns) {
                if k > 0 {
                    tokio::time::sleep(think(turns.think_time, seed, n, k)).await;
                }
                let i = next_req.fetch_add(1, Ordering::Relaxed);
                if i >= total || stop.load(Ordering::Relaxed) {
                    break 'conversations;
                }
                tally.starting(i);
                let req = turn_request(load, specs, (n, conv), k, conc);
                tally.finished(i, target.one(&req, sent, stop).await);
            }
        }
    };
    let workers: Vec<_> = (0..conc).map(|_| worker()).collect();
    join_all(workers).await;
    target.opened(conc.min(total));
    tally.finish()
}
