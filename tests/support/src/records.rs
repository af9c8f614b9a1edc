//! Synthetic request records as a busy deployment writes them: every field a proxy record
//! carries, full-precision timings, 40 keys, four buckets, a few percent of errors and
//! cancellations. Deterministic: the same seed gives the same records. For the report's tests
//! and its benchmark (`benches/report.rs`).
//!
//! `tests/fixtures/report/*.json` are reports of these records (seed 7) written by the report
//! before it streamed: a change here that changes the records means writing them again, from a
//! report known to be right.

use tokentap::meter::{
    Experiment, GatewayTap, JoinBy, Outcome, RequestRecord, TapSide, TokensSource, TtftSplit,
    Unjoined,
};
use tokentap::openai::Api;

/// What kind of traffic the records are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// A live proxy log: no load-generator level, the in-flight count at admission.
    Live,
    /// A load generator's open-loop cells (offered rates, scheduled times, client queue and
    /// lag) and conversation turns (prompts growing, cached tokens).
    Load,
    /// Everything a report reads: live records, bench levels, paired experiment arms, and both
    /// sides of a gateway tap.
    Everything,
}

/// splitmix64: small, fast and good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// Log-normal around `median` with spread `sigma`: latency-shaped.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        let (u1, u2) = (self.unit().max(1e-12), self.unit());
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        median * (sigma * z).exp()
    }
}

const BUCKETS: [(&str, u64, u64); 4] = [
    ("long-short", 3000, 120),
    ("balanced", 800, 400),
    ("short-long", 150, 1200),
    ("other", 60, 30),
];

/// A key id as tokentap writes it: `sha256:` and 64 hex digits.
fn key_id(n: u64) -> String {
    let mut r = Rng::new(n.wrapping_mul(7919) + 1);
    let mut s = String::from("sha256:");
    for _ in 0..4 {
        s.push_str(&format!("{:016x}", r.next_u64()));
    }
    s
}

