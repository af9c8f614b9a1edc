//! The gateway tap over real sockets: client → tokentap `gateway` route → a test gateway →
//! tokentap `engine` route (behind the gateway) → a scripted engine. The test gateway holds
//! each request for the time the client asks (`x-test-hold-ms`) and claims it in LiteLLM's
//! header, so every join can be checked against the hold of its own request: a wrong join
//! between two identical prompts held 40 ms apart cannot pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use support::*;
use tokentap::keys::fingerprint;
use tokentap::meter::{JoinBy, Outcome, RequestRecord, TapSide, Unjoined};

const GATEWAY_KEY: &str = "gw-upstream-key";

/// How the test gateway treats what it forwards.
#[derive(Clone, Copy)]
struct Mode {
    /// Forward `x-tokentap-join` (a gateway configured to forward client headers).
    forward_join: bool,
    /// Re-serialise the body as LiteLLM does: another model, other key order, spaces.
    reserialise: bool,
    /// Rewrite the conversation beyond recognition (a system prompt added).
    rewrite: bool,
}

/// A gateway on an ephemeral port relaying to `upstream` (a tokentap route URL, set later).
async fn gateway(upstream: Arc<OnceLock<String>>, mode: Mode) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let client = Arc::new(client());
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let (client, upstream) = (client.clone(), upstream.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (client, upstream) = (client.clone(), upstream.clone());
                    async move {
                        let up = upstream.get().cloned().unwrap_or_default();
                        Ok::<_, Infallible>(relay(&client, &up, mode, req).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

async fn relay(
    client: &TestClient,
    upstream: &str,
    mode: Mode,
    req: http::Request<Incoming>,
) -> http::Response<http_body_util::combinators::BoxBody<Bytes, hyper::Error>> {
    let (parts, body) = req.into_parts();
    let mut body = body.collect().await.unwrap().to_bytes();
    let hold: u64 = parts
        .headers
        .get("x-test-hold-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    let started = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(hold)).await;
    let held = started.elapsed();
    if mode.reserialise {
        let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        v["model"] = "upstream-model".into();
        v["stream_options"] = serde_json::json!({"include_usage": true});
        if mode.rewrite {
            let m = v["messages"].as_array_mut().unwrap();
            m.insert(
                0,
                serde_json::json!({"role": "system", "content": "Be brief."}),
            );
        }
        body = Bytes::from(serde_json::to_string_pretty(&v).unwrap());
    }
    let mut b = http::Request::builder()
        .method(parts.method)
        .uri(format!("{upstream}{}", parts.uri.path()))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {GATEWAY_KEY}"));
    if mode.forward_join {
        if let Some(v) = parts.headers.get("x-tokentap-join") {
            b = b.header("x-tokentap-join", v);
        }
    }
    let resp = client
        .request(b.body(Full::new(body)).unwrap())
        .await
        .unwrap();
    let (mut parts, body) = resp.into_parts();
    parts.headers.insert(
        "x-litellm-overhead-duration-ms",
        format!("{:.3}", held.as_secs_f64() * 1000.0)
            .parse()
            .unwrap(),
    );
    http::Response::from_parts(parts, body.boxed())
}

/// tokentap with `gateway` (→ the test gateway) and `engine` (→ the engine, behind `gateway`).
async fn tapped(engine: &Upstream, mode: Mode) -> TestProxy {
    // Each needs the other's address: the gateway learns tokentap's once it is up.
    let upstream = Arc::new(OnceLock::new());
    let gw = gateway(upstream.clone(), mode).await;
    let px = proxy_toml(&format!(
        "[[routes]]\nname = \"gateway\"\nupstream = \"http://{gw}\"\npath_prefix = \"/gw\"\n\
         [[routes]]\nname = \"engine\"\nupstream = \"{}\"\npath_prefix = \"/engine\"\n\
         behind = \"gateway\"\nbehind_keys = [\"{}\"]\n",
        engine.url(),
        fingerprint(GATEWAY_KEY.as_bytes())
    ))
    .await;
    upstream.set(px.url("/engine")).unwrap();
    px
}

fn engine_script() -> Script {
    Script::chat_stream(Duration::from_millis(5), Duration::from_millis(2), 4, true)
}

/// Send `holds.len()` identical prompts at once, each held by the gateway for its own time.
async fn identical_prompts_at_once(px: &TestProxy, holds: &[u64]) {
    let c = client();
    let sends = holds.iter().map(|h| {
        let (c, url, h) = (c.clone(), px.url("/gw/v1/chat/completions"), h.to_string());
        async move {
            let got = send(
                &c,
                "POST",
                &url,
                &[
                    ("x-test-hold-ms", h.as_str()),
                    ("content-type", "application/json"),
                ],
                chat_body("m", true),
            )
            .await
            .unwrap();
            assert_eq!(got.status, 200);
        }
    });
    futures_join(sends).await;
}

async fn futures_join<F: std::future::Future<Output = ()> + Send + 'static>(
    fs: impl Iterator<Item = F>,
) {
    let hs: Vec<_> = fs.map(tokio::spawn).collect();
    for h in hs {
        h.await.unwrap();
    }
}

fn sides(recs: &[RequestRecord]) -> (Vec<&RequestRecord>, Vec<&RequestRecord>) {
    let side = |s| {
        recs.iter()
            .filter(|r| r.gateway_tap.as_ref().is_some_and(|g| g.side == s))
            .collect::<Vec<_>>()
    };
    (side(TapSide::Outer), side(TapSide::Inner))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_joins_identical_concurrent_prompts_each_to_its_own() {
    let engine = Upstream::spawn(|_| engine_script()).await;
    let px = tapped(
        &engine,
        Mode {
            forward_join: true,
            reserialise: true,
            rewrite: false,
        },
    )
    .await;
    let holds = [10, 50, 90, 130];
    identical_prompts_at_once(&px, &holds).await;
    let recs = px.records(8).await;
    let (outer, inner) = sides(&recs);
    assert_eq!((outer.len(), inner.len()), (4, 4), "{recs:#?}");
    for o in &outer {
        let g = o.gateway_tap.as_ref().unwrap();
        assert_eq!(g.join, Some(JoinBy::Header), "{g:?}");
        let claim = o.gateway_overhead_ms.unwrap();
        let adm = g.admission_ms.unwrap();
        // Its own hold, and no other (they are 40 ms apart).
        assert!(
            adm >= claim && adm - claim < 20.0,
            "admission {adm} vs hold {claim}"
        );
        assert!(g.relay_ms.unwrap() >= 0.0);
        let total = g.ttft_ms.unwrap();
        assert!((total - (adm + g.relay_ms.unwrap())).abs() < 1e-6);
        // Both records name each other.
        let peer = inner
            .iter()
            .find(|i| Some(&i.id) == g.peer.as_ref())
            .unwrap();
        assert_eq!(
            peer.gateway_tap.as_ref().unwrap().peer.as_deref(),
            Some(o.id.as_str())
        );
        // The outer TTFT minus the inner TTFT is the tap's total.
        assert!((o.ttft_ms.unwrap() - peer.ttft_ms.unwrap() - total).abs() < 0.01);
    }
    // The header never reaches the engine.
    assert!(engine
        .requests()
        .iter()
        .all(|r| r.header("x-tokentap-join").is_none()));

    // Live: the histogram by part, the join counters, /stats.
    let (_, m) = px.admin_get("/metrics").await;
    for part in ["admission", "relay", "total"] {
        assert!(
            m.contains(&format!(
                "tokentap_gateway_hop_seconds_count{{route=\"gateway\",model=\"m\",part=\"{part}\"}} 4"
            )),
            "{m}"
        );
    }
    assert!(m.contains("# HELP tokentap_gateway_hop_seconds "), "{m}");
    assert!(m.contains(
        "tokentap_gateway_tap_requests_total{route=\"engine\",side=\"inner\",result=\"joined\"} 4"
    ));
    let (_, stats) = px.admin_get("/stats").await;
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let t = &v["routes"]["gateway"]["gateway_tap"];
    assert_eq!(t["results"]["joined"], 4, "{stats}");
    assert!(
        t["admission_ms"]["p50"].as_f64().unwrap() >= 10.0,
        "{stats}"
    );

    // The report's section from the same records.
    let rep = tokentap::report::compute(&recs, &tokentap::report::Slos::default(), 10, false);
    let tap = rep.gateway_tap.unwrap();
    assert_eq!((tap.joined, tap.unjoined), (4, 0));
    assert_eq!(tap.join_by.get("header"), Some(&4));
    assert!(tap.overall.ttft_ms.median.unwrap() >= 50.0);
    assert!(
        tap.self_reported_ms
            .unwrap()
            .measured_minus_claimed_ms
            .median
            .unwrap()
            < 20.0
    );
    assert_eq!(
        tap.by_concurrency.values().map(|s| s.joined).sum::<usize>(),
        4
    );
    // The inner records are the gateway's requests: not counted again in the cells.
    assert_eq!(rep.cells.iter().map(|c| c.requests).sum::<usize>(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fingerprints_join_what_is_unique_and_never_guess_between_twins() {
    let engine = Upstream::spawn(|_| engine_script()).await;
    let mode = Mode {
        forward_join: false,
        reserialise: true,
        rewrite: false,
    };
    let px = tapped(&engine, mode).await;
    // Distinct prompts one after another: each fingerprint is unique, each joins.
    let c = client();
    for (i, hold) in [15u64, 35, 55].iter().enumerate() {
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"prompt {i}"}}],"max_tokens":16,"stream":true}}"#
        );
        let h = hold.to_string();
        let got = send(
            &c,
            "POST",
            &px.url("/gw/v1/chat/completions"),
            &[("x-test-hold-ms", h.as_str())],
            body.into_bytes(),
        )
        .await
        .unwrap();
        assert_eq!(got.status, 200);
    }
    let recs = px.records(6).await;
    let (outer, _) = sides(&recs);
    for o in &outer {
        let g = o.gateway_tap.as_ref().unwrap();
        assert_eq!(g.join, Some(JoinBy::Fingerprint), "{g:?}");
        let (adm, claim) = (g.admission_ms.unwrap(), o.gateway_overhead_ms.unwrap());
        assert!(
            adm >= claim && adm - claim < 20.0,
            "admission {adm} vs hold {claim}"
        );
    }
    // The same prompt four times at once, held 10, 50, 90, 130 ms: no inner request can be told
    // apart by its body, so none is joined, and every one is counted.
    identical_prompts_at_once(&px, &[10, 50, 90, 130]).await;
    let recs = px.records(14).await;
    let (outer, inner) = sides(&recs);
    let twins: Vec<_> = outer.iter().skip(3).collect();
    assert_eq!(twins.len(), 4);
    for o in twins {
        let g = o.gateway_tap.as_ref().unwrap();
        assert_eq!(g.peer, None, "a twin was joined: {g:?}");
        assert_eq!(g.unjoined, Some(Unjoined::Ambiguous));
    }
    let unjoined_inner = inner
        .iter()
        .filter(|r| r.gateway_tap.as_ref().unwrap().unjoined == Some(Unjoined::Ambiguous))
        .count();
    assert_eq!(unjoined_inner, 4);
    let (_, m) = px.admin_get("/metrics").await;
    assert!(m.contains(
        "tokentap_gateway_tap_requests_total{route=\"gateway\",side=\"outer\",result=\"ambiguous\"} 4"
    ), "{m}");
    let rep = tokentap::report::compute(&recs, &tokentap::report::Slos::default(), 10, false);
    let tap = rep.gateway_tap.unwrap();
    assert_eq!(tap.joined, 3);
    assert_eq!(tap.unjoined, 8);
    assert_eq!(tap.unjoined_by_reason.outer.get("ambiguous"), Some(&4));
    assert_eq!(tap.unjoined_by_reason.inner.get("ambiguous"), Some(&4));
    assert!(tap.summary.contains("never guessed"), "{}", tap.summary);
}

#[tokio::test]
async fn the_engine_route_serves_only_the_gateway() {
    let engine = Upstream::spawn(|_| engine_script()).await;
    let px = proxy_toml(&format!(
        "[[routes]]\nname = \"gateway\"\nupstream = \"{u}\"\npath_prefix = \"/gw\"\n\
         [[routes]]\nname = \"engine\"\nupstream = \"{u}\"\npath_prefix = \"/engine\"\n\
         behind = \"gateway\"\nbehind_keys = [\"{}\"]\n",
        fingerprint(GATEWAY_KEY.as_bytes()),
        u = engine.url()
    ))
    .await;
    let c = client();
    let url = px.url("/engine/v1/chat/completions");
    for auth in [None, Some("Bearer sk-some-user")] {
        let h: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let got = send(&c, "POST", &url, &h, chat_body("m", true))
            .await
            .unwrap();
        assert_eq!(got.status, 403);
        let v: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
        assert_eq!(v["error"]["code"], "not_the_gateway");
    }
    let auth = format!("Bearer {GATEWAY_KEY}");
    let got = send(
        &c,
        "POST",
        &url,
        &[("authorization", auth.as_str())],
        chat_body("m", true),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    let recs = px.records(3).await;
    let refused: Vec<_> = recs.iter().filter(|r| r.status == 403).collect();
    assert_eq!(refused.len(), 2);
    assert!(refused.iter().all(|r| r.outcome == Outcome::Rejected));
    // Only the gateway's request reached the engine.
    assert_eq!(engine.requests().len(), 1);
    // An inner request the gateway sent on its own (no outer one): counted, not joined.
    let served = recs.iter().find(|r| r.status == 200).unwrap();
    assert_eq!(
        served.gateway_tap.as_ref().unwrap().unjoined,
        Some(Unjoined::NoMatch)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_rewritten_beyond_recognition_is_left_unjoined_and_counted() {
    let engine = Upstream::spawn(|_| engine_script()).await;
    let px = tapped(
        &engine,
        Mode {
            forward_join: false,
            reserialise: true,
            rewrite: true,
        },
    )
    .await;
    identical_prompts_at_once(&px, &[5]).await;
    let recs = px.records(2).await;
    let (outer, inner) = sides(&recs);
    let (o, i) = (
        outer[0].gateway_tap.as_ref().unwrap(),
        inner[0].gateway_tap.as_ref().unwrap(),
    );
    assert_eq!(
        (o.peer.as_ref(), o.unjoined),
        (None, Some(Unjoined::NoInner))
    );
    assert_eq!(
        (i.peer.as_ref(), i.unjoined),
        (None, Some(Unjoined::NoMatch))
    );
    assert_eq!(o.admission_ms, None);
    // The client still got its stream.
    assert_eq!(outer[0].outcome, Outcome::Ok);
    let tap = tokentap::report::compute(&recs, &tokentap::report::Slos::default(), 10, false)
        .gateway_tap
        .unwrap();
    assert_eq!((tap.joined, tap.unjoined), (0, 2));
    assert_eq!(tap.join_rate, 0.0);
}

/// One tokentap taps two gateways at once: routes `nginx` and `litellm` (two simulated hops
/// holding 20 and 60 ms), each hop relaying to an inner route behind it (`engine-nginx`,
/// `engine-litellm`). Bench sends every prompt through direct and both gateways; each outer
/// request joins the inner request of its own gateway, and the tap recovers that gateway's hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tokentap_taps_two_gateways_at_once() {
    use tokentap::sim::{HopDelay, Profile, Sim};
    let el = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let profile = Profile {
        prefill_base_ms: 5.0,
        step_base_ms: 2.0,
        ..Profile::v100()
    };
    let mut sim = Sim::start(profile, "sim", 5, el, None).await.unwrap();
    let gateways = [("nginx", "20"), ("litellm", "60")];
    let mut listeners = Vec::new();
    let mut routes = format!(
        "[[routes]]\nname = \"direct\"\nupstream = \"http://{}\"\n",
        sim.engine
    );
    for (name, _) in gateways {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        routes.push_str(&format!(
            "[[routes]]\nname = \"{name}\"\nupstream = \"http://{}\"\npath_prefix = \"/{name}\"\n\
             [[routes]]\nname = \"engine-{name}\"\nupstream = \"http://{}\"\npath_prefix = \"/engine-{name}\"\n\
             behind = \"{name}\"\nbehind_sources = [\"127.0.0.1\"]\n",
            l.local_addr().unwrap(),
            sim.engine
        ));
        listeners.push(l);
    }
    let px = proxy_toml(&routes).await;
    for ((name, hold), l) in gateways.iter().zip(listeners) {
        let up = px.url(&format!("/engine-{name}")).parse().unwrap();
        sim.start_hop(l, hold.parse::<HopDelay>().unwrap(), up, 5)
            .unwrap();
    }
    let dir = scratch("tap-two-gateways");
    let cfg = {
        let mut b = support::load::bench_through_proxy(format!("http://{}", px.addr), dir.clone());
        (b.common.requests, b.common.warmup) = (6, 0);
        b.common.prompts.outputs = [4, 4, 4];
        b.common.prompts.buckets = vec!["balanced".into()];
        b.common.prompts.prompts_per_bucket = 6;
        b.load = tokentap::bench::Load::Closed(tokentap::bench::Closed {
            concurrency: vec![1, 3],
            experiment: tokentap::bench::Experiment {
                arms: [("direct", ""), ("nginx", "/nginx"), ("litellm", "/litellm")]
                    .iter()
                    .map(|(a, p)| (a.to_string(), p.to_string()))
                    .collect(),
                ..Default::default()
            },
            ..Default::default()
        });
        b
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokentap::bench::run(&cfg, stop).await.unwrap();
    let bench_recs = tokentap::report::load(&[dir], &mut |w| panic!("{w}")).unwrap();
    assert_eq!(bench_recs.len(), 12);
    // Every gateway request twice (outside and inside its gateway), direct once; and bench's
    // listings: the model's, and the 3 that open C=3's connections.
    let proxied = px.records(12 + 8 + 1 + 3).await;
    let by_id: std::collections::HashMap<&str, &RequestRecord> =
        proxied.iter().map(|r| (r.id.as_str(), r)).collect();
    for (name, hold) in gateways {
        let outer: Vec<&RequestRecord> = proxied
            .iter()
            .filter(|r| r.route == name && r.stream)
            .collect();
        assert_eq!(outer.len(), 4, "{name}");
        for r in outer {
            let g = r.gateway_tap.as_ref().expect("an outer tap record");
            assert_eq!(g.side, TapSide::Outer);
            assert_eq!(g.unjoined, None, "{name}: {g:?}");
            let inner = by_id[g.peer.as_deref().unwrap()];
            assert_eq!(
                inner.route,
                format!("engine-{name}"),
                "joined to its own gateway"
            );
            // The tap's hop minus what this gateway says it held: its own forwarding only
            // (under a millisecond quiet; 6.1 ms was seen on a loaded machine).
            let d = g.ttft_ms.unwrap() - r.gateway_overhead_ms.unwrap();
            assert!((0.0..15.0).contains(&d), "{name}: tap − hold {d}");
            let held = r.gateway_overhead_ms.unwrap();
            let want: f64 = hold.parse().unwrap();
            assert!(
                (want - 1.0..want + 15.0).contains(&held),
                "{name}: held {held}"
            );
        }
    }
    assert_eq!(
        proxied
            .iter()
            .filter(|r| r.route == "direct" && r.stream)
            .count(),
        4
    );
}

/// The tap across pods: one tokentap in front of the gateway (`join_header = true`), another
/// behind it (trusting loopback, the default), each with its own log; the sim's hop between them
/// holds each request a drawn 20±5 ms and forwards client headers, as a gateway configured to.
/// `report --tap OUTER --tap INNER` joins every request by its header, and its hop figure agrees
/// with the in-process tap's on the same set-up (the same hop's draws, in the same order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tap_across_two_tokentaps_joins_every_request_by_header() {
    use std::sync::atomic::AtomicBool;
    use tokentap::bench;
    use tokentap::sim::{HopDelay, Profile, Sim};
    const N: usize = 40;
    let profile = Profile {
        prefill_base_ms: 8.0,
        prefill_per_token_ms: 0.005,
        prefill_per_seq_ms: 1.0,
        step_base_ms: 3.0,
        step_per_seq_ms: 0.2,
        ..Profile::v100()
    };
    let listeners = || async {
        (
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        )
    };
    let load = |target: String, name: &str| {
        let mut b = support::load::bench_through_proxy(target, scratch(name));
        (b.common.requests, b.common.warmup) = (N, 0);
        b.common.prompts.buckets = vec!["balanced".into()];
        b.common.prompts.outputs = [6, 6, 6];
        b.common.prompts.prompts_per_bucket = N;
        b.load = tokentap::bench::Load::closed(vec![1]);
        b
    };
    let hop: HopDelay = "20±5".parse().unwrap();

    // Two tokentaps, the hop between them.
    let (el, hl) = listeners().await;
    let hop_addr = hl.local_addr().unwrap();
    let mut sim = Sim::start(profile.clone(), "sim", 5, el, None)
        .await
        .unwrap();
    let mut inner = proxy_toml(&format!(
        "[[routes]]\nname = \"engine\"\nupstream = \"http://{}\"\n",
        sim.engine
    ))
    .await;
    let mut outer = proxy_toml(&format!(
        "[[routes]]\nname = \"gateway\"\nupstream = \"http://{hop_addr}\"\njoin_header = true\n"
    ))
    .await;
    sim.start_hop(hl, hop, inner.url("").parse().unwrap(), 5)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    bench::run(
        &load(format!("http://{}", outer.addr), "podtap"),
        stop.clone(),
    )
    .await
    .unwrap();
    // bench's model listing (GET /v1/models), then N streamed chats.
    let (outs, ins) = (outer.records(N + 1).await, inner.records(N + 1).await);
    outer.shutdown().await;
    inner.shutdown().await;
    assert_eq!((outs.len(), ins.len()), (N + 1, N + 1));
    assert!(outs.iter().all(|r| r.join_sent && r.join_id.is_none()));
    assert!(outs.iter().chain(&ins).all(|r| r.outcome == Outcome::Ok));
    let streamed = |rs: &[RequestRecord]| {
        rs.iter()
            .filter(|r| r.stream && r.ttft_ms.is_some())
            .count()
    };
    assert_eq!((streamed(&outs), streamed(&ins)), (N, N));
    // Each inner record names its own outer one; none of them sent an id.
    let ids: std::collections::HashSet<&str> = outs.iter().map(|r| r.id.as_str()).collect();
    assert!(ins
        .iter()
        .all(|r| !r.join_sent && r.join_id.as_deref().is_some_and(|j| ids.contains(j))));
    // Per request: the hop figure minus what the hop says it held.
    let inner_ttft: std::collections::HashMap<&str, f64> = ins
        .iter()
        .filter_map(|r| Some((r.join_id.as_deref()?, r.ttft_ms?)))
        .collect();
    let err = tokentap::stats::sorted(
        outs.iter()
            .filter_map(|r| Some(r.ttft_ms? - inner_ttft[r.id.as_str()] - r.gateway_overhead_ms?)),
    );
    assert_eq!(err.len(), N);
    assert!(err[0] >= 0.0, "the hop figure is under the hold: {err:?}");
    let med = tokentap::stats::pct(&err, 0.5).unwrap();
    assert!(
        (0.0..3.0).contains(&med),
        "hop − hold median {med}: {err:?}"
    );

    // The same set-up in one process: the gateway's route and the engine's (`behind`).
    let (el, hl) = listeners().await;
    let hop_addr = hl.local_addr().unwrap();
    let mut sim2 = Sim::start(profile, "sim", 5, el, None).await.unwrap();
    let mut one = proxy_toml(&format!(
        "[[routes]]\nname = \"gateway\"\nupstream = \"http://{hop_addr}\"\n\
         [[routes]]\nname = \"engine\"\nupstream = \"http://{}\"\npath_prefix = \"/engine\"\n\
         behind = \"gateway\"\nbehind_sources = [\"127.0.0.1\"]\n",
        sim2.engine
    ))
    .await;
    sim2.start_hop(hl, hop, one.url("/engine").parse().unwrap(), 5)
        .unwrap();
    bench::run(&load(format!("http://{}", one.addr), "onetap"), stop)
        .await
        .unwrap();
    assert_eq!(one.records(2 * (N + 1)).await.len(), 2 * (N + 1));
    one.shutdown().await;

    let report = |taps: &[&std::path::Path]| -> serde_json::Value {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"));
        cmd.args(["report", "--format", "json"]);
        for t in taps {
            cmd.arg("--tap").arg(t);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["gateway_tap"].clone()
    };
    let across = report(&[&outer.log, &inner.log]);
    let within = report(&[&one.log]);
    let summary = across["summary"].as_str().unwrap();
    // Every request, the model listing too.
    let all = N + 1;
    assert_eq!(across["joined"], all, "{summary}");
    assert_eq!(across["join_rate"], 1.0, "{summary}");
    assert_eq!(across["join_by"]["header"], all, "{summary}");
    assert_eq!(across["unjoined"], 0, "{summary}");
    let a = &across["across_processes"];
    // One host: both records carry its boot id, so admission and relay are given too.
    assert_eq!(
        (&a["joined"], &a["one_clock"]),
        (&all.into(), &all.into()),
        "{a}"
    );
    assert_eq!(across["admission_ms"]["n"], all, "{summary}");
    assert!(summary.contains("given for all 41"), "{summary}");
    assert_eq!(within["joined"], all);
    assert!(within.get("across_processes").is_none());
    let (x, w) = (&across["ttft_ms"], &within["ttft_ms"]);
    let ci = |v: &serde_json::Value| {
        [
            v["ci95"][0].as_f64().unwrap(),
            v["ci95"][1].as_f64().unwrap(),
        ]
    };
    let (xm, wm, xc, wc) = (
        x["median"].as_f64().unwrap(),
        w["median"].as_f64().unwrap(),
        ci(x),
        ci(w),
    );
    assert!(
        (wc[0]..=wc[1]).contains(&xm) || (xc[0]..=xc[1]).contains(&wm),
        "across processes {xm} {xc:?}, in one process {wm} {wc:?}"
    );
    assert!((15.0..30.0).contains(&xm), "{xm}");
}

/// A client cannot forge a join: an `x-tokentap-join` from a sender the route does not trust
/// (`join_sources` without loopback; `join_keys` without its key) is not recorded, and no
/// upstream ever sees the header, trusted or not.
#[tokio::test]
async fn a_join_header_from_an_untrusted_sender_is_not_recorded_nor_forwarded() {
    let engine = Upstream::spawn(|_| engine_script()).await;
    let trusted_key = "sk-the-gateways-key";
    let px = proxy_toml(&format!(
        "[[routes]]\nname = \"elsewhere\"\nupstream = \"{u}\"\npath_prefix = \"/elsewhere\"\n\
         join_sources = [\"10.0.0.0/8\"]\n\
         [[routes]]\nname = \"bykey\"\nupstream = \"{u}\"\npath_prefix = \"/bykey\"\n\
         join_sources = []\njoin_keys = [\"{}\"]\n\
         [[routes]]\nname = \"local\"\nupstream = \"{u}\"\npath_prefix = \"/local\"\n",
        fingerprint(trusted_key.as_bytes()),
        u = engine.url()
    ))
    .await;
    let c = client();
    let forged = "00000000deadbeef";
    let other = "Bearer sk-a-client".to_owned();
    let gateway = format!("Bearer {trusted_key}");
    let cases = [
        ("/elsewhere", &other, None),
        ("/bykey", &other, None),
        ("/bykey", &gateway, Some(forged)),
        ("/local", &other, Some(forged)),
    ];
    for (prefix, auth, _) in &cases {
        let got = send(
            &c,
            "POST",
            &px.url(&format!("{prefix}/v1/chat/completions")),
            &[
                ("authorization", auth.as_str()),
                ("x-tokentap-join", forged),
            ],
            chat_body("m", true),
        )
        .await
        .unwrap();
        assert_eq!(got.status, 200);
    }
    let recs = px.records(cases.len()).await;
    assert_eq!(recs.len(), cases.len());
    for ((prefix, _, want), r) in cases.iter().zip(&recs) {
        assert_eq!(r.join_id.as_deref(), *want, "{prefix}");
        assert!(!r.join_sent);
        assert_eq!(r.boot_id.is_some(), want.is_some(), "{prefix}");
        assert!(r.gateway_tap.is_none());
    }
    let seen = engine.requests();
    assert_eq!(seen.len(), cases.len());
    assert!(seen.iter().all(|r| r.header("x-tokentap-join").is_none()));
    // In the report the untrusted ones are no part of any join; the trusted ones name no
    // outer record here, and are counted, not guessed.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["report", "--format", "json", "--tap"])
        .arg(&px.log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["gateway_tap"];
    assert_eq!(t["joined"], 0, "{t}");
    assert_eq!(t["unjoined_by_reason"]["inner"]["no_match"], 2, "{t}");
    assert_eq!(t["across_processes"]["unjoined"], 2, "{t}");
}
