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
use tokio::net::TcpStream;

/// Connect `n` clients to `addr` at once; keep those the kernel let through. A client whose
/// handshake the full queue dropped gives up after a while (it would wait a second for its
/// retransmit, and be dropped again).
async fn connect_many(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let tries: Vec<_> = (0..n)
        .map(|_| {
            tokio::spawn(tokio::time::timeout(
                Duration::from_millis(500),
                TcpStream::connect(addr),
            ))
        })
        .collect();
    let mut kept = Vec::new();
    for t in tries {
        if let Ok(Ok(Ok(s))) = t.await {
            kept.push(s);
        }
    }
    kept
}

/// The depth of `addr`'s accept queue once it is `want` (or what it is after 5 s).
async fn depth_reaching(addr: SocketAddr, want: u32) -> Option<u32> {
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let d = listen::accept_queue(addr);
        if d == Some(want) || tokio::time::Instant::now() >= until {
            return d;
        }
        tokio::time::sleep(MS(20)).await;
    }
}

/// The system's maximum as the kernel applies it (the queue holds one more than its backlog).
fn system_max() -> u32 {
    listen::system_max().expect("net.core.somaxconn")
}

/// `listen.backlog` reaches the proxy's socket: 250 clients at a listener not yet accepting fill
/// its queue to 201 (mio's 128, under tokio's `TcpListener::bind`, would stop at 129).
/// Once serving, the accept loop empties it, and `/metrics` shows the queue and its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_listens_with_listen_backlog_and_metrics_show_its_queue() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let dir = scratch("backlog");
    let over = Overrides {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        log: Some(dir.join("r.jsonl").display().to_string()),
        ..Overrides::default()
    };
    let toml = format!(
        "[listen]\nbacklog = 200\n[[routes]]\nname = \"a\"\nupstream = \"{}\"\n",
        up.url()
    );
    let config = Config::from_toml(&toml, "t.toml", &over).unwrap();
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

    let waiting = connect_many(addr, 250).await;
    assert!(waiting.len() >= 201, "{} connected", waiting.len());
    assert_eq!(
        depth_reaching(addr, 201).await,
        Some(201),
        "backlog 200 holds 201"
    );

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
    let kept = connect_many(at, 12).await;
    assert_eq!(depth_reaching(at, 2).await, Some(2), "backlog 1 holds 2");
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
    let kept = connect_many(addr, 200).await;
    assert_eq!(depth_reaching(addr, want).await, Some(want));
    drop((kept, l));
}
