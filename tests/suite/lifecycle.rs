//! Shutdown, the request log (rotation, unwritable disk, full queue), TLS on both sides.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use support::*;
use tokentap::meter::Outcome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_in_flight_streams_and_flushes_every_record() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(50), MS(20), 20, true)).await;
    let mut px = proxy(&up.url(), "").await;
    let c = client();
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (c, url) = (c.clone(), px.url("/v1/chat/completions"));
        tasks.push(tokio::spawn(async move {
            send(&c, "POST", &url, &[], chat_body("m", true))
                .await
                .unwrap()
        }));
    }
    tokio::time::sleep(MS(150)).await;
    let log = px.log.clone();
    px.shutdown().await; // returns after drain + flush
    for t in tasks {
        let got = t.await.unwrap();
        assert!(!got.body_error && got.body.ends_with(b"data: [DONE]\n\n"));
    }
    // Shutdown returns with every record on disk: no waiting for the writer here (a stream's
    // record is made just after its last write, so this also checks the drain waits for it).
    let recs = wait_records(&log, 0).await;
    assert_eq!(recs.len(), 5);
    assert!(recs
        .iter()
        .all(|r| r.outcome == Outcome::Ok && r.output_tokens == Some(20)));
    // The listener is closed.
    assert!(tokio::net::TcpStream::connect(px.addr).await.is_err());
}

/// An idle keep-alive connection is closed at once on shutdown, and an HTTP/1.1 connection busy
/// with a stream gets its stream to the end, then is closed: shutdown does not wait out the grace
/// period (30 s by default) for either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_connections_at_once_and_busy_ones_after_their_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Upstream::spawn(|_| Script::chat_stream(MS(10), MS(20), 15, true)).await;
    let mut px = proxy(&up.url(), "").await;
    let body = chat_body("m", true);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let request = [head.as_bytes(), &body].concat();
    // Read a chunked response to its terminator; then the connection is idle (keep-alive).
    async fn read_response(s: &mut tokio::net::TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"0\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the response ended");
            got.extend_from_slice(&buf[..n]);
        }
        got
    }
    let mut idle = tokio::net::TcpStream::connect(px.addr).await.unwrap();
    idle.write_all(&request).await.unwrap();
    assert!(read_response(&mut idle).await.starts_with(b"HTTP/1.1 200"));
    let mut busy = tokio::net::TcpStream::connect(px.addr).await.unwrap();
    busy.write_all(&request).await.unwrap();
    tokio::time::sleep(MS(100)).await;

    let t = tokio::time::Instant::now();
    px.shutdown().await;
    assert!(t.elapsed() < MS(5000), "shutdown waited {:?}", t.elapsed());
    let mut rest = [0u8; 64];
    let n = tokio::time::timeout(MS(2000), idle.read(&mut rest)).await;
    assert!(
        matches!(n, Ok(Ok(0))),
        "the idle connection was not closed: {n:?}"
    );
    let got = read_response(&mut busy).await;
    assert!(
        got.ends_with(b"data: [DONE]\n\n\r\n0\r\n\r\n"),
        "the stream did not end cleanly"
    );
    let n = tokio::time::timeout(MS(2000), busy.read(&mut rest)).await;
    assert!(
        matches!(n, Ok(Ok(0))),
        "the busy connection was not closed after its stream: {n:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_grace_period_are_cut_and_recorded() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(10), MS(50), 200, false)).await;
    let mut px = proxy(&up.url(), "[timeouts]\nshutdown_grace_ms = 200\n").await;
    let c = client();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (c, url) = (c.clone(), px.url("/v1/chat/completions"));
        tasks.push(tokio::spawn(async move {
            send(&c, "POST", &url, &[], chat_body("m", true)).await
        }));
    }
    tokio::time::sleep(MS(100)).await;
    let log = px.log.clone();
    let t = tokio::time::Instant::now();
    px.shutdown().await;
    assert!(t.elapsed() < MS(2000));
    for t in tasks {
        let got = t.await.unwrap();
        assert!(
            got.map(|g| g.body_error).unwrap_or(true),
            "the stream was cut"
        );
    }
    let recs = wait_records(&log, 0).await;
    assert_eq!(recs.len(), 3);
    assert!(
        recs.iter().all(|r| r.outcome == Outcome::ShutdownCut),
        "{recs:?}"
    );
    assert!(recs.iter().all(|r| r.output_tokens.unwrap() >= 2));
}

#[tokio::test]
async fn log_rotates_by_size_and_loses_nothing() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(0), 2, true)).await;
    let dir = scratch("rotate");
    let log = dir.join("r.jsonl");
    let toml = format!(
        "[listen]\naddr='127.0.0.1:0'\n[admin]\naddr='off'\n[log]\npath='{}'\nmax_bytes=4096\nkeep=50\n[[routes]]\nname='d'\nupstream='{}'\n",
        log.display(),
        up.url()
    );
    let cfg = tokentap::config::Config::from_toml(&toml, "t", &Default::default()).unwrap();
    let running = tokentap::serve::Running::start(cfg).await.unwrap();
    let c = client();
    for _ in 0..40 {
        send(
            &c,
            "POST",
            &format!("http://{}/v1/chat/completions", running.addr),
            &[],
            chat_body("m", true),
        )
        .await
        .unwrap();
    }
    running.shutdown().await.unwrap();
    let mut total = 0;
    let mut files = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.len() <= 4096,
            "{} is {} bytes",
            p.display(),
            text.len()
        );
        for l in text.lines() {
            serde_json::from_str::<tokentap::meter::RequestRecord>(l).unwrap();
        }
        total += text.lines().count();
        files += 1;
    }
    assert_eq!(total, 40);
    assert!(files > 3, "rotated into {files} files");
}

