//! The admin listener (default 127.0.0.1 only): `/metrics` (Prometheus text), `/healthz`,
//! `/readyz` (503 once shutdown began), `/stats` (JSON: live percentiles per route), and
//! `POST /reload`.
//!
//! It reads shared state only; it can never affect proxied traffic. The one exception is
//! `/reload`, and it is off unless `admin.reload_token` is set: in a cluster the admin port is
//! open for scraping, and a scrape target must not be a control surface. With the token set,
//! `/reload` needs it as a bearer; anything else is refused (401, or 403 when no token is set)
//! and counted as `tokentap_config_reloads_total{result="unauthorized"}`.

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

use crate::reload::Reloader;

pub struct Admin {
    pub reloader: Arc<Reloader>,
    pub ready: AtomicBool,
    pub started: Instant,
    /// The proxy's and the admin's listeners: their accept queues, read at each scrape.
    pub listeners: crate::listen::Watch,
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
    /// The config generation serving new requests (1 = the one read at start).
    config_generation: u64,
    /// Replaced generations whose requests are still running.
    generations_draining: usize,
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
        let st = &self.reloader.live().state();
        let m = &st.sink().metrics;
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
            st.sink().records_dropped.load(Ordering::Relaxed),
            st.sink().log_counters.write_errors.load(Ordering::Relaxed),
            st.shared.shadow_skipped.load(Ordering::Relaxed),
            st.sink().otlp.as_ref().map(|o| &*o.counters),
            st.sink().clickhouse.as_ref().map(|c| &*c.counters),
        );
        m.observe_listeners(&self.listeners.sample());
        m.render()
    }

    /// `POST /reload`: authorised by `admin.reload_token`, then the reload runs off the
    /// runtime's threads (it reads files and builds clients).
    async fn reload(self: Arc<Self>, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let refuse = |status: StatusCode, message: &str| {
            self.reloader
                .live()
                .shared
                .sink
                .metrics
                .reloaded("unauthorized");
            let body = serde_json::json!({"result": "unauthorized", "error": message});
            let mut r = reply(status, "application/json", body.to_string());
            if status == StatusCode::UNAUTHORIZED {
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
            }
            r
        };
        let state = self.reloader.live().state();
        let Some(token) = state.config.reload_token.as_ref() else {
            return refuse(
                StatusCode::FORBIDDEN,
                "reload over HTTP is off: set admin.reload_token (SIGHUP always reloads)",
            );
        };
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(header::HeaderValue::as_bytes)
            .and_then(|v| {
                (v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "))
                    .then(|| v[7..].trim_ascii())
            });
        if !given.is_some_and(|g| same(g, token.expose().as_bytes())) {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "POST /reload needs `Authorization: Bearer <admin.reload_token>`",
            );
        }
        drop(state);
        let reloader = self.reloader.clone();
        let out = match tokio::task::spawn_blocking(move || reloader.reload("POST /reload")).await {
            Ok(o) => o,
            Err(_) => {
                return reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "application/json",
                    r#"{"result":"error","error":"the reload task failed"}"#,
                )
            }
        };
        let status = if out.applied() {
            StatusCode::OK
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        };
        match serde_json::to_vec(&out) {
            Ok(v) => reply(status, "application/json", v),
            Err(_) => reply(status, "application/json", "{}"),
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if req.uri().path() == "/reload" {
            if req.method() != Method::POST {
                return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "POST only\n");
            }
            return self.reload(&req).await;
        }
        self.respond(&req)
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
                let live = self.reloader.live();
                let st = &live.state();
                let s = st.sink();
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
                    shadow_skipped: st.shared.shadow_skipped.load(Ordering::Relaxed),
                    routes: st
                        .routes
                        .iter()
                        .filter_map(|r| Some((r.name.clone(), r.stats.snapshot()?)))
                        .collect(),
                    config_generation: live.number(),
                    generations_draining: live.draining(),
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
                "try /metrics /healthz /readyz /stats (and POST /reload)\n",
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
                let admin = admin.clone();
                async move { Ok::<_, Infallible>(admin.handle(req).await) }
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

/// Equal bytes, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
