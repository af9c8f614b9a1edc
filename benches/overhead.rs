//! End-to-end overhead of a proxy on the same streaming load, interleaved so drift cancels:
//! direct to an in-process SSE upstream, through tokentap, and (when installed) through nginx
//! and HAProxy. Prints added TTFT and ITL, throughput, proxy CPU per 1,000 chunks and memory.
//!
//!   scripts/overhead.sh            # installs nginx + haproxy, pins cores, runs this
//!   cargo bench --bench overhead   # whatever proxies are on PATH
//!
//! Env: OVERHEAD_PROXY_CPU (core for the proxies, via taskset); OVERHEAD_STREAMS (slow streams
//! for the memory phase, default 9000 — a proxy holds two sockets per stream and the open-file
//! limit here is a hard 20000; 0 skips it); OVERHEAD_QUICK=1 (fewer rounds); OVERHEAD_PROXIES
//! (comma list, default `tokentap,nginx,haproxy`); OVERHEAD_TOKENTAP_LOG=off (tokentap without
//! its request log, to see what the log costs); OVERHEAD_DEBUG=1 (process family, CPU readings);
//! OVERHEAD_KEEP=1 (keep the scratch directory with tokentap's own records of the run);
//! OVERHEAD_LATENCY_C / OVERHEAD_FULL_C (comma lists of concurrencies for the paced and the
//! full-speed cells, default `1,8,64` and `64,256`; empty skips); OVERHEAD_ROUNDS (paced rounds:
//! per target, 32 requests each at C=1 and one closed-loop slice each at C>1, rounded up to whole
//! cycles of the order);
//! OVERHEAD_SPREAD_C (the concurrencies also run with the clients' starts spread over a stream,
//! default `8,64`; see `closed_loop`); OVERHEAD_TAILS=1 (each paced cell's TTFT tail per target,
//! and its first events split: how late the upstream wrote them, and their trip from the
//! upstream's write to the client's read);
//! OVERHEAD_H2_STREAMS (tokentap's slow streams with HTTP/2 clients, default 10000; 0 skips);
//! OVERHEAD_STREAM_KIB (the memory test: the bench exits 1 when a tokentap's memory per
//! HTTP/1.1 slow stream is over this many KiB, default 12; 0 checks nothing);
//! OVERHEAD_TOKENTAP=<path> (the tokentap to measure; scripts/overhead.sh sets it to its
//! `cargo build --release`, see `tokentap_bin`);
//! OVERHEAD_COALESCE_US (the upstream pacer writes events due within this many µs of each other
//! in one wake-up, default 20; see `coalesce`);
//! OVERHEAD_TOKENTAP_B=<path to another tokentap binary> (a second build as target
//! `tokentap-b`: an A/B of two builds in one interleaved run). `tcp-relay`, `hyper-only` and
//! `hyper-tt` in OVERHEAD_PROXIES add three reference proxies (see `baseline`); OVERHEAD_POST=1
//! (the paced and full-speed requests are POSTs with a chat-completion body, see `post_body`).
// Tests and benches time what they drive on their own process clock, and set the environment
// only where they must (tests/environment/): the one-door rules are for the record's path.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokentap::proxy::h1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "overhead/baseline.rs"]
mod baseline;
#[path = "overhead/load.rs"]
mod load;
#[path = "overhead/targets.rs"]
mod targets;
#[path = "overhead/upstream.rs"]
mod upstream;

use load::*;
use targets::*;
use upstream::*;

