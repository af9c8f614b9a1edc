//! The simulated engine: a continuous-batching cost model driven by one loop.
//!
//! Each iteration either runs one prefill step for newly admitted prompts (cost grows with the
//! prompt tokens and the number of prompts) or one decode step that produces a token for every
//! running sequence (cost grows slowly with the batch). Admission is bounded by a batch limit and
//! a KV-cache token budget; requests queue when either is full. Steps run on an absolute
//! schedule, so timer overshoot never accumulates. A SIMULATION: it reproduces the shape of the
//! write-up's measurements, not any particular GPU.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Cost-model parameters. All times in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Profile {
    pub name: String,
    /// Fixed cost of a prefill step.
    pub prefill_base_ms: f64,
    /// Cost per prompt token in a prefill step.
    pub prefill_per_token_ms: f64,
    /// Cost per prompt in a prefill step (scheduling, sampling, output).
    pub prefill_per_seq_ms: f64,
    /// Fixed cost of a decode step (weights streamed once per step).
    pub step_base_ms: f64,
    /// Extra decode-step cost per running sequence.
    pub step_per_seq_ms: f64,
    /// Most sequences running at once.
    pub max_batch: usize,
    /// Most prompt tokens in one prefill step.
    pub max_prefill_tokens: u64,
    /// KV-cache budget in tokens (prompt + generated, per running sequence).
    pub kv_tokens: u64,
    /// Longest prompt + output accepted.
    pub max_model_len: u64,
    /// A reasoning model: this many reasoning tokens come before the answer (at most all but
    /// one of a request's output). 0: no reasoning.
    pub reasoning_tokens: u32,
    /// A prefix cache: prompt tokens whose 16-token blocks an earlier prompt began with skip
    /// prefill and are reported as cached (vLLM's automatic prefix caching).
    pub prefix_cache: bool,
    /// The part of `step_base_ms` that is kernel launches, paid on every decode step when the
    /// engine runs eagerly (the write-up's V100 run: CUDA graphs off).
    pub launch_overhead_ms: f64,
    /// CUDA graphs on: a decode step is replayed as one graph, without `launch_overhead_ms`.
    pub cuda_graphs: bool,
    /// Hold KV for what a sequence has so far (prompt + generated), growing a token a step, as
    /// vLLM does; when a decode step does not fit, preempt the newest sequence (its KV freed;
    /// it waits at the head of the queue and recomputes). Off: a sequence reserves its prompt +
    /// output at admission and is never preempted.
    pub preemption: bool,
    /// The model's parameters, billions (for the estimated FLOPs and bytes on `/metrics`).
    pub params_b: f64,
    /// GPUs the model is split over (tensor parallel): the estimates are per GPU.
    pub gpus: u32,
    /// Bytes per weight (2: 16-bit).
    pub weight_bytes: f64,
    /// KV-cache bytes per token, all layers (Qwen2.5-7B: 28 layers × 2 × 4 KV heads × 128 × 2 B).
    pub kv_bytes_per_token: f64,
}

impl Default for Profile {
    fn default() -> Self {
        Profile::v100()
    }
}

impl Profile {
    /// Shaped on the write-up's 4× V100 / Qwen2.5-7B-Instruct / TP=4 results: TTFT at C=1 about
    /// 73–116 ms by prompt length, about 165 ms (short prompts) to 570 ms (long prompts) at C=8;
    /// 31–38 tok/s per stream, falling slightly with concurrency.
    pub fn v100() -> Profile {
        Profile {
            name: "v100-qwen2.5-7b-tp4".into(),
            prefill_base_ms: 56.0,
            prefill_per_token_ms: 0.052,
            prefill_per_seq_ms: 10.0,
            step_base_ms: 26.0,
            step_per_seq_ms: 0.85,
            max_batch: 256,
            max_prefill_tokens: 16384,
            kv_tokens: 200_000,
            max_model_len: 8192,
            reasoning_tokens: 0,
            prefix_cache: false,
            launch_overhead_ms: 4.0,
            cuda_graphs: false,
            preemption: false,
            params_b: 7.6,
            gpus: 4,
            weight_bytes: 2.0,
            kv_bytes_per_token: 57344.0,
        }
    }

