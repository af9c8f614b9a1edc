//! The upstream side of the proxy over real sockets: connection reuse, a pooled connection the
//! upstream closed, the one retry, and every way an HTTP/1.1 response can be framed or broken.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::*;
use tokentap::meter::Outcome;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// What a raw upstream does with the n-th request it reads (counted over all connections).
#[derive(Clone)]
enum Act {
    /// Write these bytes and keep the connection.
    Answer(&'static str),
    /// Write these bytes, then close (without saying so in the response).
    AnswerThenClose(&'static str),
    /// Close without a byte of response.
    Close,
    /// Write these bytes, wait, then write the chunked terminator (LiteLLM's late end).
    AnswerLateEnd(&'static str, Duration),
    /// Write each piece, then wait its pause.
    Pieces(&'static [(&'static str, Duration)]),
}

struct Raw {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

impl Raw {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

async fn raw_upstream(acts: Vec<Act>) -> Raw {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let (c, r) = (connections.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let (r, acts) = (r.clone(), acts.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while read_request(&mut s, &mut buf).await.is_some() {
                    let i = r.fetch_add(1, Ordering::SeqCst);
                    match acts.get(i).or(acts.last()).unwrap() {
                        Act::Answer(bytes) => {
                            if s.write_all(bytes.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        Act::AnswerThenClose(bytes) => {
                            let _ = s.write_all(bytes.as_bytes()).await;
                            return;
                        }
                        Act::Close => return,
                        Act::AnswerLateEnd(bytes, wait) => {
                            if s.write_all(bytes.as_bytes()).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(*wait).await;
                            if s.write_all(b"0\r\n\r\n").await.is_err() {
                                return;
                            }
                        }
                        Act::Pieces(pieces) => {
                            for (bytes, pause) in pieces.iter() {
                                if s.write_all(bytes.as_bytes()).await.is_err() {
                                    return;
                                }
                                tokio::time::sleep(*pause).await;
                            }
                        }
                    }
                }
            });
        }
    });
    Raw {
        addr,
        connections,
        requests,
    }
}

const OK_JSON: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}";

async fn post(px: &TestProxy) -> Got {
    send(
        &client(),
        "POST",
        &px.url("/v1/chat/completions"),
        &[],
        chat_body("m", false),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn one_upstream_connection_serves_requests_in_turn() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(5), MS(2), 3, true)).await;
    let px = proxy(&up.url(), "").await;
    for _ in 0..5 {
        let got = px.chat().await;
        assert_eq!(got.status, 200);
        assert!(!got.body_error);
    }
    let recs = px.records(5).await;
    assert!(recs.iter().all(|r| r.outcome == Outcome::Ok));
    assert_eq!(up.connections.load(Ordering::Relaxed), 1, "kept alive");
    let (_, m) = px.admin_get("/metrics").await;
    assert!(
        m.contains("tokentap_upstream_connections_opened_total{route=\"default\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn a_pooled_connection_the_upstream_closed_is_not_used() {
    let up = raw_upstream(vec![Act::AnswerThenClose(OK_JSON)]).await;
    let px = proxy(&up.url(), "").await;
    for _ in 0..3 {
        let got = post(&px).await;
        assert_eq!(
            (got.status, got.body.as_slice()),
            (200, &b"{\"ok\":true}"[..])
        );
        tokio::time::sleep(MS(50)).await; // the upstream's FIN arrives while pooled
    }
    assert_eq!(up.requests.load(Ordering::SeqCst), 3, "nothing sent twice");
    assert_eq!(up.connections.load(Ordering::SeqCst), 3);
    let recs = px.records(3).await;
    assert!(recs
        .iter()
        .all(|r| r.outcome == Outcome::Ok && r.status == 200));
}

#[tokio::test]
async fn a_reused_connection_closed_before_answering_is_retried_once_on_a_new_one() {
    // Request 1 is answered; request 2 arrives on the same (pooled) connection, which the
    // upstream closes without a byte — as when its keep-alive timer fires at that instant.
    let up = raw_upstream(vec![Act::Answer(OK_JSON), Act::Close, Act::Answer(OK_JSON)]).await;
    let px = proxy(&up.url(), "").await;
    assert_eq!(post(&px).await.status, 200);
    let got = post(&px).await;
    assert_eq!(
        (got.status, got.body.as_slice()),
        (200, &b"{\"ok\":true}"[..])
    );
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    assert_eq!(up.requests.load(Ordering::SeqCst), 3);
    let recs = px.records(2).await;
    assert_eq!(recs.len(), 2, "one record per client request");
    assert!(recs.iter().all(|r| r.outcome == Outcome::Ok));
}

#[tokio::test]
async fn a_new_connection_closed_before_answering_is_a_502_and_not_retried() {
    let up = raw_upstream(vec![Act::Close]).await;
    let px = proxy(&up.url(), "").await;
    let got = post(&px).await;
    assert_eq!(got.status, 502);
    let j: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(j["error"]["code"], "upstream_failed");
    let r = &px.records(1).await[0];
    assert_eq!((r.status, r.outcome), (502, Outcome::UpstreamReset));
    tokio::time::sleep(MS(100)).await;
    assert_eq!(up.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn every_response_framing_arrives_whole() {
    let cases: [(&str, &str, &[u8]); 4] = [
        (
            "read to close",
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}",
            b"{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}",
        ),
        (
            "interim 100 then 200",
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi",
            b"hi",
        ),
        (
            "content-length and chunked: chunked wins",
            "HTTP/1.1 200 OK\r\ncontent-length: 99\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"hello",
        ),
        (
            "chunk extensions and a trailer",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nx-done: 1\r\n\r\n",
            b"abcde",
        ),
    ];
    for (name, wire, body) in cases {
        let close = name == "read to close";
        let act = if close {
            Act::AnswerThenClose(wire)
        } else {
            Act::Answer(wire)
        };
        let up = raw_upstream(vec![act]).await;
        let px = proxy(&up.url(), "").await;
        for _ in 0..2 {
            let got = post(&px).await;
            assert_eq!(got.status, 200, "{name}");
            assert!(!got.body_error, "{name}");
            assert_eq!(got.body, body, "{name}");
        }
        let recs = px.records(2).await;
        assert!(recs.iter().all(|r| r.outcome == Outcome::Ok), "{name}");
        if close {
            assert_eq!(recs[0].input_tokens, Some(3), "the JSON body was read");
        }
        // Read-to-close and the ambiguous CL+TE response leave the connection unusable.
        let reused = !close && !name.starts_with("content-length");
        assert_eq!(
            up.connections.load(Ordering::SeqCst),
            if reused { 1 } else { 2 },
            "{name}"
        );
    }
}

#[tokio::test]
async fn head_responses_have_no_body_and_keep_the_connection() {
    let up = raw_upstream(vec![Act::Answer(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n",
    )])
    .await;
    let px = proxy(&up.url(), "").await;
    for _ in 0..2 {
        let got = tokio::time::timeout(
            Duration::from_secs(5),
            send(&client(), "HEAD", &px.url("/v1/models"), &[], Vec::new()),
        )
        .await
        .expect("HEAD must not wait for a body")
        .unwrap();
        assert_eq!(got.status, 200);
        assert!(got.body.is_empty());
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn broken_framing_is_a_502_before_the_head_and_a_cut_after_it() {
    let up = raw_upstream(vec![Act::AnswerThenClose("HTTP/1.1 abc\r\n\r\n")]).await;
    let px = proxy(&up.url(), "").await;
    let got = post(&px).await;
    assert_eq!(got.status, 502);
    assert_eq!(px.records(1).await[0].outcome, Outcome::UpstreamReset);

    let wire = concat!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        "31\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"one\"}}]}\n\n\r\n",
        "zz\r\n"
    );
    let up = raw_upstream(vec![Act::Answer(wire)]).await;
    let px = proxy(&up.url(), "").await;
    let got = px.chat().await;
    assert_eq!(got.status, 200);
    assert!(got.body_error, "the client's stream is cut");
    assert_eq!(
        got.body, b"data: {\"choices\":[{\"delta\":{\"content\":\"one\"}}]}\n\n",
        "what came before the bad chunk line arrived"
    );
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::UpstreamReset);
    assert_eq!(r.output_tokens, Some(1));
}

/// Sockets connected to `port` in TCP state CLOSE_WAIT (the peer closed, we have not), from
/// /proc/net/tcp.
fn close_wait_to(port: u16) -> usize {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[3] == "08"
                && f[2]
                    .rsplit(':')
                    .next()
                    .is_some_and(|p| u16::from_str_radix(p, 16) == Ok(port))
        })
        .count()
}

#[tokio::test]
async fn pooled_connections_the_upstream_closed_are_let_go_without_new_traffic() {
    let up = raw_upstream(vec![Act::AnswerThenClose(OK_JSON)]).await;
    let px = proxy(&up.url(), "").await;
    assert_eq!(post(&px).await.status, 200);
    tokio::time::sleep(MS(100)).await;
    assert_eq!(
        close_wait_to(up.addr.port()),
        1,
        "pooled, closed by the upstream"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while close_wait_to(up.addr.port()) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(MS(50)).await;
    }
    assert_eq!(
        close_wait_to(up.addr.port()),
        0,
        "closed on the next upkeep tick"
    );
}

/// `n` streamed requests, one after the other, each hung up as soon as `marker` has arrived,
/// then `pause`.
async fn hang_up_after(px: &TestProxy, marker: &str, n: usize, pause: Duration) {
    for _ in 0..n {
        let mut s = raw_chat(px.addr).await;
        read_until(&mut s, marker).await;
        drop(s);
        tokio::time::sleep(pause).await;
    }
}

#[tokio::test]
async fn a_client_that_leaves_after_done_does_not_cost_the_upstream_connection() {
    // The openai client closes as soon as it has `data: [DONE]`; the terminator comes later.
    let wire = concat!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        "48\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"one\"},\"finish_reason\":\"stop\"}]}\n\n\r\n",
        "e\r\ndata: [DONE]\n\n\r\n",
    );
    let up = raw_upstream(vec![Act::AnswerLateEnd(wire, MS(300))]).await;
    let px = proxy(&up.url(), "").await;
    // After each, the terminator arrives and the connection is pooled.
    hang_up_after(&px, "[DONE]", 2, MS(500)).await;
    let recs = px.records(2).await;
    assert!(recs
        .iter()
        .all(|r| r.outcome == Outcome::Ok && r.output_tokens == Some(1)));
    assert_eq!(
        up.connections.load(Ordering::SeqCst),
        1,
        "drained and reused"
    );
    let (_, m) = px.admin_get("/metrics").await;
    assert!(m.contains("tokentap_upstream_connections_opened_total{route=\"default\"} 1"));

