//! The listeners' accept queues over real sockets: a listener holds as many handshaken
//! connections as its backlog (read back from `/proc/net/tcp`, where a listening socket's
//! `rx_queue` is its queue's depth, which stops at backlog + 1), and the admin's `/metrics`
//! shows each queue and the host's listen overflows. Linux only: elsewhere there is no `/proc`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::net::SocketAddr;
use std::time::Duration;

use support::*;
use tokentap::config::{Config, Overrides};
use tokentap::listen::{self, Backlog};
use tokentap::meter::Clock;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// `n` clients connecting to `addr` at once, each held open (or still trying: the kernel drops
/// the handshakes a full queue cannot take, and the client retries) until this is dropped. No
/// client gives up early: on a loaded host a handshake can take long, and one given up would
/// leave the queue short.
struct Clients(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Clients {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

fn connect_many(addr: SocketAddr, n: usize) -> Clients {
    Clients(
        (0..n)
            .map(|_| {
                tokio::spawn(async move {
                    let _held = TcpStream::connect(addr).await;
                    std::future::pending::<()>().await;
                })
            })
            .collect(),
    )
}

/// The depth of `addr`'s accept queue once it is `want` (or what it is after 20 s).
async fn depth_reaching(addr: SocketAddr, want: u32) -> Option<u32> {
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let d = listen::accept_queue(addr);
        if want == 0 && d == Some(0) {
            return d;
        }
        if (want > 0 && d.is_some_and(|d| d >= want)) || tokio::time::Instant::now() >= until {
            // Settled: the clients still trying are refused, not queued.
            tokio::time::sleep(MS(200)).await;
            return listen::accept_queue(addr);
        }
        tokio::time::sleep(MS(20)).await;
    }
}

/// The kernel's full-queue check is lockless: a handshake finishing on another CPU at the same
/// moment can slip in one or two past backlog + 1.
fn near(d: Option<u32>, backlog: u32) -> bool {
    d.is_some_and(|d| (backlog + 1..=backlog + 3).contains(&d))
}

/// The system's maximum as the kernel applies it (the queue holds one more than its backlog).
fn system_max() -> u32 {
    listen::system_max().expect("net.core.somaxconn")
}

/// A proxy's config on ephemeral ports, logging to a scratch folder: (config, log path).
fn config(toml_head: &str, upstream: &str) -> (Config, std::path::PathBuf) {
    let log = scratch("backlog").join("r.jsonl");
    let over = Overrides {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        log: Some(log.display().to_string()),
        ..Overrides::default()
    };
    let toml = format!("{toml_head}[[routes]]\nname = \"a\"\nupstream = \"{upstream}\"\n");
    (Config::from_toml(&toml, "t.toml", &over).unwrap(), log)
}

/// `listen.backlog` reaches the proxy's socket: 250 clients at a listener not yet accepting fill
/// its queue to 201 (mio's 128, under tokio's `TcpListener::bind`, would stop at 129).
/// Once serving, the accept loop empties it, and `/metrics` shows the queue and its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_listens_with_listen_backlog_and_metrics_show_its_queue() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let (config, _) = config("[listen]\nbacklog = 200\n", &up.url());
    let (main, admin) = tokentap::serve::bind(&config).await.unwrap();
    assert_eq!(main.backlog.asked, 200);
    let admin = admin.unwrap();
    assert_eq!(
        admin.backlog,
        Backlog::resolve(None),
        "the admin's: the system's maximum"
    );
    let (addr, admin_addr) = (
        main.listener.local_addr().unwrap(),
        admin.listener.local_addr().unwrap(),
    );

    let waiting = connect_many(addr, 250);
    let depth = depth_reaching(addr, 201).await;
    assert!(near(depth, 200), "backlog 200 holds 201: {depth:?}");

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(tokentap::serve::run(
        config,
        tokentap::serve::Origin::default(),
        main,
        Some(admin),
        async move {
            let _ = stopped.await;
        },
    ));
    assert_eq!(
        depth_reaching(addr, 0).await,
        Some(0),
        "the accept loop took them all"
    );
    drop(waiting);

    let r = send(
        &client(),
        "GET",
        &format!("http://{admin_addr}/metrics"),
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&r.body);
    let m = |p: &str| metric(&text, p);
    assert_eq!(
        m("tokentap_listen_backlog_connections{listener=\"proxy\"}"),
        Some(200.0),
        "{text}"
    );
    assert_eq!(
        m("tokentap_listen_backlog_connections{listener=\"admin\"}"),
        Some(f64::from(system_max()))
    );
    let depth = m("tokentap_listen_queue_connections{listener=\"proxy\"}").expect("proxy depth");
    assert!((0.0..=201.0).contains(&depth), "{depth}");
    assert!(m("tokentap_listen_queue_connections{listener=\"admin\"}").is_some());
    assert!(
        text.contains("# HELP tokentap_listen_overflows_total Host-wide"),
        "{text}"
    );
    assert!(text.contains("# TYPE tokentap_listen_queue_connections gauge"));
    let _ = stop.send(());
    served.await.unwrap().unwrap();
}

