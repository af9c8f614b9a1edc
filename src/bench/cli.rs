//! `tokentap bench` on the command line: arguments → `BenchConfig`, Ctrl-C keeps what was
//! measured.

use std::path::PathBuf;

use super::BenchConfig;
use crate::cli::Exit;

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of an OpenAI-compatible server (tokentap, vLLM, LiteLLM).
    #[arg(long)]
    pub target: String,
    /// Output folder (requests.jsonl, run.json).
    #[arg(long)]
    pub out: PathBuf,
    /// ShareGPT JSON file; default: the bundled sample.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// Synthetic prompts of these token lengths instead of a dataset (e.g. 1019,558,127).
    #[arg(long, value_delimiter = ',')]
    pub synthetic: Option<Vec<u64>>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub concurrency: Vec<usize>,
    /// Measured requests per cell.
    #[arg(long, default_value_t = 30)]
    pub requests: usize,
    /// Warm-up requests per cell (not recorded).
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Model name; default: the first of GET /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// Environment variable holding the bearer key.
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
    /// Send ignore_eos + min_tokens so output length is exact (vLLM extension).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub fixed_output: bool,
    /// Prompts under this many (estimated) tokens are "short".
    #[arg(long, default_value_t = 200)]
    pub short_max: u64,
    /// Prompts from this many tokens are "long".
    #[arg(long, default_value_t = 700)]
    pub long_min: u64,
    /// Output tokens for long-short, balanced, short-long.
    #[arg(long, value_delimiter = ',', default_value = "64,256,512")]
    pub outputs: Vec<u64>,
    #[arg(long, default_value_t = 50)]
    pub prompts_per_bucket: usize,
    /// Skip measuring this client's own overhead against a server that answers at once.
    #[arg(long)]
    pub no_calibrate: bool,
    /// Send identical prompts through two experiment arms in ABBA order, choosing the arm with
    /// this request header (tokentap's `experiment.route_header`, e.g. x-tokentap-route).
    #[arg(long)]
    pub route_header: Option<String>,
    /// The API shape to send: chat, completions, responses (OpenAI's Responses API) or messages
    /// (Anthropic's Messages API).
    #[arg(long, value_enum, default_value = "chat")]
    pub api: BenchApi,
    /// The two arm (route) names for --route-header.
    #[arg(long, value_delimiter = ',', default_value = "direct,gateway")]
    pub arms: Vec<String>,
}

/// Run the sweep the arguments describe.
pub fn cli(a: Args) -> Exit {
    let [o0, o1, o2] = match a.outputs.as_slice() {
        [x, y, z] => [*x, *y, *z],
        _ => {
            return Exit::Usage(
                "--outputs takes three numbers: long-short,balanced,short-long".into(),
            )
        }
    };
    let cfg = BenchConfig {
        target: a.target,
        out: a.out,
        dataset: a.dataset,
        synthetic: a.synthetic,
        seed: a.seed,
        concurrency: a.concurrency,
        requests: a.requests,
        warmup: a.warmup,
        model: a.model,
        api_key: std::env::var(&a.api_key_env)
            .ok()
            .filter(|k| !k.is_empty())
            .map(crate::keys::Secret::new),
        fixed_output: a.fixed_output,
        short_max: a.short_max,
        long_min: a.long_min,
        outputs: [o0, o1, o2],
        prompts_per_bucket: a.prompts_per_bucket,
        calibrate: !a.no_calibrate,
        arms: if a.route_header.is_some() {
            a.arms.iter().map(|n| (n.clone(), String::new())).collect()
        } else {
            Vec::new()
        },
        route_header: a.route_header,
        api: a.api.into(),
        ..Default::default()
    };
    if cfg.route_header.is_some() && cfg.arms.len() != 2 {
        return Exit::Usage("--arms takes exactly two route names".into());
    }
    let rt = match crate::cli::runtime() {
        Ok(rt) => rt,
        Err(e) => return e,
    };
    rt.block_on(async move {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        tokio::spawn(async move {
            crate::cli::shutdown_signal().await;
            eprintln!("\ntokentap bench: stopping; keeping what was measured");
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        match super::run(&cfg, stop).await {
            Ok(_) => Exit::Ok,
            Err(e) => Exit::Failed(format!("bench: {e}")),
        }
    })
}

/// `--api`: the shapes bench can send.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum BenchApi {
    Chat,
    Completions,
    Responses,
    Messages,
}

impl From<BenchApi> for crate::openai::Api {
    fn from(a: BenchApi) -> Self {
        match a {
            BenchApi::Chat => crate::openai::Api::Chat,
            BenchApi::Completions => crate::openai::Api::Completions,
            BenchApi::Responses => crate::openai::Api::Responses,
            BenchApi::Messages => crate::openai::Api::Messages,
        }
    }
}