#[tokio::test]
async fn unwritable_log_never_stops_traffic() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(0), 2, true)).await;
    let toml = format!(
        "[listen]\naddr='127.0.0.1:0'\n[admin]\naddr='127.0.0.1:0'\n[log]\npath='/proc/tokentap-cannot-write/r.jsonl'\n[[routes]]\nname='d'\nupstream='{}'\n",
        up.url()
    );
    let cfg = tokentap::config::Config::from_toml(&toml, "t", &Default::default()).unwrap();
    let running = tokentap::serve::Running::start(cfg).await.unwrap();
    let c = client();
    for _ in 0..5 {
        let got = send(
            &c,
            "POST",
            &format!("http://{}/v1/chat/completions", running.addr),
            &[],
            chat_body("m", true),
        )
        .await
        .unwrap();
        assert_eq!(got.status, 200);
    }
    tokio::time::sleep(MS(100)).await;
    let stats = send(
        &c,
        "GET",
        &format!("http://{}/stats", running.admin.unwrap()),
        &[],
        vec![],
    )
    .await
    .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&stats.body).unwrap();
    assert_eq!(j["records"]["total"], 5);
    assert!(j["records"]["write_errors"].as_u64().unwrap() >= 5, "{j}");
    let m = send(
        &c,
        "GET",
        &format!("http://{}/metrics", running.admin.unwrap()),
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert!(String::from_utf8_lossy(&m.body).contains("tokentap_log_write_errors_total"));
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_queue_drops_and_counts_never_blocks() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(&up.url(), "[log]\nqueue = 1\n").await;
    let c = client();
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (c, url) = (c.clone(), px.url("/v1/models"));
        tasks.push(tokio::spawn(async move {
            send(&c, "GET", &url, &[], vec![]).await.unwrap().status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    tokio::time::sleep(MS(200)).await;
    let (_, stats) = px.admin_get("/stats").await;
    let j: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let (total, written, dropped) = (
        j["records"]["total"].as_u64().unwrap(),
        j["records"]["written"].as_u64().unwrap(),
        j["records"]["dropped"].as_u64().unwrap(),
    );
    assert_eq!(total, 200);
    assert_eq!(
        written + dropped,
        total,
        "every record is written or counted as dropped"
    );
    assert_eq!(
        std::fs::read_to_string(&px.log).unwrap().lines().count() as u64,
        written
    );
}

fn self_signed(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert_pem = ck.cert.pem();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, &cert_pem).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    (cert, key, cert_pem)
}

fn tls_client_config(cert_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

#[tokio::test]
async fn tls_listener_and_verified_https_upstream() {
    // The kernel's stamps under TLS too (off by default; on for this binary's tests).
    tokentap::rxstamp::enable();
    let dir = scratch("tls");
    let (cert, key, cert_pem) = self_signed(&dir);

    // An HTTPS upstream (hyper + rustls) with the self-signed certificate.
    let server_cfg = {
        use rustls::pki_types::pem::PemObject;
        let certs = vec![rustls::pki_types::CertificateDer::from_pem_file(&cert).unwrap()];
        let k = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, k)
                .unwrap(),
        )
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                        Bytes::from_static(b"{\"secure\":true}"),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });

    let px = proxy_toml(&format!(
        "[listen]\ntls_cert='{}'\ntls_key='{}'\n[[routes]]\nname='s'\nupstream='https://localhost:{up_port}'\nca_file='{}'\n",
        cert.display(),
        key.display(),
        cert.display()
    ))
    .await;

    // A TLS client to the proxy's listener.
    let connector = tokio_rustls::TlsConnector::from(tls_client_config(&cert_pem));
    let tcp = tokio::net::TcpStream::connect(px.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .uri("/v1/models")
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"{\"secure\":true}");
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::Ok);
    // TLS on both sides: the kernel stamped the reads under the records (docs/records.md).
    #[cfg(target_os = "linux")]
    assert_eq!(r.clock, tokentap::meter::Clock::Kernel, "{r:?}");

    // Without the CA, the upstream's certificate is refused: 502, recorded.
    let px2 = proxy_toml(&format!(
        "[[routes]]\nname='s'\nupstream='https://localhost:{up_port}'\n"
    ))
    .await;
    let got = send(&client(), "GET", &px2.url("/v1/models"), &[], vec![])
        .await
        .unwrap();
    assert_eq!(got.status, 502);
    assert_eq!(px2.records(1).await[0].outcome, Outcome::ConnectError);
}
