//! OTLP/HTTP export of one span per request (`[otlp]`, off by default).
//!
//! Never on the request path: a finished record's span goes onto the exporter's bounded queue
//! (`crate::export`: full, it is dropped and counted), batched (`otlp.batch` spans, or what came
//! within `otlp.flush_ms`), encoded as protobuf (`proto`) and posted to `<endpoint>/v1/traces`,
//! with retries and backoff. Traffic never waits for a collector.
//!
//! Hand-encoded instead of the `opentelemetry-otlp` crates, which add 54 crates and about 48 s
//! to a cold build on two cores (see docs/otel.md).

mod proto;
pub mod span;

use bytes::Bytes;

use super::export::{self, Encode, Target};
use crate::config::OtlpConfig;
pub use export::{Counters as OtlpCounters, ExportError as OtlpError};
pub use span::SpanIn;

/// The span queue the sink keeps.
pub type Otlp = export::Queue<Box<SpanIn>>;

struct Spans {
    resource: proto::Attributes,
}

impl Encode<Box<SpanIn>> for Spans {
    fn encode(&mut self, batch: &[Box<SpanIn>]) -> Bytes {
        let spans: Vec<proto::Span> = batch.iter().map(|s| span::span(s)).collect();
        Bytes::from(proto::export_request(
            &self.resource,
            ("tokentap", env!("CARGO_PKG_VERSION")),
            &spans,
        ))
    }
}

/// Start the exporter task.
pub fn spawn(cfg: &OtlpConfig) -> Result<(Otlp, tokio::task::JoinHandle<()>), OtlpError> {
    let target = Target {
        name: "OTLP",
        sink: "otlp",
        endpoint: cfg.endpoint.clone(),
        path: cfg.path.clone(),
        content_type: "application/x-protobuf",
        headers: cfg.headers.clone(),
        queue: cfg.queue,
        batch: cfg.batch,
        flush: cfg.flush,
        timeout: cfg.timeout,
        also_retry: &[],
    };
    let spans = Spans {
        resource: vec![
            ("service.name", proto::Value::Str(cfg.service_name.clone())),
            (
                "service.version",
                proto::Value::Str(env!("CARGO_PKG_VERSION").into()),
            ),
        ],
    };
    export::spawn(target, spans)
}
