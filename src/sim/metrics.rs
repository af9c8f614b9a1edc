//! The simulated engine's `/metrics`: its own `tokentap_sim_*` lines and vLLM's names for the
//! same state (KV-cache usage, running, waiting, preemptions, prefix-cache queries and hits,
//! estimated FLOPs and bytes per GPU, the KV cache's size in `vllm:cache_config_info`), so bench
//! scrapes the sim as it scrapes vLLM.

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use super::engine::{EngineStats, Profile};

/// The page, in Prometheus' text format.
pub fn page(profile: &Profile, model: &str, s: &EngineStats) -> String {
    let kv = s.kv_used.load(Relaxed) as f64 / profile.kv_tokens.max(1) as f64;
    let (running, waiting) = (s.running.load(Relaxed), s.waiting.load(Relaxed));
    let mut text = format!(
        "# simulated engine ({})\ntokentap_sim_requests_running {running}\ntokentap_sim_requests_waiting {waiting}\ntokentap_sim_kv_cache_usage_perc {kv:.4}\ntokentap_sim_requests_finished_total {}\n",
        profile.name,
        s.finished.load(Relaxed),
    );
    let model = crate::prom::escape_label(model);
    let labels = format!("{{engine=\"0\",model_name=\"{model}\"}}");
    let lines: [(&str, &str, &str, f64); 9] = [
        (
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            running as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            waiting as f64,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            kv,
        ),
        (
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            s.preemptions.load(Relaxed) as f64,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_queries.load(Relaxed) as f64,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            s.prefix_hits.load(Relaxed) as f64,
        ),
        (
            "vllm:estimated_flops_per_gpu_total",
            "counter",
            "Estimated number of floating point operations per GPU (simulated cost model).",
            s.flops.load(Relaxed) as f64,
        ),
        (
            "vllm:estimated_read_bytes_per_gpu_total",
            "counter",
            "Estimated number of bytes read from memory per GPU (simulated cost model).",
            s.read_bytes.load(Relaxed) as f64,
        ),
        (
            "vllm:estimated_write_bytes_per_gpu_total",
            "counter",
            "Estimated number of bytes written to memory per GPU (simulated cost model).",
            s.write_bytes.load(Relaxed) as f64,
        ),
    ];
    for (name, kind, help, v) in lines {
        let _ = write!(
            text,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{labels} {v:?}\n"
        );
    }
    let (blocks, block_size) = kv_blocks(profile.kv_tokens);
    let _ = write!(
        text,
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"{block_size}\",engine=\"0\",num_gpu_blocks=\"{blocks}\"}} 1.0\n"
    );
    text
}

/// The KV cache as vLLM states it: (`num_gpu_blocks`, `block_size`), whose product is the
/// profile's `kv_tokens` exactly: vLLM's default 16-token blocks when they divide it, else
/// blocks of one token.
fn kv_blocks(kv_tokens: u64) -> (u64, u64) {
    if kv_tokens % 16 == 0 {
        (kv_tokens / 16, 16)
    } else {
        (kv_tokens, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_config_states_the_profiles_kv_tokens() {
        for kv in [16_384, 200_000, 3_201, 0] {
            let (blocks, size) = kv_blocks(kv);
            assert_eq!(blocks * size, kv);
        }
        let profile = Profile {
            kv_tokens: 4000,
            ..Profile::v100()
        };
        let page = page(&profile, "m", &EngineStats::default());
        assert!(page.contains(
            "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"250\"} 1.0\n"
        ));
    }
}
