//! `tokentap sim` on the command line: the engine (and optionally the hop) until SIGTERM or
//! Ctrl-C, when it stops as vLLM does (every stream in flight ends aborted).

use std::path::PathBuf;

use super::{Hold, HopDelay, Pace, Profile, Sim};
use crate::cli::Exit;

#[derive(clap::Args)]
pub struct Args {
    /// Engine listen address.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: String,
    /// Model name served.
    #[arg(long, default_value = "sim-qwen2.5-7b")]
    pub model: String,
    /// Cost-model profile (TOML with the fields of the built-in v100 profile); default built-in.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Add a gateway hop with this admission delay, MS[±JITTER] (e.g. 100±10).
    #[arg(long)]
    pub gateway_hop: Option<HopDelay>,
    /// Where the gateway hop listens.
    #[arg(long, default_value = "127.0.0.1:4000")]
    pub hop_listen: String,
    /// Where the hop relays to (default: the engine). Point it at a tokentap route `behind`
    /// the hop's route to tap both sides of the hop.
    #[arg(long)]
    pub hop_upstream: Option<::http::Uri>,
    /// The hop holds each answer until it has this many bytes, then lets them go in one write
    /// (a buffering proxy); with --hop-flush-ms, whichever comes first. Adds a hop (no delay)
    /// when --gateway-hop is not given.
    #[arg(long, value_name = "BYTES")]
    pub hop_buffer: Option<usize>,
    /// The hop lets held bytes go once the oldest is this old (milliseconds).
    #[arg(long, value_name = "MS")]
    pub hop_flush_ms: Option<f64>,
    /// Act as a reasoning model: this many reasoning tokens before the answer (overrides the
    /// profile's `reasoning_tokens`).
    #[arg(long)]
    pub reasoning_tokens: Option<u32>,
    /// A prefix cache: repeated prompt prefixes skip prefill and are reported as cached tokens
    /// (overrides the profile's `prefix_cache`).
    #[arg(long)]
    pub prefix_cache: bool,
    /// CUDA graphs on: decode steps without the profile's `launch_overhead_ms` (overrides the
    /// profile's `cuda_graphs`).
    #[arg(long)]
    pub cuda_graphs: bool,
    /// The KV cache's size in tokens (overrides the profile's `kv_tokens`).
    #[arg(long)]
    pub kv_tokens: Option<u64>,
    /// Hold KV as vLLM does, growing a token a step, and preempt the newest sequence when the
    /// cache is full (overrides the profile's `preemption`).
    #[arg(long)]
    pub preemption: bool,
    /// A deterministic mock instead of the cost model: FIRST_MS,GAP_MS,TOKENS[,DELTA_BYTES] —
    /// the first token FIRST_MS after the request, then one every GAP_MS, TOKENS in all (fewer
    /// when max_tokens asks), each delta DELTA_BYTES bytes when given; whatever the load. How
    /// late the mock itself ran is on /metrics and on stderr at exit.
    #[arg(long, value_name = "FIRST,GAP,TOKENS[,BYTES]", conflicts_with_all = [
        "profile", "reasoning_tokens", "prefix_cache", "cuda_graphs", "kv_tokens", "preemption",
    ])]
    pub pace: Option<Pace>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Print the built-in profile as TOML and exit.
    #[arg(long)]
    pub print_profile: bool,
}

