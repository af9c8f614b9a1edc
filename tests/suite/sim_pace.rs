//! `sim --pace`: the deterministic mock. A real client over loopback sees each token at the
//! request + FIRST + k × GAP, never before, and off that only by about the lateness the sim
//! reports of itself; deltas have their bytes, answers their tokens (fewer when max_tokens
//! asks), every shape its format; 200 streams at once all arrive whole, and the lateness is on
//! `/metrics`, in each stream and on stderr at exit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::Value;
use support::load::sim_paced;
use support::*;
use tokentap::sim::{Pace, Sim};

/// One event of a stream as the client read it: its text and when its last byte arrived,
/// from just before the request was sent.
struct Event {
    text: String,
    at: Duration,
}

/// A stream read by a real client (hyper, over loopback), each event stamped on arrival.
async fn read_stream(url: &str, body: &str) -> (http::HeaderMap, Vec<Event>) {
    let c = client();
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .unwrap();
    let t0 = Instant::now();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let (mut buf, mut events) = (String::new(), Vec::new());
    while let Some(f) = body.frame().await {
        let at = t0.elapsed();
        if let Some(d) = f.unwrap().data_ref() {
            buf.push_str(std::str::from_utf8(d).unwrap());
        }
        while let Some(end) = buf.find("\n\n") {
            let text = buf[..end].to_owned();
            buf.drain(..end + 2);
            events.push(Event { text, at });
        }
    }
    assert!(buf.is_empty(), "the stream ended mid-event: {buf:?}");
    (headers, events)
}

/// The same, on a thread and a runtime of its own: the client's stamps wait for nothing else.
fn read_stream_apart(url: String, body: &'static str) -> Vec<Event> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(read_stream(&url, body)).1
    })
    .join()
    .unwrap()
}

fn data(e: &Event) -> Option<Value> {
    let d = e.text.lines().find_map(|l| l.strip_prefix("data: "))?;
    serde_json::from_str(d).ok()
}

/// The chat deltas' contents, in order, with their times (a token's delta is never empty: the
/// role chunk's and an abort chunk's are left out).
fn contents(events: &[Event]) -> Vec<(String, Duration)> {
    events
        .iter()
        .filter_map(|e| {
            let v = data(e)?;
            let c = v["choices"][0]["delta"]["content"].as_str()?;
            (!c.is_empty()).then(|| (c.to_owned(), e.at))
        })
        .collect()
}

/// The stream's own lateness, from its SSE comment: (writes, max).
fn lateness(events: &[Event]) -> (u64, Duration) {
    let line = events
        .iter()
        .find_map(|e| e.text.strip_prefix(": tokentap-sim lateness "))
        .expect("the stream says how late the sim ran");
    let field = |k: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(k))
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    let max = Duration::from_secs_f64(field("max_us=") / 1e6);
    (field("writes=") as u64, max)
}

const CHAT: &str = r#"{"model":"sim","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true}}"#;

/// What a client's own reading adds, beyond the sim's lateness, to an arrival's place in the
/// schedule (its thread waking, the loopback trip): generous, since the suite shares the cores.
const CLIENT: Duration = Duration::from_millis(5);