    /// The V100 profile with a KV cache of 16,384 tokens and vLLM's preemption: a sweep of long
    /// prompts fills it, queues and preempts.
    pub fn v100_small_kv() -> Profile {
        Profile {
            name: "v100-qwen2.5-7b-tp4-small-kv".into(),
            kv_tokens: 16_384,
            preemption: true,
            ..Profile::v100()
        }
    }

    /// No cost at all: for measuring a client's or a proxy's own overhead.
    pub fn instant() -> Profile {
        Profile {
            name: "instant".into(),
            prefill_base_ms: 0.0,
            prefill_per_token_ms: 0.0,
            prefill_per_seq_ms: 0.0,
            step_base_ms: 0.0,
            step_per_seq_ms: 0.0,
            ..Profile::v100()
        }
    }

    fn prefill_cost(&self, tokens: u64, seqs: usize) -> Duration {
        ms(self.prefill_base_ms
            + self.prefill_per_token_ms * tokens as f64
            + self.prefill_per_seq_ms * seqs as f64)
    }

    fn step_cost(&self, seqs: usize) -> Duration {
        let launches = if self.cuda_graphs {
            self.launch_overhead_ms.min(self.step_base_ms)
        } else {
            0.0
        };
        ms(self.step_base_ms - launches + self.step_per_seq_ms * seqs as f64)
    }
}

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v.max(0.0) / 1000.0)
}

/// What the engine sends back for one sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// One generated token (its index); `last` when the sequence is finished. The first one
    /// says when its sequence was scheduled (its prefill step began).
    Token {
        index: u32,
        last: bool,
        scheduled: Option<Instant>,
    },
}

/// A generation request.
pub struct Job {
    pub prompt_tokens: u64,
    /// Of those, served by the prefix cache: no prefill work.
    pub cached_tokens: u64,
    pub output_tokens: u32,
    pub tx: mpsc::Sender<Out>,
}

impl Job {
    fn uncached(&self) -> u64 {
        self.prompt_tokens.saturating_sub(self.cached_tokens)
    }
}

struct Seq {
    job: Job,
    produced: u32,
}

impl Seq {
    /// KV held while running: with preemption, what it has so far; without, all it will need.
    fn held(&self, preemption: bool) -> u64 {
        if preemption {
            self.job.prompt_tokens + u64::from(self.produced)
        } else {
            self.job.prompt_tokens + u64::from(self.job.output_tokens)
        }
    }

    /// KV to admit it: with preemption, its context and the token its prefill makes.
    fn admit_need(&self, preemption: bool) -> u64 {
        self.held(preemption) + u64::from(preemption)
    }

    /// Prefill work: the uncached prompt, and what a preempted sequence had generated.
    fn prefill_work(&self) -> u64 {
        self.job.uncached() + u64::from(self.produced)
    }
}

/// Live counters for the sim's `/metrics`.
#[derive(Default)]
pub struct EngineStats {
    pub running: std::sync::atomic::AtomicU64,
    pub waiting: std::sync::atomic::AtomicU64,
    pub kv_used: std::sync::atomic::AtomicU64,
    pub finished: std::sync::atomic::AtomicU64,
    pub preemptions: std::sync::atomic::AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and found there.
    pub prefix_queries: std::sync::atomic::AtomicU64,
    pub prefix_hits: std::sync::atomic::AtomicU64,
    /// Estimated per-GPU work so far (whole FLOPs and bytes).
    pub flops: std::sync::atomic::AtomicU64,
    pub read_bytes: std::sync::atomic::AtomicU64,
    pub write_bytes: std::sync::atomic::AtomicU64,
}

impl EngineStats {
    /// Add one step's estimated per-GPU work.
    fn work(&self, p: &Profile, tokens: u64, kv_read_tokens: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let gpus = f64::from(p.gpus.max(1));
        let flops = 2.0 * p.params_b * 1e9 * tokens as f64 / gpus;
        let read = (p.params_b * 1e9 * p.weight_bytes
            + p.kv_bytes_per_token * kv_read_tokens as f64)
            / gpus;
        let write = p.kv_bytes_per_token * tokens as f64 / gpus;
        self.flops.fetch_add(flops as u64, Relaxed);
        self.read_bytes.fetch_add(read as u64, Relaxed);
        self.write_bytes.fetch_add(write as u64, Relaxed);
    }
}