/// How long a stopped sim waits for its connections to write their aborted answers and close.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Serve the simulated engine (and hop) until SIGTERM or Ctrl-C; then end every answer in
/// flight as vLLM ends it when stopped (`"finish_reason":"abort"`, `[DONE]`) and exit.
pub fn cli(a: Args) -> Exit {
    let profile = match chosen_profile(&a) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if a.print_profile {
        crate::cli::out(&toml::to_string(&profile).unwrap_or_default());
        return Exit::Ok;
    }
    let rt = match crate::cli::runtime() {
        Ok(rt) => rt,
        Err(e) => return e,
    };
    rt.block_on(async move {
        let bind = |s: String| async move {
            crate::listen::bind_str(&s)
                .await
                .map_err(|e| format!("cannot listen on {s}: {e}"))
        };
        let engine = match bind(a.listen.clone()).await {
            Ok(l) => l,
            Err(e) => return Exit::Failed(e),
        };
        let hold = Hold {
            bytes: a.hop_buffer,
            flush_ms: a.hop_flush_ms,
        };
        let delay = a.gateway_hop.or_else(|| {
            hold.is_on().then_some(HopDelay {
                ms: 0.0,
                jitter_ms: 0.0,
            })
        });
        let hop = match delay {
            None => None,
            Some(d) => match bind(a.hop_listen.clone()).await {
                Ok(l) => Some((l, d)),
                Err(e) => return Exit::Failed(e),
            },
        };
        let via = a.hop_upstream.clone();
        let started = match hop {
            Some((l, d)) if hold.is_on() => match start(&a, &profile, engine, None, None).await {
                Ok(mut sim) => {
                    let up = via.clone().unwrap_or_else(|| {
                        format!("http://{}", sim.engine).parse().unwrap_or_default()
                    });
                    sim.start_holding_hop(l, d, hold, up, a.seed).map(|_| sim)
                }
                Err(e) => Err(e),
            },
            hop => start(&a, &profile, engine, hop, via).await,
        };
        match started {
            Ok(sim) => {
                announce(&sim, &profile, &a, hold, delay);
                crate::cli::shutdown_signal().await;
                let paced = sim.paced();
                // As vLLM: every stream in flight ends aborted, then the process is gone.
                sim.stop(STOP_GRACE).await;
                if let Some(p) = paced {
                    eprintln!("tokentap sim: pace {}: {}", p.pace, p.late.summary());
                }
                Exit::Ok
            }
            Err(e) => Exit::Failed(format!("sim: {e}")),
        }
    })
}

/// The engine: paced (`--pace`) or the cost model's `profile`, with its hop when given.
async fn start(
    a: &Args,
    profile: &Profile,
    engine: tokio::net::TcpListener,
    hop: Option<(tokio::net::TcpListener, HopDelay)>,
    via: Option<::http::Uri>,
) -> std::io::Result<Sim> {
    match a.pace {
        Some(p) => Sim::start_paced(p, &a.model, a.seed, engine, hop, via).await,
        None => Sim::start_via(profile.clone(), &a.model, a.seed, engine, hop, via).await,
    }
}

/// The profile: built-in or from `--profile`, with the command line's overrides.
fn chosen_profile(a: &Args) -> Result<Profile, Exit> {
    let mut profile = match &a.profile {
        None => Profile::v100(),
        Some(p) => match std::fs::read_to_string(p)
            .map_err(|e| e.to_string())
            .and_then(|t| toml::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(p) => p,
            Err(e) => return Err(Exit::Usage(format!("config error: {}: {e}", p.display()))),
        },
    };
    if let Some(n) = a.reasoning_tokens {
        profile.reasoning_tokens = n;
    }
    profile.prefix_cache |= a.prefix_cache;
    profile.cuda_graphs |= a.cuda_graphs;
    profile.preemption |= a.preemption;
    if let Some(k) = a.kv_tokens {
        profile.kv_tokens = k;
    }
    Ok(profile)
}

/// Say on stderr what is listening where: the engine, and the hop if there is one.
fn announce(sim: &Sim, profile: &Profile, a: &Args, hold: Hold, delay: Option<HopDelay>) {
    match a.pace {
        Some(p) => eprintln!(
            "tokentap sim: PACED mock (first token {} ms after the request, then one every {} ms, {} tokens{}; no cost model) serving model {:?} on http://{}/v1",
            p.first.as_secs_f64() * 1000.0,
            p.gap.as_secs_f64() * 1000.0,
            p.tokens,
            p.delta_bytes.map_or(String::new(), |b| format!(", {b}-byte deltas")),
            a.model,
            sim.engine
        ),
        None => eprintln!(
            "tokentap sim: SIMULATED engine ({}) serving model {:?} on http://{}/v1",
            profile.name, a.model, sim.engine
        ),
    }
    if let (Some(h), Some(d)) = (sim.hop, delay) {
        let held = match (hold.bytes, hold.flush_ms) {
            (None, None) => String::new(),
            (b, ms) => format!(
                ", holding answers until {} bytes or {} ms",
                b.map_or("∞".into(), |b| b.to_string()),
                ms.map_or("∞".into(), |m| m.to_string())
            ),
        };
        eprintln!(
            "tokentap sim: simulated gateway hop ({}±{} ms{held}) on http://{h}/v1 → {}",
            d.ms,
            d.jitter_ms,
            a.hop_upstream
                .as_ref()
                .map_or_else(|| format!("http://{}", sim.engine), |u| u.to_string())
        );
    }
}
