//! Reload without a restart, over `POST /reload`: a stream in flight finishes on the upstream it
//! began on while new requests take the new one; a bad file is refused with `check`'s error and
//! the old config keeps serving; the endpoint is a control surface only with the token; limits
//! and timeouts change for new requests; listener settings wait for a restart. (SIGHUP, which
//! needs a process of its own, is in `cli.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::path::{Path, PathBuf};

use support::*;
use tokentap::config::{Config, Overrides};
use tokentap::serve::{Origin, Running};

const TOKEN: &str = "reload-token-0123456789";

/// A proxy started from a config file (which a reload reads again), on ephemeral ports.
struct FromFile {
    running: Option<Running>,
    addr: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    file: PathBuf,
    log: PathBuf,
}

fn write(file: &Path, routes: &str, extra: &str) {
    std::fs::write(
        file,
        format!("[admin]\nreload_token = \"{TOKEN}\"\n{extra}\n{routes}"),
    )
    .unwrap();
}

fn route(upstream: &str) -> String {
    format!("[[routes]]\nname = \"r\"\nupstream = \"{upstream}\"\n")
}

async fn start(routes: &str, extra: &str) -> FromFile {
    let dir = scratch("reload");
    let (file, log) = (dir.join("t.toml"), dir.join("r.jsonl"));
    write(&file, routes, extra);
    let over = Overrides {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        log: Some(log.display().to_string()),
        ..Overrides::default()
    };
    let config = Config::load(&file, &over).unwrap();
    let origin = Origin {
        path: Some(file.clone()),
        over,
    };
    let running = Running::start_from(config, origin).await.unwrap();
    FromFile {
        addr: running.addr,
        admin: running.admin.unwrap(),
        running: Some(running),
        file,
        log,
    }
}

impl FromFile {
    fn url(&self) -> String {
        format!("http://{}/v1/chat/completions", self.addr)
    }

    async fn reload_with(&self, auth: Option<&str>) -> (u16, serde_json::Value) {
        let h = auth.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = h.iter().map(|v| ("authorization", v.as_str())).collect();
        let r = send(
            &client(),
            "POST",
            &format!("http://{}/reload", self.admin),
            &headers,
            Vec::new(),
        )
        .await
        .unwrap();
        let body = serde_json::from_slice(&r.body)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&r.body).into()));
        (r.status, body)
    }

    async fn reload(&self) -> (u16, serde_json::Value) {
        self.reload_with(Some(TOKEN)).await
    }

    /// `method path` on the admin listener: status and body.
    async fn admin(&self, method: &str, path: &str) -> (u16, String) {
        let url = format!("http://{}{path}", self.admin);
        let r = send(&client(), method, &url, &[], Vec::new())
            .await
            .unwrap();
        (r.status, String::from_utf8(r.body).unwrap())
    }

    async fn metrics(&self) -> String {
        self.admin("GET", "/metrics").await.1
    }

    async fn chat(&self) -> Got {
        send(&client(), "POST", &self.url(), &[], chat_body("m", true))
            .await
            .unwrap()
    }

    async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await.unwrap();
        }
    }
}

