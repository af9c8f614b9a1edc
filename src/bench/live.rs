//! `bench --metrics-listen ADDR`: bench's own figures while it runs, in Prometheus' text
//! format on `GET /metrics` — requests sent, in flight, finished and in error, the open loop's
//! schedule lag, and the cell under way. Every request counts, probes and warm-ups included.
//! It only reads counters the load updates; it never slows or stops the load.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The counters.
#[derive(Default)]
pub struct Live {
    sent: AtomicU64,
    finished: AtomicU64,
    errors: AtomicU64,
    /// Schedule lag, microseconds: the sum, how many, and the largest in the current cell.
    lag_sum_us: AtomicU64,
    lag_count: AtomicU64,
    lag_max_us: AtomicU64,
    cells_begun: AtomicU64,
    cell: Mutex<String>,
}

impl Live {
    pub fn request_sent(&self) {
        self.sent.fetch_add(1, Relaxed);
    }

    /// A request ended; `lag_ms` when it was sent on a schedule.
    pub fn request_done(&self, error: bool, lag_ms: Option<f64>) {
        self.finished.fetch_add(1, Relaxed);
        if error {
            self.errors.fetch_add(1, Relaxed);
        }
        if let Some(l) = lag_ms.filter(|l| l.is_finite() && *l >= 0.0) {
            let us = (l * 1000.0) as u64;
            self.lag_sum_us.fetch_add(us, Relaxed);
            self.lag_count.fetch_add(1, Relaxed);
            self.lag_max_us.fetch_max(us, Relaxed);
        }
    }

    /// A cell begins.
    pub fn cell(&self, label: &str) {
        self.cells_begun.fetch_add(1, Relaxed);
        self.lag_max_us.store(0, Relaxed);
        if let Ok(mut c) = self.cell.lock() {
            label.clone_into(&mut c);
        }
    }

    /// The page.
    pub fn page(&self) -> String {
        let (sent, finished) = (self.sent.load(Relaxed), self.finished.load(Relaxed));
        let mut s = String::new();
        let mut one = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = write!(
                s,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"
            );
        };
        one(
            "tokentap_bench_requests_sent_total",
            "counter",
            "Requests bench sent (probes and warm-ups included).",
            sent as f64,
        );
        one(
            "tokentap_bench_requests_finished_total",
            "counter",
            "Requests that ended, whatever the outcome.",
            finished as f64,
        );
        one(
            "tokentap_bench_requests_in_flight",
            "gauge",
            "Requests sent and not yet ended.",
            sent.saturating_sub(finished) as f64,
        );
        one(
            "tokentap_bench_errors_total",
            "counter",
            "Requests that did not end well.",
            self.errors.load(Relaxed) as f64,
        );
        one(
            "tokentap_bench_schedule_lag_seconds_sum",
            "counter",
            "Open loop: total lateness of requests behind their schedule.",
            self.lag_sum_us.load(Relaxed) as f64 / 1e6,
        );
        one(
            "tokentap_bench_schedule_lag_seconds_count",
            "counter",
            "Open loop: requests sent on a schedule.",
            self.lag_count.load(Relaxed) as f64,
        );
        one(
            "tokentap_bench_schedule_lag_max_seconds",
            "gauge",
            "Open loop: the largest lateness in the current cell.",
            self.lag_max_us.load(Relaxed) as f64 / 1e6,
        );
        one(
            "tokentap_bench_cells_begun_total",
            "counter",
            "Cells begun.",
            self.cells_begun.load(Relaxed) as f64,
        );
        let cell = self.cell.lock().map(|c| c.clone()).unwrap_or_default();
        if !cell.is_empty() {
            let cell = crate::prom::escape_label(&cell);
            let _ = write!(s, "# HELP tokentap_bench_cell The cell under way.\n# TYPE tokentap_bench_cell gauge\ntokentap_bench_cell{{cell=\"{cell}\"}} 1\n");
        }
        s
    }
}

/// Serve the page on `listener` until the task is aborted (its connections with it).
pub fn serve(listener: tokio::net::TcpListener, live: Arc<Live>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            while conns.try_join_next().is_some() {}
            let live = live.clone();
            conns.spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let live = live.clone();
                        async move {
                            let (status, body) = if req.uri().path() == "/metrics" {
                                (http::StatusCode::OK, live.page())
                            } else {
                                (http::StatusCode::NOT_FOUND, "not found\n".to_owned())
                            };
                            let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
                            *r.status_mut() = status;
                            r.headers_mut().insert(
                                http::header::CONTENT_TYPE,
                                http::HeaderValue::from_static("text/plain; version=0.0.4"),
                            );
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    })
}

/// Stops a task when dropped: the server ends with the run.
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The counters and their server, for `--metrics-listen`; an address that cannot be bound is a
/// usage error.
pub(super) async fn start(
    listen: Option<&str>,
    quiet: bool,
) -> Result<Option<(Arc<Live>, AbortOnDrop)>, super::BenchError> {
    let Some(addr) = listen else {
        return Ok(None);
    };
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| super::BenchError::Usage(format!("--metrics-listen {addr}: {e}")))?;
    if !quiet {
        let at = l
            .local_addr()
            .map_or_else(|_| addr.to_owned(), |a| a.to_string());
        eprintln!("tokentap bench: its own metrics on http://{at}/metrics");
    }
    let live = Arc::new(Live::default());
    Ok(Some((live.clone(), AbortOnDrop(serve(l, live)))))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_counts() {
        let l = super::Live::default();
        l.cell("balanced C=4");
        l.request_sent();
        l.request_sent();
        l.request_done(true, Some(2.5));
        let p = l.page();
        for line in [
            "tokentap_bench_requests_sent_total 2",
            "tokentap_bench_requests_in_flight 1",
            "tokentap_bench_errors_total 1",
            "tokentap_bench_schedule_lag_max_seconds 0.0025",
            "tokentap_bench_cell{cell=\"balanced C=4\"} 1",
        ] {
            assert!(p.contains(line), "{line}\n{p}");
        }
        let page = crate::bench::scrape::prom::parse(&p);
        assert_eq!(page.bad_lines, 0);
    }
}
