//! tokentap: a transparent, measuring reverse proxy for LLM inference traffic.
//!
//! # Layout
//! Leaves first; each module uses only those above it in this list.
//! - [`stats`]: nearest-rank percentiles and bootstrap intervals, for every command.
//! - [`sse`]: incremental SSE splitter over arbitrary chunks.
//! - [`tokens`]: the token estimate of a text (about four bytes a token), for the sim and bench.
//! - [`openai`]: lenient read-only views of requests and chunks; byte-exact request splices.
//! - [`keys`]: API key fingerprints and aliases; `Secret<T>`.
//! - [`headers`]: hop-by-hop header hygiene.
//! - [`tags`]: tokentap's own `x-tokentap-*` headers; bench's load tags (`LoadTags`) as one value.
//! - [`meter`]: timeline, per-chunk observer, `MeteredBody`, the `RequestRecord` schema.
//! - [`spread`]: a repeated sweep's run-to-run spread per cell, from the records' `run`.
//! - [`listen`]: listening sockets with the system's maximum backlog; their accept queues (/proc).
//! - [`config`]: TOML → validated `Config`, errors with file and key path.
//! - [`route`]: path → route and the experiment's arm choice, as pure functions.
//! - [`tap`]: the gateway tap's join of a request's outer and inner sides.
//! - [`tls`]: PEM files, the listener's acceptor, an upstream route's connector.
//! - [`post`]: one HTTP/1.1 connection out, for posting to a collector or a database.
//! - [`sink`]: metrics, per-route live stats and the JSONL writer.
//! - [`proxy`]: the tower stack, the per-request `Exchange`, the routes, the upstream client.
//! - [`server`]: client-facing accept loop (HTTP/1.1 + HTTP/2, TLS), graceful drain.
//! - [`reload`]: SIGHUP and `POST /reload` re-read the config into a new generation.
//! - [`admin`]: `/metrics`, `/healthz`, `/readyz`, `/stats` on their own listener.
//! - [`serve`], [`check`]: the `serve` and `check` commands; [`cli`]: exit codes, runtime, signals.
//! - [`sim`]: simulated engine (continuous-batching cost model) and gateway hop.
//! - [`bench`]: closed-loop load generator (buckets × concurrency), raw records and run.json.
//! - [`report`]: records → tables, SLO verdicts, provisioning, per-key, HTML charts.
//! - [`compare`]: two runs side by side: per-cell differences with bootstrap intervals, a gate.
//! - [`demo`]: the embedded default: sim + hop + proxy + bench in one process.
//! - `fuzzing`: the fuzz targets' property checks, replayed by `tests/suite/fuzz_replay.rs` (hidden).
#![forbid(unsafe_code)]

pub mod admin;
pub mod bench;
pub mod check;
pub mod cli;
pub mod compare;
pub mod config;
pub mod demo;
pub mod export;
#[doc(hidden)]
pub mod fuzzing;
pub mod headers;
pub mod keys;
pub mod listen;
pub mod meter;
pub mod openai;
pub mod post;
pub mod prom;
pub mod proxy;
pub mod reload;
pub mod report;
pub mod route;
pub mod rxstamp;
pub mod serve;
pub mod server;
pub mod sim;
pub mod sink;
pub mod slo;
pub mod spread;
pub mod sse;
pub mod stats;
pub mod tags;
pub mod tap;
pub mod tls;
pub mod tokens;
