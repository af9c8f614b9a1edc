//! Throughput of the per-chunk observer (SSE splitter + event inspection) over the real vLLM
//! and LiteLLM fixtures, cut at random boundaries — what the proxy spends per byte it relays.
//!
//!   cargo bench --bench sse
// Tests and benches time what they drive on their own process clock, and set the environment
// only where they must (tests/environment/): the one-door rules are for the record's path.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tokentap::meter::Meter;
use tokio::time::Instant;

fn fixtures() -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sse");
    let mut all = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    for p in names {
        if p.extension().is_some_and(|e| e == "sse") {
            let b = std::fs::read(&p).unwrap();
            if b.starts_with(b"data:") {
                all.extend_from_slice(&b);
            }
        }
    }
    all
}

/// Cut `body` at seeded random points into reads of 1–4096 bytes.
fn cut(body: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let n = rng.usize(1..=4096).min(body.len() - i);
        out.push(&body[i..i + n]);
        i += n;
    }
    out
}

fn bench(c: &mut Criterion) {
    let body = fixtures();
    let mut g = c.benchmark_group("sse_observer");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("fixtures_random_cuts", |b| {
        let pieces = cut(&body, 7);
        b.iter_batched(
            || {
                let mut m = Meter::new(Instant::now());
                m.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
                m
            },
            |mut m| {
                let now = Instant::now();
                for p in &pieces {
                    m.on_data(p, now);
                }
                m.content_events
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("splitter_only", |b| {
        let pieces = cut(&body, 7);
        b.iter(|| {
            let mut s = tokentap::sse::SseSplitter::new(1 << 20);
            let mut n = 0usize;
            for p in &pieces {
                s.feed(p, &mut |_| n += 1);
            }
            n
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