    // The same with `[DONE]` in a write of its own, as LiteLLM sends it: the client has it (and
    // leaves) before tokentap has looked at it, which it does right after writing it.
    const PIECES: &[(&str, Duration)] = &[
        (
            concat!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                "48\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"one\"},\"finish_reason\":\"stop\"}]}\n\n\r\n",
            ),
            Duration::from_millis(30),
        ),
        ("e\r\ndata: [DONE]\n\n\r\n", Duration::from_millis(300)),
        ("0\r\n\r\n", Duration::ZERO),
    ];
    let up = raw_upstream(vec![Act::Pieces(PIECES)]).await;
    let px = proxy(&up.url(), "").await;
    hang_up_after(&px, "[DONE]", 3, MS(500)).await;
    let recs = px.records(3).await;
    assert!(recs.iter().all(|r| r.outcome == Outcome::Ok));
    assert_eq!(
        up.connections.load(Ordering::SeqCst),
        1,
        "drained and reused"
    );

    // A client that leaves before [DONE] still closes the upstream connection at once.
    let wire = concat!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        "31\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"one\"}}]}\n\n\r\n",
    );
    let up = raw_upstream(vec![Act::AnswerLateEnd(wire, MS(2000))]).await;
    let px = proxy(&up.url(), "").await;
    hang_up_after(&px, "one", 2, MS(100)).await;
    let recs = px.records(2).await;
    assert!(recs.iter().all(|r| r.outcome == Outcome::ClientCancelled));
    assert_eq!(up.connections.load(Ordering::SeqCst), 2, "not kept");
    let (_, m) = px.admin_get("/metrics").await;
    assert!(m.contains("tokentap_upstream_connections_opened_total{route=\"default\"} 2"));
}