fn env_num(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// A comma list of concurrencies from the environment (empty: none), else the default.
fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

fn main() {
    // Re-run by `start_proxies` as a reference proxy (see `baseline`).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(baseline::FLAG) {
        return baseline::run(&args[1..]);
    }
    // `cargo test --all-targets` runs bench targets too: only `cargo bench` (which passes
    // --bench) runs the measurement.
    if !std::env::args().any(|a| a == "--bench") {
        // Under `cargo test`: check the interleaving order, then stop.
        for n in 3..8 {
            let order = carryover_order(n);
            let mut pairs: Vec<(usize, usize)> = (0..order.len())
                .map(|k| (order[k], order[(k + 1) % order.len()]))
                .collect();
            pairs.sort();
            let all: Vec<(usize, usize)> = (0..n)
                .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
                .collect();
            assert_eq!(pairs, all, "carryover_order({n}) = {order:?}");
        }
        println!("overhead: run with `cargo bench --bench overhead` or scripts/overhead.sh");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let quick = std::env::var("OVERHEAD_QUICK").is_ok();
        let streams: usize = std::env::var("OVERHEAD_STREAMS").ok().and_then(|v| v.parse().ok()).unwrap_or(9_000);
        let dir = std::env::temp_dir().join(format!("tokentap-overhead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let up = upstream();
        let proxies = start_proxies(up, &dir).await;
        match std::env::var_os("OVERHEAD_TOKENTAP") {
            Some(p) => println!("tokentap: {} (OVERHEAD_TOKENTAP)", Path::new(&p).display()),
            None => println!("tokentap: {} — built for this bench, with the dev-dependencies' features (tokio test-util), not the release build; scripts/overhead.sh measures the release build", tokentap_bin().display()),
        }
        println!("upstream: SSE, {EVENTS} events of {} bytes; paced = 20 ms to the first event, 1 ms apart, written at their instants by a pacer thread (events due within {} µs share a wake-up); upstream threads {}", EVENT.len(), coalesce().as_micros(),
            if UPSTREAM_RT.load(Ordering::Relaxed) { "at real-time priority" } else { "at normal priority (real-time not allowed: events may queue behind the clients)" });
        match post_body() {
            Some(b) => println!("requests: POST with a {}-byte chat-completion body (OVERHEAD_POST=1)", b.len()),
            None => println!("requests: GET, no body (OVERHEAD_POST=1 for POSTs with a chat-completion body)"),
        }
        println!("proxies: {}", proxies.iter().map(|p| p.name).collect::<Vec<_>>().join(", "));

        let pids: Vec<Option<u32>> = std::iter::once(None)
            .chain(proxies.iter().map(|p| p.child.as_ref().map(|c| c.id())))
            .collect();
        // The processes whose CPU counts as the proxy's (nginx's and HAProxy's workers).
        let families: Vec<Vec<u32>> = pids.iter().map(|p| p.map(family).unwrap_or_default()).collect();
        let gen_core = own_core();

        // Latency: interleaved, in an order where every target follows every other one equally
        // often (see `carryover_order`).
        let rounds = env_num("OVERHEAD_ROUNDS").unwrap_or(if quick { 2 } else { 6 });
        let mut targets: Vec<(&str, SocketAddr)> = vec![("direct", up)];
        targets.extend(proxies.iter().map(|p| (p.name, p.addr)));
        let order = carryover_order(targets.len());
        let follow = targets.len().saturating_sub(1).max(1);
        println!("\nadded latency vs direct (µs), paced stream, interleaved so that every target follows every other one equally often; req = client send → upstream has the request");
        println!("{:<10} {:>8} | {:>10} {:>10} | {:>10} {:>10} | {:>10} {:>10} | {:>12}", "proxy", "C", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "req p50", "req p99", "CPU µs/event");
        // Each C > 1 in step, and those in OVERHEAD_SPREAD_C also spread (see `closed_loop`).
        let spread_c = env_list("OVERHEAD_SPREAD_C", &[8, 64]);
        let cells: Vec<(usize, bool)> = env_list("OVERHEAD_LATENCY_C", &[1, 8, 64])
            .into_iter()
            .flat_map(|c| std::iter::once((c, false)).chain((c > 1 && spread_c.contains(&c)).then_some((c, true))))
            .collect();
        for (conc, spread) in cells {
            let cl = if spread { format!("{conc} spread") } else { conc.to_string() };
            let mut acc: Vec<Samples> = targets.iter().map(|_| Samples::default()).collect();
            // A proxy works only on its own requests: its CPU over the whole cell is theirs.
            let cpu0: Vec<u64> = families.iter().map(|f| cpu_ns(f)).collect();
            let gen0 = core_ticks(gen_core);
            let mut after_direct: Vec<Samples> = targets.iter().map(|_| Samples::default()).collect();
            let mut c1_split: Option<Vec<String>> = None;
            if conc == 1 {
                // One at a time: interleave request by request, so drift cancels per request.
                let mut clients: Vec<Conn> = targets.iter().map(|t| Conn::new(t.1)).collect();
                for (i, c) in clients.iter_mut().enumerate() {
                    let mut warm = Samples::default();
                    one(c, "/paced", &mut warm).await;
                    acc[i].events += warm.events;
                }
                for _ in 0..(rounds * 32).div_ceil(follow) {
                    for (k, &i) in order.iter().enumerate() {
                        let prev = order[(k + order.len() - 1) % order.len()];
                        let into = if prev == 0 { &mut after_direct[i] } else { &mut acc[i] };
                        one(&mut clients[i], "/paced", into).await;
                    }
                }
                // Each proxy after direct (its core idle for a whole stream) and after another
                // proxy (busy a moment ago); the table below pools both.
                if targets.len() > 2 {
                    let mut d = acc[0].ttft_us.clone();
                    d.extend(&after_direct[0].ttft_us);
                    let mut dq = acc[0].req_us.clone();
                    dq.extend(&after_direct[0].req_us);
                    let (b, bq) = (pct(&mut d, 0.5), pct(&mut dq, 0.5));
                    let split: Vec<String> = targets.iter().enumerate().skip(1).map(|(i, (name, _))| {
                        let (mut ct, mut cq) = (after_direct[i].ttft_us.clone(), after_direct[i].req_us.clone());
                        let (mut wt, mut wq) = (acc[i].ttft_us.clone(), acc[i].req_us.clone());
                        format!("{name:<10}        1 | after direct: TTFT p50 {:>4.0}, req p50 {:>4.0} | after a proxy: TTFT p50 {:>4.0}, req p50 {:>4.0}",
                            pct(&mut ct, 0.5) - b, pct(&mut cq, 0.5) - bq, pct(&mut wt, 0.5) - b, pct(&mut wq, 0.5) - bq)
                    }).collect();
                    c1_split = Some(split);
                }
                for (a, c) in acc.iter_mut().zip(after_direct) {
                    a.absorb(c);
                }
            }
            for _ in 0..rounds.div_ceil(follow) {
                if conc == 1 {
                    break;
                }
                for &i in &order {
                    let s = closed_loop(targets[i].1, "/paced", conc, (conc * 4).max(16), spread).await;
                    acc[i].absorb(s);
                }
            }
            let cpu_us: Vec<f64> = families.iter().zip(&cpu0).map(|(f, c0)| cpu_ns(f).saturating_sub(*c0) as f64 / 1e3).collect();
            let (mut dt, mut di, mut dr) = (acc[0].ttft_us.clone(), acc[0].itl_us.clone(), acc[0].req_us.clone());
            let base = (pct(&mut dt, 0.5), pct(&mut dt, 0.99), pct(&mut di, 0.5), pct(&mut di, 0.99));
            let req_base = (pct(&mut dr, 0.5), pct(&mut dr, 0.99));
            for (i, (name, _)) in targets.iter().enumerate().skip(1) {
                let (mut t, mut g, mut q) = (acc[i].ttft_us.clone(), acc[i].itl_us.clone(), acc[i].req_us.clone());
                println!(
                    "{name:<10} {cl:>8} | {:>10.0} {:>10.0} | {:>10.0} {:>10.0} | {:>10.0} {:>10.0} | {:>12.2}",
                    pct(&mut t, 0.5) - base.0,
                    pct(&mut t, 0.99) - base.1,
                    pct(&mut g, 0.5) - base.2,
                    pct(&mut g, 0.99) - base.3,
                    pct(&mut q, 0.5) - req_base.0,
                    pct(&mut q, 0.99) - req_base.1,
                    cpu_us[i] / acc[i].events.max(1) as f64
                );
            }
            if std::env::var("OVERHEAD_TAILS").is_ok() {
                for (i, (name, _)) in targets.iter().enumerate() {
                    let (mut t, mut q, mut l, mut r) = (acc[i].ttft_us.clone(), acc[i].req_us.clone(), acc[i].late_us.clone(), acc[i].trip_us.clone());
                    let n = t.len();
                    let tq = [0.9, 0.99, 0.999, 1.0].map(|p| pct(&mut t, p));
                    let slow = q.iter().filter(|v| **v > 1000.0).count();
                    let wakes: std::collections::HashSet<u64> = acc[i].first_wake.iter().copied().collect();
                    let per_wake = acc[i].first_wake.len() as f64 / wakes.len().max(1) as f64;
                    println!("{name:<10} {cl:>8} | tails: TTFT p90 {:.0}, p99 {:.0}, p99.9 {:.0}, max {:.0} µs (absolute, n = {n}); req p99 {:.0}, over 1 ms: {slow}; first event: upstream late p50 {:.0}, p99 {:.0}, trip p50 {:.0}, p99 {:.0}, {per_wake:.2} per pacer wake-up",
                        tq[0], tq[1], tq[2], tq[3], pct(&mut q, 0.99), pct(&mut l, 0.5), pct(&mut l, 0.99), pct(&mut r, 0.5), pct(&mut r, 0.99));
                }
            }
            println!("{:<10} {cl:>8} | {:>10.0} {:>10.0} | {:>10.0} {:>10.0} | {:>10.0} {:>10.0}   (absolute)", "direct", base.0, base.1, base.2, base.3, req_base.0, req_base.1);
            for line in c1_split.into_iter().flatten() {
                println!("{line}");
            }
            // The load generator and the upstream share a core: when it is near full, every
            // target's tail is that core's queue, not the path under test.
            let (busy, irq) = busy_pct(gen0, core_ticks(gen_core));
            println!("{:<10} {cl:>8} | load generator + upstream: {} {busy:.0} % busy over the cell ({irq:.0} % in interrupts)", "",
                gen_core.map_or_else(|| "machine".to_owned(), |c| format!("core {c}")));
            let stuck = STUCK_REQUESTS.swap(0, Ordering::Relaxed);
            if stuck > 0 {
                println!("{:<10} {cl:>8} | {stuck} request(s) unfinished after {STUCK:?} were cut: their samples are missing", "");
            }
        }

        // Throughput and CPU per chunk: each cell in slices, the targets' order rotating per
        // slice, so drift spreads over all of them.
        let slices = if quick { 2 } else { 4 };
        let slice = if quick { 0.75 } else { 1.0 };
        println!("\nfull speed ({slices} interleaved slices of {slice} s per cell, upstream sends all {EVENTS} events at once)");
        println!("{:<10} {:>4} | {:>9} {:>11} | {:>14} {:>10}", "proxy", "C", "req/s", "chunks/s", "CPU µs/chunk", "RSS MiB");
        if std::env::var("OVERHEAD_DEBUG").is_ok() {
            for (p, pid) in proxies.iter().zip(&pids[1..]) {
                eprintln!("{}: pid {pid:?} family {:?}", p.name, pid.map(family));
            }
        }
        for conc in env_list("OVERHEAD_FULL_C", &[64, 256]) {
            // Per target: requests, chunks, seconds, proxy CPU seconds.
            let mut acc = vec![(0u64, 0u64, 0f64, 0f64); targets.len()];
            for r in 0..slices {
                for k in 0..targets.len() {
                    let i = (k + r) % targets.len();
                    let c0 = pids[i].map(cpu_s);
                    let (rq, ch, el) = throughput(targets[i].1, conc, slice).await;
                    let cpu = match (pids[i], c0) {
                        (Some(pid), Some(c0)) => cpu_s(pid) - c0,
                        _ => 0.0,
                    };
                    acc[i].0 += rq;
                    acc[i].1 += ch;
                    acc[i].2 += el;
                    acc[i].3 += cpu;
                }
            }
            for (i, (name, _)) in targets.iter().enumerate() {
                let (rq, ch, el, cpu) = acc[i];
                let (rps, cps) = (rq as f64 / el, ch as f64 / el);
                match pids[i] {
                    None => println!("{name:<10} {conc:>4} | {rps:>9.0} {cps:>11.0} | {:>14} {:>10}", "-", "-"),
                    Some(pid) => {
                        let per_chunk = cpu * 1e6 / (ch as f64).max(1.0);
                        println!("{name:<10} {conc:>4} | {rps:>9.0} {cps:>11.0} | {per_chunk:>14.2} {:>10.1}", rss_kb(pid) as f64 / 1024.0);
                    }
                }
            }
            let stuck = STUCK_REQUESTS.swap(0, Ordering::Relaxed);
            if stuck > 0 {
                println!("{:<10} {conc:>4} | {stuck} request(s) unfinished after {STUCK:?} were cut", "");
            }
        }

        // The memory test: tokentap's resident memory per HTTP/1.1 stream against its bound.
        let mut missed = Vec::new();
        if streams > 0 {
            println!("\nmemory: {streams} concurrent slow streams (one event, then silence)");
            println!("{:<10} | {:>10} {:>12} {:>14}", "proxy", "idle MiB", "loaded MiB", "KiB/stream");
            let bound = stream_kib_bound();
            for p in &proxies {
                let pid = p.child.as_ref().map(|c| c.id()).unwrap_or(0);
                let (idle, loaded) = slow_streams(p.addr, streams, pid).await;
                let per = loaded.saturating_sub(idle) as f64 / streams as f64;
                println!(
                    "{:<10} | {:>10.1} {:>12.1} {:>14.1}",
                    p.name,
                    idle as f64 / 1024.0,
                    loaded as f64 / 1024.0,
                    per
                );
                if let (Some(b), "tokentap") = (bound, p.name) {
                    let verdict = if per <= b { "met" } else { "MISSED" };
                    println!("{:<10} | memory per stream {per:.1} KiB, bound {b} KiB (OVERHEAD_STREAM_KIB): {verdict}", p.name);
                    if per > b {
                        missed.push(p.name);
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        // tokentap alone, a fresh process (freed memory stays with a process, so one that has
        // run the phases above would reuse it): clients over HTTP/2, so the proxy holds one
        // socket per stream and the full 10,000 fit the open-file limit (nginx and HAProxy are
        // set up for HTTP/1.1 here).
        let h2_streams = env_num("OVERHEAD_H2_STREAMS").unwrap_or(10_000);
        if h2_streams > 0 && proxies.iter().any(|p| p.name == "tokentap") {
            let conns = h2_streams.div_ceil(500);
            println!("\nmemory: {h2_streams} concurrent slow streams over HTTP/2 ({conns} client connections, HTTP/1.1 upstream), a fresh tokentap");
            println!("{:<10} | {:>10} {:>12} {:>14} {:>9}", "proxy", "idle MiB", "loaded MiB", "KiB/stream", "streams");
            let p = start_tokentap("tokentap", tokentap_bin(), up, &dir, "tokentap-h2.jsonl");
            wait_up(p.addr).await;
            // Warm it with one request, as the other phases are.
            let _ = closed_loop(p.addr, "/fast", 1, 1, false).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let pid = p.child.as_ref().map(|c| c.id()).unwrap_or(0);
            let (idle, loaded, got) = slow_streams_h2(p.addr, h2_streams, conns, pid).await;
            println!(
                "{:<10} | {:>10.1} {:>12.1} {:>14.1} {:>9}",
                p.name,
                idle as f64 / 1024.0,
                loaded as f64 / 1024.0,
                loaded.saturating_sub(idle) as f64 / got.max(1) as f64,
                got
            );
        }
        drop(proxies);
        if std::env::var("OVERHEAD_KEEP").is_err() { let _ = std::fs::remove_dir_all(&dir); } else { eprintln!("kept {}", dir.display()); }
        if !missed.is_empty() {
            eprintln!("overhead: memory per HTTP/1.1 stream over its bound: {}", missed.join(", "));
            std::process::exit(1);
        }
    });
}

/// The bound on tokentap's memory per HTTP/1.1 slow stream (KiB): `OVERHEAD_STREAM_KIB`,
/// default 12 (below nginx's 13.5, docs/overhead.md); `0` checks nothing.
fn stream_kib_bound() -> Option<f64> {
    match std::env::var("OVERHEAD_STREAM_KIB") {
        Ok(v) => v.trim().parse::<f64>().ok().filter(|b| *b > 0.0),
        Err(_) => Some(12.0),
    }
}
