//! The simulated engine: a continuous-batching cost model driven by one loop.
//!
//! Each iteration either runs one prefill step for newly admitted prompts (cost grows with the
//! prompt tokens and the number of prompts) or one decode step that produces a token for every
//! running sequence (cost grows slowly with the batch). Admission is bounded by a batch limit and
//! a KV-cache token budget; requests queue when either is full. Steps run on an absolute
//! schedule, so timer overshoot never accumulates. A SIMULATION: it reproduces the shape of the
//! write-up's measurements, not any particular GPU.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
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

    /// Send the next token (with `scheduled` if it is the first); true when it was the last.
    fn emit(&mut self, scheduled: Option<Instant>) -> bool {
        let index = self.produced;
        self.produced += 1;
        let last = self.produced >= self.job.output_tokens;
        let _ = self.job.tx.try_send(Out::Token {
            index,
            last,
            scheduled: scheduled.filter(|_| index == 0),
        });
        last
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
    let mut engine = Engine {
        pre: profile.preemption,
        profile,
        stats,
        waiting: VecDeque::new(),
        running: Vec::new(),
        kv_used: 0,
        clock: Instant::now(),
    };
    loop {
        if !engine.take_arrivals(&mut jobs).await {
            return;
        }
        engine.drop_abandoned();
        let (admitted, prefill_tokens) = engine.admit();
        // The admitted run from their prefill on, as vLLM counts them.
        engine.publish_queue(admitted.len());
        if !admitted.is_empty() {
            engine.prefill(admitted, prefill_tokens).await;
        } else if !engine.running.is_empty() {
            engine.preempt();
            if engine.running.is_empty() {
                continue;
            }
            engine.decode().await;
        } else if let Some(s) = engine.waiting.pop_front() {
            // Nothing running and the head does not fit: it can never fit. Refuse it.
            drop(s);
        }
        engine.publish_queue(0);
    }
}

/// The engine loop's state between steps.
struct Engine {
    profile: Profile,
    /// The profile's `preemption`.
    pre: bool,
    stats: std::sync::Arc<EngineStats>,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    /// KV-cache tokens held by the running sequences.
    kv_used: u64,
    /// When the current step ends: steps follow each other on this schedule.
    clock: Instant,
}

impl Engine {
    /// Queue new arrivals; block only when idle. False when every sender is gone.
    async fn take_arrivals(&mut self, jobs: &mut mpsc::Receiver<Job>) -> bool {
        if self.waiting.is_empty() && self.running.is_empty() {
            match jobs.recv().await {
                Some(job) => self.waiting.push_back(Seq { job, produced: 0 }),
                None => return false,
            }
            self.clock = Instant::now();
        }
        while let Ok(job) = jobs.try_recv() {
            self.waiting.push_back(Seq { job, produced: 0 });
        }
        true
    }

    /// Drop sequences whose client went away (frees their cache at once, like an abort).
    fn drop_abandoned(&mut self) {
        let (pre, kv_used) = (self.pre, &mut self.kv_used);
        self.waiting.retain(|s| !s.job.tx.is_closed());
        self.running.retain(|s| {
            let keep = !s.job.tx.is_closed();
            if !keep {
                *kv_used -= s.held(pre);
            }
            keep
        });
    }

    /// Admit what fits: batch limit, KV budget, prefill token budget (FIFO, no skipping).
    /// Returns the admitted sequences and their prefill tokens.
    fn admit(&mut self) -> (Vec<Seq>, u64) {
        let (p, pre) = (&self.profile, self.pre);
        let mut admitted: Vec<Seq> = Vec::new();
        let mut prefill_tokens = 0;
        while let Some(s) = self.waiting.front() {
            let fits = self.running.len() + admitted.len() < p.max_batch
                && self.kv_used + s.admit_need(pre) <= p.kv_tokens
                && (admitted.is_empty()
                    || prefill_tokens + s.prefill_work() <= p.max_prefill_tokens);
            if !fits {
                break;
            }
            let Some(s) = self.waiting.pop_front() else {
                break;
            };
            self.kv_used += s.admit_need(pre);
            prefill_tokens += s.prefill_work();
            admitted.push(s);
        }
        (admitted, prefill_tokens)
    }

    /// Prefill step: produces each admitted sequence's first token (a preempted one's next).
    /// Steps follow each other on the schedule alone (a late timer adds nothing to the next
    /// step); it restarts from the clock only after the engine was idle.
    async fn prefill(&mut self, admitted: Vec<Seq>, prefill_tokens: u64) {
        let scheduled = self.clock;
        self.clock = scheduled + self.profile.prefill_cost(prefill_tokens, admitted.len());
        let cached: u64 = admitted.iter().map(|s| s.job.cached_tokens).sum();
        self.stats.work(&self.profile, prefill_tokens, cached);
        tokio::time::sleep_until(self.clock).await;
        for mut s in admitted {
            if s.emit(Some(scheduled)) {
                self.kv_used -= s.held(self.pre);
                self.stats.finished.fetch_add(1, Relaxed);
            } else {
                self.running.push(s);
            }
        }
    }

    /// With preemption, each sequence grows a token: what does not fit is preempted, newest
    /// first, back to the head of the queue.
    fn preempt(&mut self) {
        while self.pre
            && !self.running.is_empty()
            && self.kv_used + self.running.len() as u64 > self.profile.kv_tokens
        {
            if let Some(s) = self.running.pop() {
                self.kv_used -= s.held(self.pre);
                self.waiting.push_front(s);
                self.stats.preemptions.fetch_add(1, Relaxed);
            }
        }
    }

    /// Decode step: one token for every running sequence.
    async fn decode(&mut self) {
        let pre = self.pre;
        self.clock += self.profile.step_cost(self.running.len());
        let context: u64 = self.running.iter().map(|s| s.held(true)).sum();
        self.stats
            .work(&self.profile, self.running.len() as u64, context);
        self.kv_used += if pre { self.running.len() as u64 } else { 0 };
        wait_until(self.clock).await;
        let (kv_used, stats) = (&mut self.kv_used, &self.stats);
        self.running.retain_mut(|s| {
            let last = s.emit(None);
            if last {
                *kv_used -= s.held(pre);
                stats.finished.fetch_add(1, Relaxed);
            }
            !last
        });
    }

    /// The running, queue and KV figures for `/metrics`: `prefilling` admitted sequences run
    /// besides `running`.
    fn publish_queue(&self, prefilling: usize) {
        let running = self.running.len() + prefilling;
        self.stats.running.store(running as u64, Relaxed);
        self.stats.waiting.store(self.waiting.len() as u64, Relaxed);
        self.stats.kv_used.store(self.kv_used, Relaxed);
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
