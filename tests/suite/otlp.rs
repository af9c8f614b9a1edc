//! OTLP/HTTP export against a receiver in this file that decodes the protobuf it gets: one span
//! per request after the GenAI conventions, the caller's `traceparent` continued, opt-in
//! forwarding of tokentap's span upstream, retries, and a dead collector that costs traffic
//! nothing (its spans are dropped and counted).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

// ---- a protobuf reader: enough of the wire format to walk any message ----

#[derive(Debug, Clone)]
enum F {
    Varint(u64),
    I64(u64),
    Len(Vec<u8>),
    I32(u32),
}

/// A decoded message: field number → values in order.
#[derive(Debug, Clone, Default)]
struct Msg(BTreeMap<u32, Vec<F>>);

fn varint(b: &[u8], i: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let x = b[*i];
        *i += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x < 0x80 {
            return v;
        }
        shift += 7;
    }
}

fn decode(b: &[u8]) -> Msg {
    let mut m = Msg::default();
    let mut i = 0;
    while i < b.len() {
        let k = varint(b, &mut i);
        let (field, wire) = ((k >> 3) as u32, k & 7);
        let v = match wire {
            0 => F::Varint(varint(b, &mut i)),
            1 => {
                let v = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
                i += 8;
                F::I64(v)
            }
            2 => {
                let n = varint(b, &mut i) as usize;
                let v = b[i..i + n].to_vec();
                i += n;
                F::Len(v)
            }
            5 => {
                let v = u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
                i += 4;
                F::I32(v)
            }
            w => panic!("wire type {w} at byte {i}: not protobuf"),
        };
        m.0.entry(field).or_default().push(v);
    }
    m
}

