//! Fleet SLO figures from two tokentap replicas (docs/cluster.md, "Which figure is exact"):
//! the per-request SLO counts summed over the replicas equal what the union of their records
//! gives, failures counted as misses; a custom threshold is a TTFT bucket edge, so the count at
//! it is exact too; and the p95 interpolated from the summed histograms is only as good as its
//! bucket. Over real sockets: an in-process upstream, two proxies, a real client.

use std::collections::BTreeMap;
use std::time::Duration;

use tokentap::meter::{Outcome, RequestRecord};
use tokentap_test_support as support;

use support::{client, proxy, send, Script, Upstream};

const SLO: &str = "[slo]\nttft_interactive_ms = 150\ngoodput_ttft_ms = 150\ngoodput_tok_s = 30\n";

/// The cases, each (name, how many): what the upstream does for a request is its `x-case`.
const CASES: &[(&str, usize)] = &[
    ("fast", 8),     // TTFT 10 ms, 5 ms between tokens: meets everything
    ("slow", 4),     // TTFT 250 ms: misses interactive (150), strict, code completion
    ("crawl", 4),    // 60 ms between tokens: misses interactive coding and goodput's 30 tok/s
    ("err", 3),      // a streamed request answered 500: a miss of every SLO
    ("throttle", 2), // 429: a miss of every SLO
    ("bad", 2),      // 400, the client's own fault: in none
    ("plain", 3),    // served, not streamed: goodput only
];