async fn wait_received(up: &Upstream, n: usize) {
    for _ in 0..500 {
        if up.requests().len() >= n {
            return;
        }
        tokio::time::sleep(MS(5)).await;
    }
    panic!("the upstream never got request {n}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_in_flight_finishes_on_its_upstream_and_new_requests_take_the_new_one() {
    // 20 tokens 40 ms apart: the stream is still running when the reload lands.
    let old = Upstream::spawn(|_| Script::chat_stream(MS(20), MS(40), 20, true)).await;
    let new = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 3, true)).await;
    let mut px = start(&route(&old.url()), "").await;

    let url = px.url();
    let stream = tokio::spawn(async move {
        send(&client(), "POST", &url, &[], chat_body("m", true))
            .await
            .unwrap()
    });
    wait_received(&old, 1).await;

    write(&px.file, &route(&new.url()), "");
    let (status, out) = px.reload().await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["result"], "ok", "{out}");
    assert_eq!(out["generation"], 2, "{out}");

    // New requests take the new upstream at once, while the old stream still runs.
    for _ in 0..3 {
        assert_eq!(px.chat().await.status, 200);
    }
    assert_eq!(new.requests().len(), 3);
    assert_eq!(old.requests().len(), 1);
    assert!(
        !stream.is_finished(),
        "the old stream ended before the reload was tested"
    );

    let got = stream.await.unwrap();
    assert_eq!(got.status, 200);
    assert!(
        !got.body_error,
        "the stream in flight was cut by the reload"
    );
    let body = String::from_utf8(got.body).unwrap();
    assert!(body.contains("t19 ") && body.ends_with("data: [DONE]\n\n"));

    let recs = wait_records(&px.log, 4).await;
    assert_eq!(recs.len(), 4);
    let long: Vec<_> = recs
        .iter()
        .filter(|r| r.output_tokens == Some(20))
        .collect();
    assert_eq!(long.len(), 1, "the old stream's record");
    assert_eq!(long[0].outcome.as_str(), "ok");
    assert_eq!(
        recs.iter().filter(|r| r.output_tokens == Some(3)).count(),
        3
    );

    let m = px.metrics().await;
    assert_eq!(
        metric(&m, "tokentap_config_reloads_total{result=\"ok\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "tokentap_config_last_reload_successful"),
        Some(1.0)
    );
    let stats: serde_json::Value =
        serde_json::from_str(&px.admin("GET", "/stats").await.1).unwrap();
    assert_eq!(stats["config_generation"], 2);
    // The route kept its name: its live stats span the reload.
    assert_eq!(stats["routes"]["r"]["requests"], 4, "{stats}");
    px.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_is_refused_with_checks_error_and_the_old_one_keeps_serving() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let mut px = start(&route(&up.url()), "").await;

    for (bad, key) in [
        (route("ftp://nowhere"), "routes[0].upstream"),
        (
            format!("{}[limits]\nmax_concurent = 3\n", route(&up.url())),
            "max_concurent",
        ),
        (String::from("[[routes]]\nname = \"r\"\n"), "upstream"),
    ] {
        write(&px.file, &bad, "");
        let check = Config::load(&px.file, &Overrides::default())
            .unwrap_err()
            .to_string();
        let (status, out) = px.reload().await;
        assert_eq!(status, 422, "{out}");
        assert_eq!(out["result"], "error");
        assert_eq!(out["generation"], 1, "a refused reload changes nothing");
        let msg = out["error"].as_str().unwrap();
        assert!(msg.contains(key), "{msg}");
        // The same words `tokentap check` prints (the overrides aside).
        assert_eq!(msg, check);
        assert!(msg.starts_with(&px.file.display().to_string()), "{msg}");
        assert_eq!(
            px.chat().await.status,
            200,
            "the old config stopped serving"
        );
    }
    // An unreadable file is refused too.
    std::fs::remove_file(&px.file).unwrap();
    let (status, out) = px.reload().await;
    assert_eq!(status, 422);
    assert!(
        out["error"].as_str().unwrap().contains("cannot read"),
        "{out}"
    );
    assert_eq!(px.chat().await.status, 200);
    assert_eq!(up.requests().len(), 4);

    let m = px.metrics().await;
    assert_eq!(
        metric(&m, "tokentap_config_reloads_total{result=\"error\"}"),
        Some(4.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "tokentap_config_last_reload_successful"),
        Some(0.0)
    );
    px.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_over_http_needs_the_token_and_refusals_are_counted() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let mut px = start(&route(&up.url()), "").await;
    for auth in [None, Some("wrong-token-0123456789"), Some("")] {
        let (status, out) = px.reload_with(auth).await;
        assert_eq!(status, 401, "{auth:?}: {out}");
        assert_eq!(out["result"], "unauthorized");
    }
    // Another method is not a reload.
    assert_eq!(px.admin("GET", "/reload").await.0, 405);
    let m = px.metrics().await;
    assert_eq!(
        metric(&m, "tokentap_config_reloads_total{result=\"unauthorized\"}"),
        Some(3.0),
        "{m}"
    );
    // Refusals leave the applied count alone.
    assert_eq!(
        metric(&m, "tokentap_config_reloads_total{result=\"ok\"}"),
        Some(0.0),
        "{m}"
    );

    // Without a token in the file, the endpoint is off whatever is sent; the reload that
    // removed the token went through with the old one.
    write(&px.file, &route(&up.url()), "");
    std::fs::write(
        &px.file,
        std::fs::read_to_string(&px.file)
            .unwrap()
            .replace(&format!("reload_token = \"{TOKEN}\"\n"), ""),
    )
    .unwrap();
    assert_eq!(px.reload().await.0, 200);
    let (status, out) = px.reload().await;
    assert_eq!(status, 403, "{out}");
    assert!(out["error"]
        .as_str()
        .unwrap()
        .contains("admin.reload_token"));
    // A short token is a config error, and never echoed.
    write(&px.file, &route(&up.url()), "");
    let short = std::fs::read_to_string(&px.file)
        .unwrap()
        .replace(TOKEN, "s3cret");
    std::fs::write(&px.file, short).unwrap();
    let e = Config::load(&px.file, &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("admin.reload_token") && !e.contains("s3cret"),
        "{e}"
    );
    assert!(std::fs::read_to_string(&px.log)
        .unwrap_or_default()
        .lines()
        .all(|l| !l.contains(TOKEN)));
    px.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_timeouts_change_for_new_requests_and_listener_settings_wait_for_a_restart() {
    // The first request's stream runs ~1 s; every later one answers its head after 300 ms.
    let up = Upstream::spawn(|r| {
        if r.body.windows(4).any(|w| w == b"slow") {
            Script::chat_stream(MS(10), MS(50), 20, true)
        } else {
            Script {
                head_delay: MS(300),
                ..Script::chat_stream(MS(1), MS(1), 2, true)
            }
        }
    })
    .await;
    let mut px = start(&route(&up.url()), "").await;
    let url = px.url();
    let long = tokio::spawn(async move {
        send(&client(), "POST", &url, &[], chat_body("slow", true))
            .await
            .unwrap()
    });
    wait_received(&up, 1).await;

    // One in flight; the new cap is 1, the first-byte deadline 100 ms, and the metrics' key
    // label cap and the SLO thresholds (bound when the recorder was made) and the listener's
    // backlog change too. (A moved listener is in `cli.rs`: here the command line's addresses
    // override the file's.)
    let extra = "[listen]\nbacklog = 300\n[limits]\nmax_concurrent = 1\nmax_key_labels = 7\n\
                 [timeouts]\nfirst_byte_ms = 100\n[slo]\nttft_strict_ms = 250\n";
    write(&px.file, &route(&up.url()), extra);
    let (status, out) = px.reload().await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["result"], "restart_needed", "{out}");
    assert_eq!(
        out["restart_needed"],
        serde_json::json!(["listen.backlog", "slo", "limits.max_key_labels"])
    );

    // The cap counts the request still running on the old config.
    let r = px.chat().await;
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    let got = long.await.unwrap();
    assert_eq!(got.status, 200);
    assert!(!got.body_error);
    // The old stream kept its generation's deadlines; a new request gets the new 100 ms
    // first-byte deadline, and the upstream's 300 ms head is a 504.
    tokio::time::sleep(MS(20)).await;
    let r = px.chat().await;
    assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));

    let m = px.metrics().await;
    assert_eq!(
        metric(
            &m,
            "tokentap_config_reloads_total{result=\"restart_needed\"}"
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(metric(&m, "tokentap_max_concurrent_requests"), Some(1.0));
    px.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_without_a_file_a_reload_says_there_is_nothing_to_read() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let mut px = proxy(&up.url(), &format!("[admin]\nreload_token = \"{TOKEN}\"\n")).await;
    let r = send(
        &client(),
        "POST",
        &format!("http://{}/reload", px.admin),
        &[("authorization", &format!("Bearer {TOKEN}"))],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 422);
    assert!(String::from_utf8_lossy(&r.body).contains("without --config"));
    assert_eq!(px.chat().await.status, 200);
    px.shutdown().await;
}

/// The reload metrics exist before the first reload, so an alert on them has a series to read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_metrics_exist_from_the_start() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(&up.url(), "").await;
    let (status, m) = px.admin_get("/metrics").await;
    assert_eq!(status, 200);
    for result in ["ok", "restart_needed", "error", "unauthorized"] {
        let name = format!("tokentap_config_reloads_total{{result=\"{result}\"}}");
        assert_eq!(metric(&m, &name), Some(0.0), "{name} in {m}");
    }
    assert_eq!(
        metric(&m, "tokentap_config_last_reload_successful"),
        Some(1.0)
    );
}