#[test]
fn a_paced_stream_keeps_its_schedule_as_a_client_sees_it() {
    let pace: Pace = "30,20,20,16".parse().unwrap();
    let sim = sim_paced(pace);
    let events = read_stream_apart(format!("http://{}/v1/chat/completions", sim.engine), CHAT);
    // vLLM's wire format: the role chunk, 20 content chunks, finish_reason on the last, the
    // usage chunk (asked for), [DONE].
    let first = data(&events[0]).unwrap();
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let got = contents(&events);
    assert_eq!(got.len(), 20);
    assert!(got.iter().all(|(c, _)| c.len() == 16), "16-byte deltas");
    let finishes: Vec<Value> = events
        .iter()
        .filter_map(data)
        .filter(|v| v["choices"].as_array().is_some_and(|c| !c.is_empty()))
        .map(|v| v["choices"][0]["finish_reason"].clone())
        .collect();
    assert_eq!(finishes.last().unwrap(), "stop");
    assert!(finishes[..finishes.len() - 1].iter().all(Value::is_null));
    let usage = events
        .iter()
        .filter_map(data)
        .find(|v| v["usage"].is_object());
    assert_eq!(usage.unwrap()["usage"]["completion_tokens"], 20);
    assert_eq!(events.last().unwrap().text, "data: [DONE]");
    let (writes, late) = lateness(&events);
    assert_eq!(writes, 20, "one write a token");

    // Never early: token k arrives no sooner than FIRST + k × GAP after the request was sent.
    for (k, (_, at)) in got.iter().enumerate() {
        assert!(*at >= pace.due(k as u32), "token {k} at {at:?}: early");
    }
    // On the schedule, not on the last write. A client's read is never early, only late by its
    // own wake-up (which a loaded machine stretches to several milliseconds on any one token),
    // so the best-read token of a stretch shows where the schedule stands: the last five
    // tokens' best offset from their due instants equals the first five's within the sim's
    // lateness and a client's grain. A pacer that slept a gap after each write would drift by
    // its lateness at every token. Each single gap is held loosely (a late read on a busy core).
    let off = |k: usize| got[k].1 - pace.due(k as u32);
    let best = |ks: std::ops::Range<usize>| ks.map(off).min().unwrap();
    let (head, tail) = (best(0..5), best(15..20));
    assert!(
        tail.abs_diff(head) <= late + CLIENT,
        "the schedule moved by {:?} over 15 tokens, sim late ≤ {late:?}",
        tail.abs_diff(head)
    );
    for w in got.windows(2) {
        let gap = w[1].1.abs_diff(w[0].1);
        assert!(
            gap.abs_diff(pace.gap) <= late + 4 * CLIENT,
            "gap {gap:?}, sim late ≤ {late:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_streams_at_once_arrive_whole_and_the_lateness_is_exposed() {
    let sim = sim_paced("20,10,30,16".parse().unwrap());
    let url = format!("http://{}/v1/chat/completions", sim.engine);
    let streams: Vec<_> = (0..200)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { read_stream(&url, CHAT).await.1 })
        })
        .collect();
    let mut worst = Duration::ZERO;
    for s in streams {
        let events = s.await.unwrap();
        let got = contents(&events);
        assert_eq!(got.len(), 30);
        assert!(got.iter().all(|(c, _)| c.len() == 16));
        let usage = events
            .iter()
            .filter_map(data)
            .find(|v| v["usage"].is_object());
        assert_eq!(usage.unwrap()["usage"]["completion_tokens"], 30);
        assert_eq!(events.last().unwrap().text, "data: [DONE]");
        let (writes, late) = lateness(&events);
        assert_eq!(writes, 30);
        worst = worst.max(late);
    }
    let m = send(
        &client(),
        "GET",
        &format!("http://{}/metrics", sim.engine),
        &[],
        vec![],
    )
    .await
    .unwrap();
    let text = String::from_utf8(m.body).unwrap();
    let n = "tokentap_sim_pace_write_lateness_seconds";
    assert_eq!(metric(&text, &format!("{n}_count ")), Some(6000.0));
    assert_eq!(
        metric(&text, &format!("{n}_bucket{{le=\"+Inf\"}} ")),
        Some(6000.0)
    );
    assert_eq!(
        metric(&text, "tokentap_sim_paced_answers_total "),
        Some(200.0)
    );
    assert_eq!(metric(&text, "tokentap_sim_requests_running "), Some(0.0));
    let max = metric(&text, "tokentap_sim_pace_write_lateness_max_seconds ").unwrap();
    // The sim's maximum is the streams' (their comments round to 0.1 µs).
    assert!(
        (max - worst.as_secs_f64()).abs() < 1e-6,
        "max {max}, streams' worst {worst:?}"
    );
    assert!(text.contains(
        "tokentap_sim_pace_info{first_ms=\"20\",gap_ms=\"10\",tokens=\"30\",delta_bytes=\"16\"} 1"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_is_paced_and_max_tokens_can_only_shorten_an_answer() {
    let sim = sim_paced("5,2,8,16".parse().unwrap());
    let url = |p: &str| format!("http://{}{p}", sim.engine);
    // Completions: 8 texts of 16 bytes, `stop`.
    let (_, ev) = read_stream(
        &url("/v1/completions"),
        r#"{"model":"sim","prompt":"x","stream":true}"#,
    )
    .await;
    let texts: Vec<Value> = ev.iter().filter_map(data).collect();
    assert_eq!(texts.len(), 8);
    assert!(texts
        .iter()
        .all(|v| v["choices"][0]["text"].as_str().unwrap().len() == 16));
    assert_eq!(texts[7]["choices"][0]["finish_reason"], "stop");
    // Responses: 8 output_text deltas, then response.completed.
    let (_, ev) = read_stream(
        &url("/v1/responses"),
        r#"{"model":"sim","input":"x","stream":true}"#,
    )
    .await;
    let deltas: Vec<Value> = ev
        .iter()
        .filter_map(data)
        .filter(|v| v["type"] == "response.output_text.delta")
        .collect();
    assert_eq!(deltas.len(), 8);
    assert!(deltas
        .iter()
        .all(|v| v["delta"].as_str().unwrap().len() == 16));
    let done = data(ev.last().unwrap()).unwrap();
    assert_eq!(done["type"], "response.completed");
    assert_eq!(done["response"]["usage"]["output_tokens"], 8);
    assert_eq!(lateness(&ev).0, 8);
    // Messages, asking for 3: 3 deltas, stop reason max_tokens.
    let (_, ev) = read_stream(
        &url("/v1/messages"),
        r#"{"model":"sim","messages":[{"role":"user","content":"x"}],"max_tokens":3,"stream":true}"#,
    )
    .await;
    let typed = |t: &str| -> Vec<Value> {
        ev.iter()
            .filter_map(data)
            .filter(|v| v["type"] == t)
            .collect()
    };
    assert_eq!(typed("content_block_delta").len(), 3);
    let end = &typed("message_delta")[0];
    assert_eq!(end["delta"]["stop_reason"], "max_tokens");
    assert_eq!(end["usage"]["output_tokens"], 3);
    assert_eq!(typed("message_stop").len(), 1);
    // Chat asking for fewer: honoured, `length`; asking for more: the pace's count, `stop`.
    for (max, n, finish) in [(5, 5, "length"), (500, 8, "stop")] {
        let body = format!(
            r#"{{"model":"sim","messages":[{{"role":"user","content":"x"}}],"max_tokens":{max},"stream":true,"stream_options":{{"include_usage":true}},"ignore_eos":true,"min_tokens":400}}"#
        );
        let (_, ev) = read_stream(&url("/v1/chat/completions"), &body).await;
        assert_eq!(contents(&ev).len(), n);
        let fin: Vec<Value> = ev
            .iter()
            .filter_map(data)
            .filter_map(|v| v["choices"][0]["finish_reason"].as_str().map(Value::from))
            .collect();
        assert_eq!(fin, vec![Value::from(finish)]);
        let usage = ev.iter().filter_map(data).find(|v| v["usage"].is_object());
        assert_eq!(usage.unwrap()["usage"]["completion_tokens"], n);
    }
    // Not streamed: the whole answer at the last token's instant, its lateness in a header.
    let t0 = Instant::now();
    let got = send(
        &client(),
        "POST",
        &url("/v1/chat/completions"),
        &[],
        br#"{"model":"sim","messages":[{"role":"user","content":"x"}]}"#.to_vec(),
    )
    .await
    .unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(5 + 7 * 2),
        "never early"
    );
    let v: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 8);
    assert_eq!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .len(),
        8 * 16
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let h = got.headers[tokentap::sim::http::LATENESS_HEADER]
        .to_str()
        .unwrap();
    assert!(h.starts_with("writes=1 mean_us="), "{h}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_paced_sim_ends_its_streams_aborted() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pace: Pace = "5,50,1000".parse().unwrap();
    let sim = Sim::start_paced(pace, "sim", 7, l, None, None)
        .await
        .unwrap();
    let url = format!("http://{}/v1/chat/completions", sim.engine);
    let reading = tokio::spawn(async move { read_stream(&url, CHAT).await.1 });
    tokio::time::sleep(Duration::from_millis(130)).await;
    let paced = sim.paced().unwrap();
    sim.stop(Duration::from_secs(5)).await;
    let ev = reading.await.unwrap();
    let made = contents(&ev).len();
    assert!((1..1000).contains(&made), "{made}");
    let fin: Vec<Value> = ev
        .iter()
        .filter_map(data)
        .filter_map(|v| v["choices"][0]["finish_reason"].as_str().map(Value::from))
        .collect();
    assert_eq!(fin, vec![Value::from("abort")]);
    let usage = ev.iter().filter_map(data).find(|v| v["usage"].is_object());
    assert_eq!(usage.unwrap()["usage"]["completion_tokens"], made);
    assert_eq!(ev.last().unwrap().text, "data: [DONE]");
    assert_eq!(lateness(&ev).0, made as u64);
    let s = paced.late.summary();
    assert_eq!((s.writes, s.answers), (made as u64, 1));
}

/// Kills the child if the test ends before it exits.
struct Child(Option<std::process::Child>);

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokentap_sim_pace_says_how_late_it_ran_when_stopped() {
    let mut child = Child(Some(
        Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(["sim", "--listen", "127.0.0.1:0", "--model", "sim"])
            .args(["--pace", "2,1,4,16"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let stderr = child.0.as_mut().unwrap().stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    let hello = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(hello.contains("PACED mock"), "{hello}");
    let base = hello.split("on ").last().unwrap().trim().to_owned();
    for _ in 0..3 {
        let (_, ev) = read_stream(&format!("{base}/chat/completions"), CHAT).await;
        assert_eq!(contents(&ev).len(), 4);
    }
    let pid = child.0.as_ref().unwrap().id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut owned = child.0.take().unwrap();
    let status = tokio::task::spawn_blocking(move || owned.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    let summary = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        summary.starts_with("tokentap sim: pace 2,1,4,16: 12 paced writes in 3 answers; write lateness (the sim's own) mean "),
        "{summary}"
    );
    for f in ["p50 ", "p99 ", "max "] {
        assert!(summary.contains(f), "{summary}");
    }
}