impl Msg {
    fn all(&self, f: u32) -> Vec<Msg> {
        self.0
            .get(&f)
            .into_iter()
            .flatten()
            .map(|v| match v {
                F::Len(b) => decode(b),
                other => panic!("field {f} is {other:?}, not a message"),
            })
            .collect()
    }
    fn one(&self, f: u32) -> Msg {
        let mut v = self.all(f);
        assert_eq!(v.len(), 1, "field {f}: {} values", v.len());
        v.remove(0)
    }
    fn bytes(&self, f: u32) -> Option<Vec<u8>> {
        match self.0.get(&f)?.first()? {
            F::Len(b) => Some(b.clone()),
            _ => None,
        }
    }
    fn str(&self, f: u32) -> Option<String> {
        self.bytes(f).map(|b| String::from_utf8(b).unwrap())
    }
    fn uint(&self, f: u32) -> Option<u64> {
        match self.0.get(&f)?.first()? {
            F::Varint(v) | F::I64(v) => Some(*v),
            F::I32(v) => Some(u64::from(*v)),
            F::Len(_) => None,
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An attribute's value, as text for strings and numbers.
#[derive(Debug, PartialEq)]
enum V {
    S(String),
    I(i64),
    D(f64),
    B(bool),
}

/// `repeated KeyValue` at field `f` → key → value.
fn attrs(m: &Msg, f: u32) -> BTreeMap<String, V> {
    m.all(f)
        .into_iter()
        .map(|kv| {
            let v = kv.one(2);
            let val = if let Some(s) = v.str(1) {
                V::S(s)
            } else if let Some(b) = v.uint(2) {
                V::B(b == 1)
            } else if let Some(i) = v.uint(3) {
                V::I(i as i64)
            } else if let Some(d) = v.uint(4) {
                V::D(f64::from_bits(d))
            } else {
                panic!("unexpected AnyValue {v:?}")
            };
            (kv.str(1).unwrap(), val)
        })
        .collect()
}

// ---- the receiver ----

struct Receiver {
    c: Collector,
}

impl Receiver {
    async fn spawn() -> Receiver {
        Receiver {
            c: Collector::spawn().await,
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.c.addr
    }

    /// Each export request: its head and decoded body, refused ones included.
    fn requests(&self) -> Vec<(String, Msg)> {
        let got = self.c.got.lock().unwrap();
        got.iter()
            .map(|(r, _)| (r.head.clone(), decode(&r.body)))
            .collect()
    }

    /// Every span received so far, with its resource's attributes.
    fn spans(&self) -> Vec<(BTreeMap<String, V>, Msg)> {
        let mut out = Vec::new();
        for (_, req) in self.requests() {
            for rs in req.all(1) {
                let resource = attrs(&rs.one(1), 1);
                for ss in rs.all(2) {
                    assert_eq!(ss.one(1).str(1).as_deref(), Some("tokentap"));
                    for s in ss.all(2) {
                        out.push((
                            BTreeMap::from_iter(resource.iter().map(|(k, v)| {
                                (
                                    k.clone(),
                                    match v {
                                        V::S(s) => V::S(s.clone()),
                                        V::I(i) => V::I(*i),
                                        V::D(d) => V::D(*d),
                                        V::B(b) => V::B(*b),
                                    },
                                )
                            })),
                            s,
                        ));
                    }
                }
            }
        }
        out
    }

    async fn wait_spans(&self, n: usize) -> Vec<(BTreeMap<String, V>, Msg)> {
        for _ in 0..400 {
            let s = self.spans();
            if s.len() >= n {
                return s;
            }
            tokio::time::sleep(MS(10)).await;
        }
        panic!("{} spans received, wanted {n}", self.spans().len());
    }
}

fn otlp(endpoint: &str, extra: &str) -> String {
    format!("[otlp]\nendpoint = \"{endpoint}\"\nflush_ms = 20\ntimeout_ms = 500\nheaders = {{ x-collector-token = \"t0ken\" }}\n{extra}")
}

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_span_per_request_continues_the_callers_trace_with_genai_attributes() {
    // The engine says which model served the request (a gateway's alias can differ).
    let up = Upstream::spawn(|_| {
        let mut s = Script::chat_stream(MS(30), MS(5), 5, true);
        s.chunks[0].1 = bytes::Bytes::from_static(
            b"data: {\"id\":\"chatcmpl-otel\",\"model\":\"served-m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        );
        s
    })
    .await;
    let rx = Receiver::spawn().await;
    let mut px = proxy(&up.url(), &otlp(&format!("http://{}", rx.addr()), "")).await;
    let got = send(
        &client(),
        "POST",
        &px.url("/v1/chat/completions"),
        &[
            ("traceparent", PARENT),
            ("tracestate", "vendor=1"),
            ("x-request-id", "client-req-1"),
        ],
        chat_body("m", true),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    // Forwarding is opt-in: the upstream gets the client's traceparent as it came.
    assert_eq!(
        up.requests()[0].header("traceparent").as_deref(),
        Some(PARENT)
    );

    let rec = px.records(1).await.remove(0);
    let spans = rx.wait_spans(1).await;
    assert_eq!(spans.len(), 1);
    let (resource, s) = &spans[0];
    assert_eq!(resource["service.name"], V::S("tokentap".into()));
    let (head, _) = rx.requests()[0].clone();
    assert!(head.starts_with("POST /v1/traces HTTP/1.1"), "{head}");
    assert!(head
        .to_ascii_lowercase()
        .contains("content-type: application/x-protobuf"));
    assert!(head.contains("x-collector-token: t0ken"), "{head}");

    assert_eq!(
        hex(&s.bytes(1).unwrap()),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(
        hex(&s.bytes(4).unwrap()),
        "00f067aa0ba902b7",
        "the caller's span is the parent"
    );
    assert_eq!(
        rec.trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    assert_eq!(Some(hex(&s.bytes(2).unwrap())), rec.span_id);
    assert_eq!(s.str(3).as_deref(), Some("vendor=1"));
    assert_eq!(s.str(5).as_deref(), Some("chat m"));
    assert_eq!(s.uint(6), Some(2), "kind SERVER");
    let (start, end) = (s.uint(7).unwrap(), s.uint(8).unwrap());
    // The span's length is the record's E2E to the nanosecond; the record here was read back
    // from the JSONL log, whose float parse may land one ulp away: one nanosecond of slack.
    let e2e_ns = (rec.e2e_ms * 1e6).round() as u64;
    assert!(
        (end - start).abs_diff(e2e_ns) <= 1,
        "{} vs {e2e_ns}",
        end - start
    );
    let a = attrs(s, 9);
    assert_eq!(a["gen_ai.operation.name"], V::S("chat".into()));
    assert_eq!(a["gen_ai.request.model"], V::S("m".into()));
    assert_eq!(a["gen_ai.response.model"], V::S("served-m".into()));
    assert_eq!(rec.response_model.as_deref(), Some("served-m"));
    // The ids: the client's as tokentap's own attribute, the upstream's completion id as the
    // GenAI conventions name it.
    assert_eq!(a["tokentap.request_id"], V::S("client-req-1".into()));
    assert_eq!(a["gen_ai.response.id"], V::S("chatcmpl-otel".into()));
    assert_eq!(rec.upstream_request_id.as_deref(), Some("chatcmpl-otel"));
    assert_eq!(a["gen_ai.usage.input_tokens"], V::I(7));
    assert_eq!(a["gen_ai.usage.output_tokens"], V::I(5));
    assert_eq!(a["gen_ai.request.max_tokens"], V::I(16));
    assert_eq!(a["server.address"], V::S("127.0.0.1".into()));
    assert_eq!(a["server.port"], V::I(i64::from(up.addr.port())));
    assert_eq!(a["http.response.status_code"], V::I(200));
    assert_eq!(a["tokentap.record_id"], V::S(rec.id.clone()));
    // The span carries the record's doubles; the record was read back from its JSON line, and
    // serde_json's default parse may land one unit in the last place away.
    let same = |k: &str, want: f64| match &a[k] {
        V::D(got) => assert!(
            (got - want).abs() <= 2.0 * f64::EPSILON * want.abs(),
            "{k}: {got} vs {want}"
        ),
        other => panic!("{k}: {other:?}"),
    };
    same("tokentap.ttft_ms", rec.ttft_ms.unwrap());
    same("tokentap.tpot_ms", rec.tpot_ms.unwrap());
    same("tokentap.e2e_ms", rec.e2e_ms);
    assert!(!a.contains_key("error.type"));
    let events = s.all(11);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].str(2).as_deref(), Some("first_token"));
    let ft = events[0].uint(1).unwrap();
    let ttft_ns = (rec.ttft_ms.unwrap() * 1e6).round() as u64;
    assert!(
        (ft - start).abs_diff(ttft_ns) <= 1,
        "{} vs {ttft_ns}",
        ft - start
    );
    assert!(rec.ttft_ms.unwrap() >= 30.0);
    assert!(!s.0.contains_key(&15), "a success leaves the status unset");
    assert_eq!(s.uint(16), Some(0x301), "sampled, with a remote parent");
    px.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_is_opt_in_roots_are_new_traces_and_unsampled_callers_are_not_exported() {
    let up = Upstream::spawn(|r| {
        if r.request_line().contains("/bad") {
            Script::json(503, r#"{"error":{"type":"overloaded"}}"#)
        } else {
            Script::chat_stream(MS(1), MS(1), 2, true)
        }
    })
    .await;
    let rx = Receiver::spawn().await;
    let mut px = proxy(
        &up.url(),
        &otlp(
            &format!("http://{}", rx.addr()),
            "forward_traceparent = true",
        ),
    )
    .await;
    let url = px.url("/v1/chat/completions");
    let c = client();
    let status = |url: String, tp: Option<&'static str>, stream: bool| {
        let c = c.clone();
        async move {
            let h: Vec<(&str, &str)> = tp.map(|v| ("traceparent", v)).into_iter().collect();
            send(&c, "POST", &url, &h, chat_body("m", stream))
                .await
                .unwrap()
                .status
        }
    };
    let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    assert_eq!(status(url.clone(), Some(PARENT), true).await, 200);
    assert_eq!(status(url.clone(), None, true).await, 200);
    assert_eq!(status(url.clone(), Some(unsampled), true).await, 200);
    assert_eq!(status(px.url("/bad"), None, false).await, 503);

    let recs = px.records(4).await;
    let spans = rx.wait_spans(3).await;
    tokio::time::sleep(MS(100)).await;
    assert_eq!(
        rx.spans().len(),
        3,
        "the unsampled caller's request was exported"
    );
    let reqs = up.requests();
    // 1: the upstream's parent is tokentap's span, in the caller's trace.
    let tp = reqs[0].header("traceparent").unwrap();
    let span1 = recs
        .iter()
        .find(|r| {
            r.trace_id.as_deref() == Some("4bf92f3577b34da6a3ce929d0e0e4736")
                && r.endpoint.contains("chat")
        })
        .unwrap();
    assert_eq!(
        tp,
        format!(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01",
            span1.span_id.as_ref().unwrap()
        )
    );
    // 2: a root: a new trace, no parent, forwarded as the upstream's parent.
    let tp2 = reqs[1].header("traceparent").unwrap();
    let root = spans
        .iter()
        .find(|(_, s)| s.bytes(4).is_none())
        .map(|(_, s)| s)
        .unwrap();
    assert_eq!(
        tp2,
        format!(
            "00-{}-{}-01",
            hex(&root.bytes(1).unwrap()),
            hex(&root.bytes(2).unwrap())
        )
    );
    assert_ne!(
        hex(&root.bytes(1).unwrap()),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    // 3: not sampled: the caller's header goes on unchanged, nothing is exported.
    assert_eq!(reqs[2].header("traceparent").as_deref(), Some(unsampled));
    // 4: the upstream's 503 is the span's error.
    let failed = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| attrs(s, 9).get("http.response.status_code") == Some(&V::I(503)))
        .unwrap();
    let a = attrs(failed, 9);
    assert_eq!(a["error.type"], V::S("upstream_error".into()));
    assert_eq!(failed.one(15).uint(3), Some(2), "status ERROR");
    let m = px.admin_get("/metrics").await.1;
    assert!(m.contains("tokentap_otlp_spans_exported_total 3"), "{m}");
    px.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_export_is_retried_and_a_dead_collector_costs_traffic_nothing() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    // A collector that is busy once: the batch is sent again and accepted.
    let rx = Receiver::spawn().await;
    rx.c.statuses.lock().unwrap().push_back(503);
    let mut px = proxy(&up.url(), &otlp(&format!("http://{}", rx.addr()), "")).await;
    assert_eq!(px.chat().await.status, 200);
    rx.wait_spans(2).await;
    let got = rx.requests();
    assert_eq!(got.len(), 2, "one refused attempt, one accepted");
    assert_eq!(
        format!("{:?}", got[0].1),
        format!("{:?}", got[1].1),
        "the same batch, sent again"
    );
    let m = px.admin_get("/metrics").await.1;
    assert!(m.contains("tokentap_otlp_spans_exported_total 1"), "{m}");
    assert!(
        m.contains("tokentap_records_dropped_total{sink=\"otlp\"} 0"),
        "{m}"
    );
    px.shutdown().await;

    // Nothing listens at the endpoint: requests go on as before; spans are dropped and counted.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut px = proxy(
        &up.url(),
        &otlp(&format!("http://{dead}"), "queue = 2\nbatch = 2"),
    )
    .await;
    let c = client();
    let t = std::time::Instant::now();
    for _ in 0..20 {
        assert_eq!(px.chat_with(&c).await.status, 200);
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "20 requests took {took:?}");
    assert_eq!(
        px.records(20).await.len(),
        20,
        "every request still has its record"
    );
    let mut dropped = 0.0;
    for _ in 0..100 {
        let m = px.admin_get("/metrics").await.1;
        dropped = metric(&m, "tokentap_records_dropped_total{sink=\"otlp\"}").unwrap_or(0.0);
        if dropped == 20.0 {
            assert!(m.contains("tokentap_otlp_spans_exported_total 0"), "{m}");
            assert!(
                m.contains("tokentap_records_dropped_total{sink=\"log\"} 0"),
                "{m}"
            );
            break;
        }
        tokio::time::sleep(MS(50)).await;
    }
    assert_eq!(
        dropped, 20.0,
        "every span of a dead collector is counted as dropped"
    );
    px.shutdown().await;
}