/// Sleep until `t`, without a timer round-trip (≈1 ms granularity) when `t` has passed: a
/// zero-cost profile must add nothing.
async fn wait_until(t: Instant) {
    if t > Instant::now() {
        tokio::time::sleep_until(t).await;
    } else {
        tokio::task::yield_now().await;
    }
}

/// Run the engine loop until every sender of `jobs` is gone.
pub async fn run(
    profile: Profile,
    mut jobs: mpsc::Receiver<Job>,
    stats: std::sync::Arc<EngineStats>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut waiting: VecDeque<Seq> = VecDeque::new();
    let mut running: Vec<Seq> = Vec::new();
    let mut kv_used: u64 = 0;
    let mut clock = Instant::now();
    loop {
        // Take new arrivals; block only when idle.
        if waiting.is_empty() && running.is_empty() {
            match jobs.recv().await {
                Some(j) => waiting.push_back(Seq {
                    job: j,
                    produced: 0,
                }),
                None => return,
            }
            clock = Instant::now();
        }
        while let Ok(j) = jobs.try_recv() {
            waiting.push_back(Seq {
                job: j,
                produced: 0,
            });
        }
        // Drop sequences whose client went away (frees their cache at once, like an abort).
        let pre = profile.preemption;
        waiting.retain(|s| !s.job.tx.is_closed());
        running.retain(|s| {
            let keep = !s.job.tx.is_closed();
            if !keep {
                kv_used -= s.held(pre);
            }
            keep
        });

        // Admit what fits: batch limit, KV budget, prefill token budget (FIFO, no skipping).
        let mut admitted: Vec<Seq> = Vec::new();
        let mut prefill_tokens = 0;
        while let Some(s) = waiting.front() {
            let fits = running.len() + admitted.len() < profile.max_batch
                && kv_used + s.admit_need(pre) <= profile.kv_tokens
                && (admitted.is_empty()
                    || prefill_tokens + s.prefill_work() <= profile.max_prefill_tokens);
            if !fits {
                break;
            }
            let Some(s) = waiting.pop_front() else { break };
            kv_used += s.admit_need(pre);
            prefill_tokens += s.prefill_work();
            admitted.push(s);
        }
        stats.waiting.store(waiting.len() as u64, Relaxed);
        stats.kv_used.store(kv_used, Relaxed);

        if !admitted.is_empty() {
            // Prefill step: produces each admitted sequence's first token (a preempted one's
            // next). Steps follow each other on the schedule alone (a late timer adds nothing to
            // the next step); it restarts from the clock only after the engine was idle.
            let scheduled = clock;
            clock = scheduled + profile.prefill_cost(prefill_tokens, admitted.len());
            let cached: u64 = admitted.iter().map(|s| s.job.cached_tokens).sum();
            stats.work(&profile, prefill_tokens, cached);
            tokio::time::sleep_until(clock).await;
            for mut s in admitted {
                let index = s.produced;
                s.produced += 1;
                let last = s.produced >= s.job.output_tokens;
                let _ = s.job.tx.try_send(Out::Token {
                    index,
                    last,
                    scheduled: (index == 0).then_some(scheduled),
                });
                if last {
                    kv_used -= s.held(pre);
                    stats.finished.fetch_add(1, Relaxed);
                } else {
                    running.push(s);
                }
            }
        } else if !running.is_empty() {
            // With preemption, each sequence grows a token: what does not fit is preempted,
            // newest first, back to the head of the queue.
            while pre && !running.is_empty() && kv_used + running.len() as u64 > profile.kv_tokens {
                if let Some(s) = running.pop() {
                    kv_used -= s.held(pre);
                    waiting.push_front(s);
                    stats.preemptions.fetch_add(1, Relaxed);
                }
            }
            if running.is_empty() {
                continue;
            }
            // Decode step: one token for every running sequence.
            clock += profile.step_cost(running.len());
            let context: u64 = running.iter().map(|s| s.held(true)).sum();
            stats.work(&profile, running.len() as u64, context);
            kv_used += if pre { running.len() as u64 } else { 0 };
            wait_until(clock).await;
            running.retain_mut(|s| {
                let index = s.produced;
                s.produced += 1;
                let last = s.produced >= s.job.output_tokens;
                let _ = s.job.tx.try_send(Out::Token {
                    index,
                    last,
                    scheduled: None,
                });
                if last {
                    kv_used -= s.held(pre);
                    stats.finished.fetch_add(1, Relaxed);
                }
                !last
            });
        } else if !waiting.is_empty() {
            // Nothing running and the head does not fit: it can never fit. Refuse it.
            if let Some(s) = waiting.pop_front() {
                drop(s);
            }
        }
        stats.running.store(running.len() as u64, Relaxed);
        stats.waiting.store(waiting.len() as u64, Relaxed);
        stats.kv_used.store(kv_used, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// TTFT and per-token time of `c` identical concurrent requests, on paused (virtual) time.
    async fn measure(c: usize, prompt: u64, out: u32) -> (f64, f64) {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(run(Profile::v100(), rx, Arc::new(EngineStats::default())));
        let t0 = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..c {
            let (otx, mut orx) = mpsc::channel(out as usize + 1);
            tx.send(Job {
                prompt_tokens: prompt,
                cached_tokens: 0,
                output_tokens: out,
                tx: otx,
            })
            .await
            .unwrap();
            handles.push(tokio::spawn(async move {
                let mut first = None;
                let mut last = t0;
                while let Some(Out::Token { last: done, .. }) = orx.recv().await {
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = now;
                    if done {
                        break;
                    }
                }
                let first = first.unwrap();
                let ttft = (first - t0).as_secs_f64() * 1000.0;
                let tpot = (last - first).as_secs_f64() * 1000.0 / f64::from(out - 1);
                (ttft, tpot)
            }));
        }
        let mut ttft = 0.0f64;
        let mut tpot = 0.0f64;
        for h in handles {
            let (a, b) = h.await.unwrap();
            ttft = ttft.max(a);
            tpot = tpot.max(b);
        }
        (ttft, tpot)
    }

    #[tokio::test(start_paused = true)]
    async fn ttft_grows_with_prompt_and_concurrency_decode_stays_flat() {
        let (short1, tpot1) = measure(1, 127, 64).await;
        let (long1, _) = measure(1, 1019, 64).await;
        let (short8, tpot8) = measure(8, 127, 64).await;
        let (long8, _) = measure(8, 1019, 64).await;
        assert!(long1 > short1 && long8 > short8, "prompt length costs TTFT");
        assert!(
            short8 > short1 * 1.5 && long8 > long1 * 3.0,
            "concurrency costs TTFT"
        );
        assert!(
            (60.0..130.0).contains(&short1) && (90.0..140.0).contains(&long1),
            "{short1} {long1}"
        );
        assert!(
            (130.0..220.0).contains(&short8) && (450.0..700.0).contains(&long8),
            "{short8} {long8}"
        );
        // Decode: 31–38 tok/s per stream, barely moving with the batch.
        let (r1, r8) = (1000.0 / tpot1, 1000.0 / tpot8);
        assert!(
            (34.0..40.0).contains(&r1) && (30.0..36.0).contains(&r8) && r8 < r1,
            "{r1} {r8}"
        );
    }

    #[test]
    fn cuda_graphs_take_the_launches_off_a_decode_step_only() {
        let eager = Profile::v100();
        let graphs = Profile {
            cuda_graphs: true,
            ..Profile::v100()
        };
        for seqs in [1, 8] {
            let saved = eager.step_cost(seqs).as_secs_f64() - graphs.step_cost(seqs).as_secs_f64();
            assert!((saved - 0.004).abs() < 1e-6, "{saved}");
        }
        assert_eq!(eager.prefill_cost(500, 2), graphs.prefill_cost(500, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn kv_budget_queues_requests() {
        let p = Profile {
            kv_tokens: 1000,
            ..Profile::v100()
        };
        let (tx, rx) = mpsc::channel(8);
        let stats = Arc::new(EngineStats::default());
        tokio::spawn(run(p, rx, stats.clone()));
        let mut rxs = Vec::new();
        for _ in 0..3 {
            let (otx, orx) = mpsc::channel(128);
            tx.send(Job {
                prompt_tokens: 400,
                cached_tokens: 0,
                output_tokens: 50,
                tx: otx,
            })
            .await
            .unwrap();
            rxs.push(orx);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        // 450 tokens each: two fit in 1000, the third waits.
        assert_eq!(stats.running.load(std::sync::atomic::Ordering::Relaxed), 2);
        assert_eq!(stats.waiting.load(std::sync::atomic::Ordering::Relaxed), 1);
        drop(rxs);
    }
}
