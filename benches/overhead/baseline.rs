//! Reference proxies for the overhead bench: the bench binary re-run as a bare proxy, to show
//! what part of a proxy's added latency the runtime and the HTTP layer cost before any measuring.
//!
//! - `tcp-relay`: tokio, one task per client connection copying bytes both ways to its own
//!   upstream connection (`copy_bidirectional`); no HTTP at all. The floor of a tokio proxy.
//! - `hyper-only`: hyper's HTTP/1.1 server and hyper's HTTP/1.1 client, one upstream connection
//!   per client connection, the request passed on as hyper parsed it and the response body handed
//!   back as hyper's client yields it. No routing, no metering, no records. (Its full-speed
//!   figures are hyper's client's: it hands every chunk from a connection task to the request's
//!   task. tokentap's own client does not.)
//! - `hyper-tt`: hyper's HTTP/1.1 server in front of tokentap's own upstream client (pooled, the
//!   request body collected first as tokentap does, the response body read by the task that
//!   writes it to the client), as tokentap is made, without its handler (route, key, admission,
//!   the record's set-up), its server settings (HTTP/2 detection, the header-read timer) and its
//!   measuring. The gap from here to tokentap is what those cost; the gap from `hyper-only` to
//!   here is the client's.
//!
//! Started with the same arguments as tokentap (`serve --upstream http://H:P --listen A …`;
//! other arguments are ignored) so the bench pins, times and stops them as it does every proxy.
//! Not a mode of tokentap.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// The first argument that makes the bench binary run a reference proxy instead of the bench.
pub const FLAG: &str = "--overhead-baseline";

/// The reference proxies by target name.
pub const NAMES: [&str; 3] = ["tcp-relay", "hyper-only", "hyper-tt"];

/// Run the reference proxy `args[0]` with tokentap's `serve` arguments after it; never returns
/// unless it cannot start.
pub fn run(args: &[String]) {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let kind = args.first().cloned().unwrap_or_default();
    assert!(
        NAMES.contains(&kind.as_str()),
        "unknown baseline {kind:?}; known: {NAMES:?}"
    );
    let up: SocketAddr = value("--upstream")
        .and_then(|u| u.trim_start_matches("http://").parse().ok())
        .expect("--upstream http://HOST:PORT");
    let listen: SocketAddr = value("--listen")
        .and_then(|l| l.parse().ok())
        .expect("--listen HOST:PORT");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let l = TcpListener::bind(listen).await.unwrap();
        let config = tokentap::config::Config::from_flags(&tokentap::config::Overrides {
            upstream: Some(format!("http://{up}")),
            ..Default::default()
        })
        .unwrap();
        let client =
            tokentap::proxy::client::build(&config.routes[0], Duration::from_secs(5)).unwrap();
        loop {
            let Ok((c, _)) = l.accept().await else {
                continue;
            };
            match kind.as_str() {
                "tcp-relay" => tokio::spawn(relay(c, up)),
                "hyper-only" => tokio::spawn(hyper_only(c, up)),
                _ => tokio::spawn(hyper_tt(c, client.clone())),
            };
        }
    });
}

async fn relay(mut c: TcpStream, up: SocketAddr) {
    let _ = c.set_nodelay(true);
    let Ok(mut u) = TcpStream::connect(up).await else {
        return;
    };
    let _ = u.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
}

async fn hyper_only(c: TcpStream, up: SocketAddr) {
    let _ = c.set_nodelay(true);
    let Ok(u) = TcpStream::connect(up).await else {
        return;
    };
    let _ = u.set_nodelay(true);
    let Ok((send, conn)) =
        hyper::client::conn::http1::handshake::<_, Incoming>(TokioIo::new(u)).await
    else {
        return;
    };
    tokio::spawn(conn);
    // NB: HTTP/1.1 requests on one client connection come one at a time, so one upstream
    // connection per client connection never waits on this lock.
    let send = Arc::new(tokio::sync::Mutex::new(send));
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let send = send.clone();
        async move { send.lock().await.send_request(req).await }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(c), svc)
        .await;
}

async fn hyper_tt(c: TcpStream, client: tokentap::proxy::client::UpstreamClient) {
    let _ = c.set_nodelay(true);
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let client = client.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = match http_body_util::BodyExt::collect(body).await {
                Ok(b) => b.to_bytes(),
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            };
            let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            match client.send(&parts.method, pq, &parts.headers, &body).await {
                Ok((resp, _)) => Ok(resp),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            }
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(c), svc)
        .await;
}