/// The host's overflows on `/metrics` follow the kernel's: a queue of 2 (backlog 1) offered 12
/// connections drops handshakes, and the counter rises by at least as many (host-wide: other
/// listeners can only add to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_anywhere_on_the_host_shows_in_the_overflows() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(&up.url(), "").await;
    let read = |text: &str, name: &str| metric(text, name).expect(name);
    let (_, before) = px.admin_get("/metrics").await;
    let overflows = read(&before, "tokentap_listen_overflows_total ");
    let drops = read(&before, "tokentap_listen_drops_total ");
    assert_eq!(
        read(
            &before,
            "tokentap_listen_queue_connections{listener=\"proxy\"}"
        ),
        0.0,
        "an idle proxy has nobody waiting"
    );
    assert_eq!(
        read(
            &before,
            "tokentap_listen_backlog_connections{listener=\"proxy\"}"
        ),
        f64::from(system_max()),
        "by default: the system's maximum"
    );

    let tiny = listen::bind("127.0.0.1:0".parse().unwrap(), Backlog::resolve(Some(1))).unwrap();
    let at = tiny.listener.local_addr().unwrap();
    let kept = connect_many(at, 12);
    let depth = depth_reaching(at, 2).await;
    assert!(near(depth, 1), "backlog 1 holds 2: {depth:?}");
    let (_, after) = px.admin_get("/metrics").await;
    let rose = read(&after, "tokentap_listen_overflows_total ") - overflows;
    assert!(rose >= 1.0, "overflows rose by {rose}");
    assert!(read(&after, "tokentap_listen_drops_total ") - drops >= rose);
    drop(kept);
}

/// The sim's and the demo's listeners (`listen::bind_str`) take the system's maximum: 200 clients
/// all wait in the queue of one that does not accept (mio's 128 would hold 129).
#[tokio::test]
async fn the_sims_listeners_take_the_systems_maximum() {
    let l = listen::bind_str("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let want = 200.min(system_max() + 1);
    let kept = connect_many(addr, 200);
    assert_eq!(depth_reaching(addr, want).await, Some(want));
    drop((kept, l));
}

/// A request head that arrives while its connection waits in the accept queue is timed from its
/// arrival (the kernel's stamp of its segment), not from the accept: a wait of 300 ms for
/// tokentap to take the connection is inside the record's figures (docs/records.md, "Where TTFT
/// starts").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_waiting_in_the_accept_queue_is_timed_from_its_arrival() {
    tokentap::rxstamp::enable();
    let up = Upstream::spawn(|_| Script::json(200, r#"{"usage":{"completion_tokens":1}}"#)).await;
    let (config, log) = config("", &up.url());
    let (main, admin) = tokentap::serve::bind(&config).await.unwrap();
    assert!(
        tokentap::rxstamp::prepare(&main.listener).await,
        "the kernel stamps here"
    );
    let mut s = TcpStream::connect(main.listener.local_addr().unwrap())
        .await
        .unwrap();
    let body = chat_body("m", false);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(&[head.as_bytes(), &body].concat())
        .await
        .unwrap();
    tokio::time::sleep(MS(300)).await; // nobody accepts yet: the head waits in the queue

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(tokentap::serve::run(
        config,
        tokentap::serve::Origin::default(),
        main,
        admin,
        async move {
            let _ = stopped.await;
        },
    ));
    let answer = read_until(&mut s, "completion_tokens").await;
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    let recs = wait_records(&log, 1).await;
    let r = &recs[0];
    assert_eq!(r.clock, Clock::Kernel, "{r:?}");
    assert!(
        r.e2e_ms >= 300.0,
        "e2e {} ms: timed from the accept",
        r.e2e_ms
    );
    drop(s);
    let _ = stop.send(());
    served.await.unwrap().unwrap();
}
