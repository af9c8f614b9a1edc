//! The admin listener (default 127.0.0.1 only): `/metrics` (Prometheus text), `/healthz`,
//! `/readyz` (503 once shutdown began), `/stats` (JSON: live percentiles per route).
//! It reads shared state only; it can never affect proxied traffic.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::proxy::State;

pub struct Admin {
    pub state: Arc<State>,
    pub ready: AtomicBool,
    pub started: Instant,
}

#[derive(Serialize)]
struct StatsBody<'a> {
    uptime_s: f64,
    ready: bool,
    in_flight: std::collections::BTreeMap<&'a str, u64>,
    records: RecordCounts,
    /// Experiment copies skipped at the shadow in-flight cap.
    shadow_skipped: u64,
    routes: std::collections::BTreeMap<String, crate::sink::stats::RouteStats>,
}

#[derive(Serialize)]
struct RecordCounts {
    total: u64,
    written: u64,
    dropped: u64,
    write_errors: u64,
}

fn reply(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    r
}

impl Admin {
    /// The Prometheus exposition, with the live counters brought up to date.
    pub fn render_metrics(&self) -> String {
        let st = &self.state;
        let m = &st.sink.metrics;
        // NB: the gauge is read from the counters at scrape time; setting it per request from
        // racing finishes could leave it stale.
        for r in st.routes.iter() {
            m.set_in_flight(&r.name, r.in_flight.load(Ordering::Relaxed));
            if r.target.is_some() {
                m.set_upstream_opened(&r.name, r.opened());
            }
        }
        m.set_max_concurrent(st.config.limits.max_concurrent);
        m.sync_counters(
            st.sink.records_dropped.load(Ordering::Relaxed),
            st.sink.log_counters.write_errors.load(Ordering::Relaxed),
            st.shadow_skipped.load(Ordering::Relaxed),
        );
        m.render()
    }

    fn respond(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
        }
        match req.uri().path() {
            "/metrics" => reply(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                self.render_metrics(),
            ),
            "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n"),
            "/readyz" => {
                if self.ready.load(Ordering::Relaxed) {
                    reply(StatusCode::OK, "text/plain", "ready\n")
                } else {
                    reply(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "text/plain",
                        "shutting down\n",
                    )
                }
            }
            "/stats" => {
                let (st, s) = (&self.state, &self.state.sink);
                let body = StatsBody {
                    uptime_s: self.started.elapsed().as_secs_f64(),
                    ready: self.ready.load(Ordering::Relaxed),
                    in_flight: st
                        .routes
                        .iter()
                        .map(|r| (r.name.as_str(), r.in_flight.load(Ordering::Relaxed)))
                        .collect(),
                    records: RecordCounts {
                        total: s.records_total.load(Ordering::Relaxed),
                        written: s.log_counters.written.load(Ordering::Relaxed),
                        dropped: s.records_dropped.load(Ordering::Relaxed),
                        write_errors: s.log_counters.write_errors.load(Ordering::Relaxed),
                    },
                    shadow_skipped: st.shadow_skipped.load(Ordering::Relaxed),
                    routes: st
                        .routes
                        .iter()
                        .filter_map(|r| Some((r.name.clone(), r.stats.snapshot()?)))
                        .collect(),
                };
                match serde_json::to_vec_pretty(&body) {
                    Ok(v) => reply(StatusCode::OK, "application/json", v),
                    Err(_) => reply(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "text/plain",
                        "stats unavailable\n",
                    ),
                }
            }
            _ => reply(
                StatusCode::NOT_FOUND,
                "text/plain",
                "try /metrics /healthz /readyz /stats\n",
            ),
        }
    }
}

/// Serve the admin endpoints until `shutdown` resolves.
pub async fn run(listener: TcpListener, admin: Arc<Admin>, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => return,
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(_) => { tokio::time::sleep(Duration::from_millis(50)).await; continue; }
            },
        };
        let admin = admin.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let r = admin.respond(&req);
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .http1_only()
                .serve_connection(TokioIo::new(s_timeout(stream)), svc)
                .await;
        });
    }
}

/// Admin connections are short-lived; nothing special beyond nodelay.
fn s_timeout(s: tokio::net::TcpStream) -> tokio::net::TcpStream {
    let _ = s.set_nodelay(true);
    s
}
