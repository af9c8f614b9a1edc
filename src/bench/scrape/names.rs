//! The engine and GPU metrics bench knows by name: vLLM (current and older names), SGLang and
//! NVIDIA's DCGM exporter, each with its kind, how a page's series fold into one value, and
//! the figure it feeds. Checked against vLLM 0.32's captured page
//! (`tests/fixtures/metrics/vllm-0.32.txt`) and the projects' documentation (docs/bench.md).

/// The figure a known metric feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// KV-cache usage, a fraction (1 = full).
    KvUsage,
    /// The KV cache's size, tokens: `num_gpu_blocks` × `block_size` of vLLM's
    /// `vllm:cache_config_info` (an info gauge: the figures are its labels).
    KvCapacity,
    Running,
    Waiting,
    Preemptions,
    PrefixQueries,
    PrefixHits,
    /// SGLang's own hit-rate gauge (it has no query/hit counters).
    PrefixHitRate,
    AdmissionRejections,
    FlopsPerGpu,
    ReadBytesPerGpu,
    WriteBytesPerGpu,
    PromptTokens,
    GenerationTokens,
    /// DCGM: GPU utilisation, percent.
    GpuUtil,
    /// DCGM: fraction of cycles the memory interface is busy.
    DramActive,
    /// DCGM: power draw, watts.
    Power,
    /// DCGM: framebuffer memory used, MiB.
    FbUsed,
}

/// How a metric's series (label sets, engines, GPUs) fold into one value per scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    Sum,
    Mean,
}

/// Counter (a rate over a cell) or gauge (mean, peak, p95 over a cell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Counter,
    Gauge,
}

#[derive(Debug, Clone, Copy)]
pub struct Known {
    pub name: &'static str,
    pub source: &'static str,
    pub kind: Kind,
    pub fold: Fold,
    pub role: Role,
    /// A name an engine used before; the current one wins when both appear.
    pub old: bool,
}

const fn k(
    name: &'static str,
    source: &'static str,
    kind: Kind,
    fold: Fold,
    role: Role,
    old: bool,
) -> Known {
    Known {
        name,
        source,
        kind,
        fold,
        role,
        old,
    }
}

use Fold::{Mean, Sum};
use Kind::{Counter, Gauge};

/// Every known name. Per-GPU estimates fold by mean (engines of one model on their own GPUs);
/// requests and power add up.
pub const KNOWN: &[Known] = &[
    k(
        "vllm:kv_cache_usage_perc",
        "vllm",
        Gauge,
        Mean,
        Role::KvUsage,
        false,
    ),
    k(
        "vllm:gpu_cache_usage_perc",
        "vllm",
        Gauge,
        Mean,
        Role::KvUsage,
        true,
    ),
    k(
        CACHE_CONFIG_INFO,
        "vllm",
        Gauge,
        Mean,
        Role::KvCapacity,
        false,
    ),
    k(
        "vllm:num_requests_running",
        "vllm",
        Gauge,
        Sum,
        Role::Running,
        false,
    ),
    k(
        "vllm:num_requests_waiting",
        "vllm",
        Gauge,
        Sum,
        Role::Waiting,
        false,
    ),
    k(
        "vllm:num_preemptions_total",
        "vllm",
        Counter,
        Sum,
        Role::Preemptions,
        false,
    ),
    k(
        "vllm:prefix_cache_queries_total",
        "vllm",
        Counter,
        Sum,
        Role::PrefixQueries,
        false,
    ),
    k(
        "vllm:prefix_cache_hits_total",
        "vllm",
        Counter,
        Sum,
        Role::PrefixHits,
        false,
    ),
    k(
        "vllm:gpu_prefix_cache_queries_total",
        "vllm",
        Counter,
        Sum,
        Role::PrefixQueries,
        true,
    ),
    k(
        "vllm:gpu_prefix_cache_hits_total",
        "vllm",
        Counter,
        Sum,
        Role::PrefixHits,
        true,
    ),
    k(
        "vllm:admission_rejections_total",
        "vllm",
        Counter,
        Sum,
        Role::AdmissionRejections,
        false,
    ),
    k(
        "vllm:estimated_flops_per_gpu_total",
        "vllm",
        Counter,
        Mean,
        Role::FlopsPerGpu,
        false,
    ),
    k(
        "vllm:estimated_read_bytes_per_gpu_total",
        "vllm",
        Counter,
        Mean,
        Role::ReadBytesPerGpu,
        false,
    ),
    k(
        "vllm:estimated_write_bytes_per_gpu_total",
        "vllm",
        Counter,
        Mean,
        Role::WriteBytesPerGpu,
        false,
    ),
    k(
        "vllm:prompt_tokens_total",
        "vllm",
        Counter,
        Sum,
        Role::PromptTokens,
        false,
    ),
    k(
        "vllm:generation_tokens_total",
        "vllm",
        Counter,
        Sum,
        Role::GenerationTokens,
        false,
    ),
    k(
        "sglang:num_running_reqs",
        "sglang",
        Gauge,
        Sum,
        Role::Running,
        false,
    ),
    k(
        "sglang:num_queue_reqs",
        "sglang",
        Gauge,
        Sum,
        Role::Waiting,
        false,
    ),
    k(
        "sglang:token_usage",
        "sglang",
        Gauge,
        Mean,
        Role::KvUsage,
        false,
    ),
    k(
        "sglang:cache_hit_rate",
        "sglang",
        Gauge,
        Mean,
        Role::PrefixHitRate,
        false,
    ),
    k(
        "sglang:prompt_tokens_total",
        "sglang",
        Counter,
        Sum,
        Role::PromptTokens,
        false,
    ),
    k(
        "sglang:generation_tokens_total",
        "sglang",
        Counter,
        Sum,
        Role::GenerationTokens,
        false,
    ),
    k(
        "DCGM_FI_DEV_GPU_UTIL",
        "dcgm",
        Gauge,
        Mean,
        Role::GpuUtil,
        false,
    ),
    k(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "dcgm",
        Gauge,
        Mean,
        Role::DramActive,
        false,
    ),
    k(
        "DCGM_FI_DEV_POWER_USAGE",
        "dcgm",
        Gauge,
        Sum,
        Role::Power,
        false,
    ),
    k(
        "DCGM_FI_DEV_FB_USED",
        "dcgm",
        Gauge,
        Sum,
        Role::FbUsed,
        false,
    ),
];