/// Record `i` of a deterministic stream (`i` sets its time: 40 requests a second).
pub fn record(i: u64, seed: u64, mix: Mix) -> RequestRecord {
    let mut r = Rng::new(seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let (bucket, input, output) = BUCKETS[r.below(4) as usize];
    let input_tokens = input / 2 + r.below(input);
    let output_tokens = 1 + output / 2 + r.below(output);
    let roll = r.unit();
    let outcome = if roll < 0.02 {
        Outcome::UpstreamError
    } else if roll < 0.03 {
        Outcome::ClientCancelled
    } else if roll < 0.035 {
        Outcome::Timeout
    } else {
        Outcome::Ok
    };
    let ok = outcome == Outcome::Ok;
    let in_flight = 1 + r.below(40);
    let ttft = r.lognormal(40.0 + input_tokens as f64 / 20.0, 0.5);
    let tpot = r.lognormal(12.0 + in_flight as f64 / 4.0, 0.25);
    let e2e = if ok {
        ttft + tpot * (output_tokens - 1) as f64
    } else {
        r.lognormal(30.0, 1.0)
    };
    let secs = 1_795_000_000 + i / 40;
    let micros = (i % 40) * 25_000 + r.below(25_000);
    let ts = humantime::format_rfc3339_micros(
        std::time::UNIX_EPOCH + std::time::Duration::from_micros(secs * 1_000_000 + micros),
    )
    .to_string();
    let api = match r.below(20) {
        0 => Api::Completions,
        1 => Api::Responses,
        2 => Api::Messages,
        _ => Api::Chat,
    };
    let endpoint = match api {
        Api::Completions => "/v1/completions",
        Api::Responses => "/v1/responses",
        Api::Messages => "/v1/messages",
        _ => "/v1/chat/completions",
    };
    let cached = (r.below(3) == 0).then(|| r.below(input_tokens));
    let mut rec = RequestRecord {
        ts,
        id: format!("{:016x}", r.next_u64()),
        route: "default".into(),
        experiment: None,
        method: "POST".into(),
        endpoint: endpoint.into(),
        api,
        endpoint_api: None,
        model: Some("meta-llama/Llama-3.1-8B-Instruct".into()),
        upstream_model: None,
        response_model: ok.then(|| "meta-llama/Llama-3.1-8B-Instruct".into()),
        key_id: (r.below(50) != 0).then(|| key_id(r.below(40))),
        stream: true,
        status: if outcome == Outcome::UpstreamError {
            503
        } else {
            200
        },
        outcome,
        input_tokens: Some(input_tokens),
        output_tokens: ok.then_some(output_tokens),
        tokens_source: Some(TokensSource::Usage),
        cached_tokens: if ok { cached } else { None },
        reasoning_tokens: (api == Api::Responses).then(|| r.below(output_tokens)),
        ttft_ms: ok.then_some(ttft),
        ttfo_ms: ok.then_some(ttft * 1.01),
        tpot_ms: (ok && output_tokens >= 2).then_some(tpot),
        e2e_ms: e2e,
        itl_p50_ms: ok.then_some(tpot * 0.97),
        itl_p99_ms: ok.then_some(tpot * 2.5),
        itl_max_ms: ok.then_some(tpot * 6.0),
        body_read_ms: Some(r.unit() * 0.2),
        upstream_headers_ms: Some(ttft * 0.3),
        first_byte_ms: Some(ttft * 0.31),
        first_event_ms: Some(ttft * 0.32),
        last_token_ms: ok.then_some(e2e - 0.05),
        in_flight,
        max_tokens: Some(output * 2),
        request_bytes: input_tokens * 4 + 200,
        response_bytes: output_tokens * 150,
        events: output_tokens + 2,
        content_events: output_tokens,
        done: Some(ok),
        finish_reason: None,
        bucket: Some(bucket.into()),
        parse_errors: 0,
        oversize_events: 0,
        engine_queue_ms: None,
        engine_ttft_ms: None,
        engine_decode_ms: None,
        gateway_overhead_ms: None,
        concurrency: None,
        request_rate: None,
        scheduled_ms: None,
        client_queue_ms: None,
        client_lag_ms: None,
        turn: None,
        prompt_index: None,
        run: None,
        run_id: None,
        shard: None,
        shards: None,
        upstream_sent_ms: Some(r.unit() * 0.4),
        ttft_split: ok.then_some(TtftSplit {
            proxy_ms: Some(0.3),
            upstream_headers_ms: Some(ttft * 0.3),
            engine_queue_ms: None,
            engine_prefill_ms: None,
            outside_engine_ms: None,
        }),
        gateway_tap: None,
        request_id: None,
        join_id: None,
        join_sent: false,
        boot_id: None,
        upstream_request_id: None,
        trace_id: Some(format!("{:016x}{:016x}", r.next_u64(), r.next_u64())),
        span_id: Some(format!("{:016x}", r.next_u64())),
        content_encoding: None,
        decode_error: None,
        delivery: None,
        clock: tokentap::meter::Clock::Process,
        stamp_lag_ms: None,
        error: (outcome == Outcome::UpstreamError)
            .then(|| "upstream answered 503 Service Unavailable".into()),
    };
    if mix == Mix::Load {
        rec.key_id = None;
        if i.is_multiple_of(3) {
            // A conversation's turn: its prompt grows, and from the second turn its start is
            // in the prefix cache.
            let turn = 1 + (i / 3) % 5;
            rec.turn = Some(turn as u32);
            rec.concurrency = Some(4);
            rec.input_tokens = Some(400 * turn + r.below(50));
            rec.cached_tokens = rec
                .output_tokens
                .map(|_| if turn > 1 { 380 * (turn - 1) } else { 0 });
        } else {
            // Open-loop cells at three rates; requests 20 ms apart, some queued, a little late.
            let rate = [2.0, 8.0, 32.0][((i / 3) % 3) as usize];
            rec.request_rate = Some(rate);
            rec.scheduled_ms = Some(i as f64 * 20.0 + r.unit());
            rec.client_queue_ms = Some(if rate > 10.0 {
                r.lognormal(30.0, 1.0)
            } else {
                0.0
            });
            rec.client_lag_ms = Some(r.unit() * 1.5);
        }
    }
    if mix == Mix::Everything {
        match i % 10 {
            // Bench levels.
            0..=2 => rec.concurrency = Some(1 << (i % 4)),
            // Paired experiment arms: records i and i+1 of a pair share its id.
            3 | 4 => {
                let pair = i / 10;
                rec.concurrency = Some(1 << (pair % 3));
                rec.experiment = Some(Experiment {
                    arm: if i % 10 == 3 { "gateway" } else { "direct" }.into(),
                    pair_id: Some(format!("p{pair}")),
                });
                rec.bucket = Some(BUCKETS[(pair % 4) as usize].0.into());
                if i % 10 == 3 {
                    rec.ttft_ms = rec.ttft_ms.map(|t| t + 18.0);
                }
            }
            // The two sides of a gateway tap.
            5 => {
                rec.route = "gateway".into();
                rec.gateway_overhead_ms = Some(r.lognormal(6.0, 0.3));
                rec.gateway_tap = Some(GatewayTap {
                    side: TapSide::Outer,
                    peer: (i % 30 != 5).then(|| format!("{:016x}", i + 1)),
                    join: (i % 30 != 5).then_some(JoinBy::Fingerprint),
                    unjoined: (i % 30 == 5).then_some(Unjoined::NoMatch),
                    admission_ms: Some(r.lognormal(4.0, 0.4)),
                    relay_ms: Some(r.lognormal(1.0, 0.4)),
                    ttft_ms: Some(r.lognormal(9.0, 0.3)),
                    relay_p50_ms: None,
                    relay_max_ms: None,
                    held_tokens: None,
                    relay_verdict: None,
                });
            }
            6 => {
                rec.route = "engine".into();
                rec.gateway_tap = Some(GatewayTap {
                    side: TapSide::Inner,
                    peer: Some(format!("{:016x}", i - 1)),
                    join: Some(JoinBy::Fingerprint),
                    unjoined: None,
                    admission_ms: None,
                    relay_ms: None,
                    ttft_ms: None,
                    relay_p50_ms: None,
                    relay_max_ms: None,
                    held_tokens: None,
                    relay_verdict: None,
                });
            }
            _ => {}
        }
    }
    rec
}

/// Record `i` with its timings at the precision tokentap writes them: durations are whole
/// nanoseconds divided once into milliseconds (`meter::duration_ms`: at most six decimals),
/// inter-token gaps whole microseconds, TPOT computed from E2E and TTFT as the proxy does.
/// [`record`] keeps every timing at full double precision (17 digits), more than a proxy
/// writes: the report's golden files are of those.
pub fn record_as_written(i: u64, seed: u64, mix: Mix) -> RequestRecord {
    let mut r = record(i, seed, mix);
    let ns = |v: f64| {
        tokentap::meter::duration_ms(std::time::Duration::from_nanos((v * 1e6).round() as u64))
    };
    let us = |v: f64| (v * 1000.0).round() / 1000.0;
    for v in [
        &mut r.ttft_ms,
        &mut r.ttfo_ms,
        &mut r.body_read_ms,
        &mut r.upstream_headers_ms,
        &mut r.first_byte_ms,
        &mut r.first_event_ms,
        &mut r.last_token_ms,
        &mut r.upstream_sent_ms,
        &mut r.gateway_overhead_ms,
    ] {
        *v = v.map(ns);
    }
    r.e2e_ms = ns(r.e2e_ms);
    for v in [&mut r.itl_p50_ms, &mut r.itl_p99_ms, &mut r.itl_max_ms] {
        *v = v.map(us);
    }
    if let Some(s) = &mut r.ttft_split {
        s.proxy_ms = s.proxy_ms.map(ns);
        s.upstream_headers_ms = r.upstream_headers_ms;
    }
    r.tpot_ms = tokentap::meter::tpot_ms(r.e2e_ms, r.ttft_ms, r.output_tokens);
    r
}

/// `n` records as JSONL, one line each.
pub fn jsonl(from: u64, n: u64, seed: u64, mix: Mix) -> String {
    let mut out = String::new();
    for i in from..from + n {
        out.push_str(&serde_json::to_string(&record(i, seed, mix)).unwrap());
        out.push('\n');
    }
    out
}
