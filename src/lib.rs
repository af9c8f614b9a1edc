//! tokentap: a transparent, measuring reverse proxy for LLM inference traffic.
//!
//! # Layout
//! - [`config`]: TOML → validated `Config`, errors with file and key path.
//! - [`server`]: client-facing accept loop (HTTP/1.1 + HTTP/2, TLS), graceful drain.
//! - [`admin`]: `/metrics`, `/healthz`, `/readyz`, `/stats` on their own listener.
//! - [`proxy`]: the per-request service, pooled upstream clients, header hygiene, local errors.
//! - [`route`]: path-prefix route table (upstreams only from the config).
//! - [`keys`]: API key fingerprints and aliases; `Secret<T>`.
//! - [`openai`]: lenient read-only views of requests and chunks.
//! - [`sse`]: incremental SSE splitter over arbitrary chunks.
//! - [`meter`]: timeline, per-chunk observer, `MeteredBody`, the `RequestRecord` schema.
//! - [`sink`]: metrics, live stats and the JSONL writer.
//! - [`serve`]: the `serve` command's wiring.
//! - [`sim`]: simulated engine (continuous-batching cost model) and gateway hop.
//! - [`bench`]: closed-loop load generator (buckets × concurrency), raw records and run.json.
//! - [`demo`]: the embedded default: sim + hop + proxy + bench in one process.
//! - [`report`]: records → tables, SLO verdicts, provisioning, per-key, HTML charts.
#![forbid(unsafe_code)]

pub mod admin;
pub mod bench;
pub mod config;
pub mod demo;
pub mod keys;
pub mod meter;
pub mod openai;
pub mod proxy;
pub mod report;
pub mod route;
pub mod serve;
pub mod server;
pub mod sim;
pub mod sink;
pub mod sse;