/// vLLM's info gauge of its cache config: value 1, the figures in its labels.
pub const CACHE_CONFIG_INFO: &str = "vllm:cache_config_info";

/// The value a sample feeds its figure: its own, but for `vllm:cache_config_info`, whose
/// figure is the KV cache's size in tokens, `num_gpu_blocks` × `block_size` (none before vLLM
/// has sized the cache: `num_gpu_blocks="None"`).
pub fn value_of(s: &super::prom::Sample) -> Option<f64> {
    if s.name != CACHE_CONFIG_INFO {
        return Some(s.value);
    }
    let label = |k: &str| {
        s.labels
            .iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.parse::<u64>().ok())
    };
    let tokens = label("num_gpu_blocks")?.checked_mul(label("block_size")?)?;
    Some(tokens as f64)
}

/// The known metric of this name.
pub fn known(name: &str) -> Option<&'static Known> {
    KNOWN.iter().find(|k| k.name == name)
}

/// True when a page is an inference engine's (vLLM's or SGLang's): what makes the target's
/// own `/metrics` worth scraping by default.
pub fn is_engine_page(page: &super::prom::Page) -> bool {
    page.samples
        .iter()
        .any(|s| s.name.starts_with("vllm:") || s.name.starts_with("sglang:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_current_vllm_name_is_on_the_captured_page() {
        let p = super::super::prom::parse(include_str!(
            "../../../tests/fixtures/metrics/vllm-0.32.txt"
        ));
        for k in KNOWN.iter().filter(|k| k.source == "vllm" && !k.old) {
            assert!(p.samples.iter().any(|s| s.name == k.name), "{}", k.name);
            let declared = p.kind_of(k.name);
            let want = match k.kind {
                Kind::Counter => super::super::prom::Kind::Counter,
                Kind::Gauge => super::super::prom::Kind::Gauge,
            };
            assert_eq!(declared, want, "{}", k.name);
        }
        assert!(is_engine_page(&p));
        // The KV cache's size: 1,024 blocks of 128 tokens (the page's own
        // kv_cache_size_tokens says the same).
        let info = p.samples.iter().find(|s| s.name == CACHE_CONFIG_INFO);
        assert_eq!(info.and_then(value_of), Some(131_072.0));
        let no_size = super::super::prom::parse(
            "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1.0\n",
        );
        assert_eq!(value_of(&no_size.samples[0]), None);
    }

    #[test]
    fn every_dcgm_name_is_on_the_exporter_fixture() {
        let p = super::super::prom::parse(include_str!(
            "../../../tests/fixtures/metrics/dcgm-exporter.txt"
        ));
        assert_eq!(p.bad_lines, 0);
        for k in KNOWN.iter().filter(|k| k.source == "dcgm") {
            assert_eq!(
                p.samples.iter().filter(|s| s.name == k.name).count(),
                2,
                "{}",
                k.name
            );
        }
        assert!(!is_engine_page(&p));
    }
}