fn script(case: &str) -> Script {
    let ms = Duration::from_millis;
    match case {
        "fast" => Script::chat_stream(ms(10), ms(5), 5, true),
        "slow" => Script::chat_stream(ms(250), ms(5), 3, true),
        "crawl" => Script::chat_stream(ms(10), ms(60), 3, true),
        "cancel" => Script::chat_stream(ms(10), ms(50), 60, true),
        "err" => Script::json(500, r#"{"error":{"message":"boom"}}"#),
        "throttle" => Script::json(429, r#"{"error":{"message":"slow down"}}"#),
        "bad" => Script::json(400, r#"{"error":{"message":"bad model"}}"#),
        _ => Script::json(
            200,
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#,
        ),
    }
}

/// Each SLO's standing for one record, as docs/cluster.md states the rule (written out here
/// apart from the crate's).
fn standing(r: &RequestRecord, slo: &str) -> Option<bool> {
    let (ttft, tok_s) = (
        r.ttft_ms,
        r.tpot_ms.filter(|t| *t > 0.0).map(|t| 1000.0 / t),
    );
    let client_fault = r.status != 429 && (400..500).contains(&r.status);
    if !r.api.generates() || client_fault || r.outcome == Outcome::ClientCancelled {
        return None;
    }
    let served = r.outcome == Outcome::Ok && r.status != 429;
    if !served {
        return (r.stream || slo == "goodput").then_some(false);
    }
    match slo {
        "interactive" => ttft.map(|t| t <= 150.0),
        "strict" => ttft.map(|t| t <= 200.0),
        "code_completion" => ttft.map(|t| t <= 100.0),
        "agents" => ttft.map(|t| t <= 1000.0),
        "reading_speed" => tok_s.map(|s| s >= 6.0),
        "interactive_coding" => tok_s.map(|s| s >= 60.0),
        _ => Some(ttft.is_none_or(|t| t <= 150.0) && tok_s.is_none_or(|s| s >= 30.0)),
    }
}

/// `tokentap_slo_requests_total` of one scrape: (slo, result) → count, over routes and keys.
fn slo_counts(text: &str, into: &mut BTreeMap<(String, String), f64>) {
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("tokentap_slo_requests_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ").unwrap();
        let label = |k: &str| {
            let at = labels.find(&format!("{k}=\"")).unwrap() + k.len() + 2;
            labels[at..].split('"').next().unwrap().to_owned()
        };
        *into.entry((label("slo"), label("result"))).or_default() += value.parse::<f64>().unwrap();
    }
}

/// The TTFT histogram summed over scrapes: upper edge → cumulative count.
fn ttft_buckets(texts: &[String]) -> Vec<(f64, f64)> {
    let mut by_le: BTreeMap<String, f64> = BTreeMap::new();
    for line in texts.iter().flat_map(|t| t.lines()) {
        if let Some(rest) = line.strip_prefix("tokentap_time_to_first_token_seconds_bucket{") {
            let (labels, value) = rest.split_once("} ").unwrap();
            let le = labels
                .split("le=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            *by_le.entry(le.to_owned()).or_default() += value.parse::<f64>().unwrap();
        }
    }
    let mut v: Vec<(f64, f64)> = by_le
        .into_iter()
        .map(|(le, n)| (le.parse().unwrap_or(f64::INFINITY), n))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Prometheus's `histogram_quantile`: linear within the bucket that holds the rank.
fn interpolated(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().unwrap().1;
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, cum) in buckets {
        if cum >= rank {
            return lower.0 + (le - lower.0) * (rank - lower.1) / (cum - lower.1);
        }
        lower = (le, cum);
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_sum_to_the_records_exactly_and_the_p95_is_only_interpolated() {
    let up = Upstream::spawn(|r| match r.request_line().starts_with("GET") {
        true => Script::json(
            200,
            r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#,
        ),
        false => script(&r.header("x-case").unwrap_or_default()),
    })
    .await;
    let mut replicas = [proxy(&up.url(), SLO).await, proxy(&up.url(), SLO).await];
    let c = client();
    let mut sent = 0;
    for &(case, n) in CASES {
        for i in 0..n {
            let p = &replicas[(sent + i) % 2];
            let key = if i % 2 == 0 {
                "Bearer alpha"
            } else {
                "Bearer beta"
            };
            let body = support::chat_body("m", case != "plain");
            let headers = [("x-case", case), ("authorization", key)];
            send(&c, "POST", &p.url("/v1/chat/completions"), &headers, body)
                .await
                .unwrap();
        }
        sent += n;
    }
    // A listing, and a stream its client leaves after the first token: in no SLO.
    send(&c, "GET", &replicas[1].url("/v1/models"), &[], Vec::new())
        .await
        .unwrap();
    let mut s = support::raw_chat_with(replicas[0].addr, &[("x-case", "cancel")]).await;
    support::read_until(&mut s, "t0 ").await;
    drop(s);
    let total = sent + 2;

    // The union of both replicas' records: every request once.
    let mut records = replicas[0].records(total / 2 + 1).await;
    let mut tries = 0;
    while records.len() + replicas[1].records(0).await.len() < total && tries < 100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        records = replicas[0].records(0).await;
        tries += 1;
    }
    records.extend(replicas[1].records(0).await);
    assert_eq!(records.len(), total);

    let mut scrapes = Vec::new();
    let mut summed = BTreeMap::new();
    for p in &replicas {
        let (status, text) = p.admin_get("/metrics").await;
        assert_eq!(status, 200);
        slo_counts(&text, &mut summed);
        scrapes.push(text);
    }

    // Exact: the summed counts are the records' own, SLO by SLO.
    for slo in tokentap::slo::Slos::NAMES {
        let mut want = [0.0, 0.0];
        for r in &records {
            match standing(r, slo) {
                Some(true) => want[0] += 1.0,
                Some(false) => want[1] += 1.0,
                None => {}
            }
        }
        let got = |result: &str| summed.get(&(slo.to_owned(), result.to_owned())).copied();
        assert_eq!(
            [got("met"), got("missed")],
            [Some(want[0]), Some(want[1])],
            "{slo}"
        );
    }
    // Who is judged does not hang on timing: 21 streams (8 + 4 + 4 served, 3 + 2 failed) for
    // each TTFT SLO; goodput adds the 3 served without a stream; failures are misses.
    let judged =
        |slo: &str| summed[&(slo.into(), "met".into())] + summed[&(slo.into(), "missed".into())];
    assert_eq!(judged("interactive"), 21.0);
    assert_eq!(judged("goodput"), 24.0);
    assert!(summed[&("agents".into(), "missed".into())] >= 5.0);
    assert_eq!(
        summed[&("interactive".into(), "met".into())],
        12.0,
        "fast and crawl"
    );

    // The custom 150 ms is a bucket edge, so the count at it is exact too, but of the streams
    // served with a TTFT only: the failed ones are in no histogram.
    let buckets = ttft_buckets(&scrapes);
    let at_edge = buckets.iter().find(|b| (b.0 - 0.15).abs() < 1e-12);
    let with_ttft: Vec<f64> = records.iter().filter_map(|r| r.ttft_ms).collect();
    let under = with_ttft.iter().filter(|t| **t <= 150.0).count() as f64;
    assert_eq!(at_edge.map(|b| b.1), Some(under), "{buckets:?}");

    // Interpolated: the p95 of the summed histograms lies in the bucket of the exact p95, and
    // no closer than that.
    let mut served: Vec<f64> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Ok)
        .filter_map(|r| r.ttft_ms)
        .collect();
    served.sort_by(f64::total_cmp);
    let exact = served[(0.95 * served.len() as f64).ceil() as usize - 1] / 1000.0;
    let guess = interpolated(&buckets, 0.95);
    let upper = buckets.iter().find(|b| b.0 >= exact).unwrap().0;
    let lower = buckets
        .iter()
        .rev()
        .find(|b| b.0 < exact)
        .map_or(0.0, |b| b.0);
    assert!(
        lower < guess && guess <= upper,
        "{lower} < {guess} <= {upper}"
    );
    assert!(lower < exact && exact <= upper);

    for p in &mut replicas {
        p.shutdown().await;
    }
}

/// `report --since --until` reads the records of a window alone, in every view and in the
/// queries `--clickhouse` runs, so that its exact percentiles cover a rule's window.
#[test]
fn report_reads_the_records_of_a_window() {
    use support::records::{jsonl, Mix};
    let dir = support::scratch("window");
    let log = dir.join("live.jsonl");
    std::fs::write(&log, jsonl(0, 400, 7, Mix::Live)).unwrap();
    let records = support::load::read_records(&log);
    let mut times: Vec<std::time::SystemTime> = records
        .iter()
        .map(|r| humantime::parse_rfc3339(&r.ts).unwrap())
        .collect();
    times.sort();
    let (since, until) = (times[100], times[300]);
    let inside = times.iter().filter(|t| **t >= since && **t < until).count();
    assert!((200..400).contains(&inside), "{inside}");
    let (s, u) = (
        humantime::format_rfc3339_micros(since).to_string(),
        humantime::format_rfc3339_micros(until).to_string(),
    );
    let report = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .arg("report")
            .args(args)
            .output()
            .unwrap()
    };
    let path = log.to_str().unwrap();
    let out = report(&["--format", "json", "--since", &s, "--until", &u, path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["records"], inside);
    assert_eq!(j["window"]["since"], s.as_str());
    assert_eq!(j["window"]["outside"], 400 - inside);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{} records left out", 400 - inside)),
        "{stderr}"
    );
    // The whole log reads every record, and says no window.
    let whole = report(&["--format", "json", path]);
    let j: serde_json::Value = serde_json::from_slice(&whole.stdout).unwrap();
    assert_eq!(j["records"], 400);
    assert!(j.get("window").is_none());
    // The text view says which records it read.
    let text = report(&["--since", &s, path]);
    let first = String::from_utf8_lossy(&text.stdout)
        .lines()
        .next()
        .unwrap()
        .to_owned();
    assert!(first.contains(&format!("ts from {s}")), "{first}");
    // The queries read the window's rows.
    let sql = report(&["--sql", "--since", &s, "--until", &u]);
    let sql = String::from_utf8_lossy(&sql.stdout).to_string();
    let sub =
        format!("(SELECT *, ts_us, date FROM default.requests WHERE ts >= '{s}' AND ts < '{u}')");
    assert!(sql.contains(&sub), "{sql}");
    assert!(!sql.contains("FROM default.requests\n"), "{sql}");
    // A bound that is no time, or a window that holds nothing, is a usage error.
    assert_eq!(report(&["--since", "soon", path]).status.code(), Some(64));
    assert_eq!(
        report(&["--since", &u, "--until", &s, path]).status.code(),
        Some(64)
    );
}
