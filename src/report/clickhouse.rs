//! `tokentap report --clickhouse URL`: the report of the records in a ClickHouse table, with
//! the figures computed where the records are. The queries ([`super::sql`]) return one row per
//! group (cell, key, API shape, bucket) with its counts and exact nearest-rank percentiles;
//! only the two gateway sections fetch their rows, because their bootstrap intervals resample
//! the pairs. What comes back fills the file reader's structure: one renderer for both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Uri};
use http_body_util::BodyExt;

use super::acc::{rate_label, CellAcc, CellIn, Kind, Read};
use super::board::{level_key, BoardRec};
use super::hop::HopRec;
use super::row::{level_of, TapRow};
use super::shapes::{saved, CacheBucket, CacheSplit, ShapeRow, TurnRow};
use super::sql::{Params, Query};
use super::tap::TapRec;
use super::values::{Method, Values};
use super::{KeyRow, Traffic};
use crate::keys::Secret;
use crate::post::{connect, post, tls_for, Tls};

/// How long a connection to the server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ClickHouseError {
    #[error("--clickhouse {0}: {1}")]
    Url(String, String),
    #[error("--clickhouse-table {0}: {1}")]
    Table(String, &'static str),
    #[error("ClickHouse at {url}: {query} query: {message}")]
    Query {
        url: String,
        query: &'static str,
        message: String,
    },
    #[error("ClickHouse at {url}: table {table} holds no record")]
    Empty { url: String, table: String },
}

/// Where the records are: the server's HTTP interface, its credentials, the table.
pub struct Source {
    pub endpoint: Uri,
    /// The URL's own path, ending in `/`.
    pub base: String,
    /// `Authorization`, when there are credentials.
    pub auth: Vec<(HeaderName, Secret<HeaderValue>)>,
    /// `database.table`.
    pub table: String,
}

impl Source {
    /// `url`: `http[s]://[user[:password]@]host[:port][/path]`; without credentials in it,
    /// `CLICKHOUSE_USER` and `CLICKHOUSE_PASSWORD` are used when set. `table`: `[db.]table`.
    pub fn new(url: &str, table: &str) -> Result<Source, ClickHouseError> {
        let bad = |m: &str| ClickHouseError::Url(redact(url), m.to_owned());
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("not a URL (http://host:8123)"))?;
        if scheme != "http" && scheme != "https" {
            return Err(bad("the scheme must be http or https"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        let (user, host) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let endpoint: Uri = format!("{scheme}://{host}")
            .parse()
            .map_err(|e| bad(&format!("{e}")))?;
        if endpoint.host().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        if path.contains('?') {
            return Err(bad("no query string: the table is --clickhouse-table"));
        }
        let base = if path.ends_with('/') {
            path.to_owned()
        } else {
            format!("{path}/")
        };
        let creds = match user {
            Some(u) => {
                let (name, pw) = u.split_once(':').unwrap_or((u, ""));
                Some((unescape(name), unescape(pw)))
            }
            None => std::env::var("CLICKHOUSE_USER")
                .ok()
                .filter(|u| !u.is_empty())
                .map(|u| (u, std::env::var("CLICKHOUSE_PASSWORD").unwrap_or_default())),
        };
        let auth = match creds {
            Some((name, pw)) => {
                let token = crate::config::basic_auth(&name, &pw);
                vec![(
                    header::AUTHORIZATION,
                    Secret::new(
                        HeaderValue::from_str(&token).map_err(|_| bad("unusable credentials"))?,
                    ),
                )]
            }
            None => Vec::new(),
        };
        let table = qualified(table)?;
        Ok(Source {
            endpoint,
            base,
            auth,
            table,
        })
    }

    /// The server, without credentials (for messages).
    pub fn name(&self) -> String {
        format!(
            "{}{}",
            self.endpoint.to_string().trim_end_matches('/'),
            self.base
        )
    }
}

/// `[db.]table` with plain identifiers, as `db.table`.
pub(super) fn qualified(t: &str) -> Result<String, ClickHouseError> {
    let ident = |s: &str| {
        let mut cs = s.chars();
        cs.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let (db, name) = t.split_once('.').unwrap_or(("default", t));
    if !ident(db) || !ident(name) {
        return Err(ClickHouseError::Table(
            t.to_owned(),
            "names are letters, digits and _ (not starting with a digit): [DATABASE.]TABLE",
        ));
    }
    Ok(format!("{db}.{name}"))
}

/// A URL with its password replaced.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = &url[s + 3..at];
            let name = user.split(':').next().unwrap_or_default();
            format!("{}{}:***{}", &url[..s + 3], name, &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Percent-decoding of a URL's user or password.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

use super::answer::{count, float, int, known, median, opt_text, slo_p95, text, time, Row};

/// Run the report's queries and gather their answers.
pub(super) fn read(src: &Source, p: &Params, budget: usize) -> Result<Read, ClickHouseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClickHouseError::Query {
            url: src.name(),
            query: "totals",
            message: format!("runtime: {e}"),
        })?;
    rt.block_on(read_all(src, p, budget))
}

async fn read_all(src: &Source, p: &Params, budget: usize) -> Result<Read, ClickHouseError> {
    let tls =
        tls_for(&src.endpoint).map_err(|e| ClickHouseError::Url(src.name(), e.to_string()))?;
    let mut answers: BTreeMap<&'static str, Vec<Row>> = BTreeMap::new();
    for q in super::sql::queries(p).into_iter().filter(|q| q.report) {
        let rows = run(src, tls.as_ref(), &q).await?;
        answers.insert(q.name, rows);
    }
    let mut take = |name: &'static str| answers.remove(name).unwrap_or_default();
    let totals = take("totals");
    let (records, live) = totals
        .first()
        .map_or((0, 0), |t| (count(t, "records"), count(t, "live")));
    let total = |name: &str| totals.first().map_or(0, |t| count(t, name));
    let (armed, streams, no_usage) = (total("armed"), total("streams"), total("no_usage"));
    if records == 0 {
        return Err(ClickHouseError::Empty {
            url: src.name(),
            table: src.table.clone(),
        });
    }
    // ClickHouse sorts NULL last; the report lists a cell without an arm first.
    let mut cells: Vec<CellIn> = take("cells").iter().map(cell).collect();
    super::traffic::drop_single_arm(&mut cells, armed > 0);
    super::acc::sort_cells(&mut cells);
    let (classes, other) = super::traffic::from_rows(&take("traffic"), text, count);
    let mut keys: Vec<KeyRow> = take("keys").iter().map(key).collect();
    super::acc::sort_keys(&mut keys);
    let in_flight = take("in_flight").first().map_or_else(
        || known(&Row::new(), "in_flight"),
        |r| known(r, "in_flight"),
    );
    let shape_rows = |rows: Vec<Row>| rows.iter().map(|r| (text(r, "name"), shape(r))).collect();
    let by_api = shape_rows(take("by_api"));
    let by_bucket = shape_rows(take("by_bucket"));
    let prefix_cache = cache(&take("prefix_cache"));
    let by_turn = take("by_turn").iter().map(turn).collect();
    let (hop_rows, g) = (take("hop_rows"), &p.gateway);
    let hop = hop_rows.iter().map(|r| hop_rec(r, g)).collect();
    let tap = take("tap_rows").iter().filter_map(tap_rec).collect();
    let board = take("board_rows").iter().filter_map(board_rec).collect();
    Ok(Read {
        records,
        live,
        method: Method::exact(budget),
        cells,
        keys,
        in_flight,
        by_api,
        by_bucket,
        prefix_cache,
        by_turn,
        hop,
        tap,
        board,
        board_opts: Default::default(),
        traffic: Traffic::of(classes, streams, no_usage),
        other,
        streaming: Vec::new(), // NB: the table has no delivery columns yet
        whole_cell: false,
        shards: take("shards").iter().map(super::shards::row).collect(),
    })
}

/// One query, its rows as JSON objects.
async fn run(src: &Source, tls: Option<&Tls>, q: &Query) -> Result<Vec<Row>, ClickHouseError> {
    let fail = |message: String| ClickHouseError::Query {
        url: src.name(),
        query: q.name,
        message,
    };
    let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, connect(&src.endpoint, tls))
        .await
        .map_err(|_| {
            fail(format!(
                "no connection within {} s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })?
        .map_err(fail)?;
    conn.ready()
        .await
        .map_err(|e| fail(format!("connection: {e}")))?;
    // 64-bit integers as JSON numbers (18.16 quotes them by default).
    let path = format!("{}?output_format_json_quote_64bit_integers=0", src.base);
    let body = Bytes::from(format!("{}\nFORMAT JSONEachRow", q.sql));
    let req = post(&src.endpoint, &path, None, body, &src.auth)
        .map_err(|e| fail(format!("request: {e}")))?;
    let resp = conn
        .send_request(req)
        .await
        .map_err(|e| fail(format!("request: {e}")))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| fail(format!("reading the answer: {e}")))?
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        let msg: String = text.trim().chars().take(600).collect();
        return Err(fail(format!("HTTP {status}: {msg}")));
    }
    let mut rows = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str::<Row>(line) {
            Ok(r) => rows.push(r),
            // An error after the first rows comes as text in the body (the status was sent).
            Err(_) => {
                let msg: String = line.trim().chars().take(600).collect();
                return Err(fail(format!("answer line {}: {msg}", i + 1)));
            }
        }
    }
    Ok(rows)
}

/// A count: a JSON number, or a quoted one (64-bit integers, when the setting is not known).
fn cell(r: &Row) -> CellIn {
    let level = int(r, "level").unwrap_or(1).max(0) as u64;
    let live = int(r, "live_") == Some(1);
    let rate = (int(r, "rate_") == Some(1)).then_some(level as f64 / 1000.0);
    let (level, label) = match rate {
        Some(rate) => (level, rate_label(rate)),
        None if live => level_of(None, level),
        None => level_of(Some(level), 0),
    };
    let kind = Kind::of(rate.is_some(), live);
    let sent = rate.and_then(|_| Some((time(int(r, "start_ns"))?, time(int(r, "last_sent_ns"))?)));
    let k = |name: &str| Values::Known(known(r, name));
    let split = super::sql::SPLIT.map(|s| median(r, &format!("split_{s}_p50")));
    CellIn {
        bucket: text(r, "bucket_"),
        arm: opt_text(r, "arm"),
        level,
        label,
        rate,
        kind,
        acc: CellAcc {
            requests: count(r, "requests"),
            errors: count(r, "errors"),
            throttled: count(r, "throttled"),
            cancelled: count(r, "cancelled"),
            failed_streams: count(r, "failed_streams"),
            known_slo: Some([slo_p95(r, "ttft"), slo_p95(r, "tpot")]),
            buffered: 0,
            good: count(r, "good"),
            start: time(int(r, "start_ns")),
            end: time(int(r, "end_ns")),
            out_tokens: count(r, "out_tokens") as u64,
            tokens: [0; 3], // by_bucket has its own query here
            ttft: k("ttft"),
            ttfo: Values::new(false),
            tpot: k("tpot"),
            e2e: k("e2e"),
            tps: k("tok_s"),
            input: median(r, "input_tokens_p50"),
            output: median(r, "output_tokens_p50"),
            split_n: count(r, "split_n"),
            split,
            sent,
            scheduled: match (
                count(r, "scheduled_n"),
                float(r, "scheduled_min"),
                float(r, "scheduled_max"),
            ) {
                (n, Some(a), Some(b)) if n > 0 => Some((a, b, n)),
                _ => None,
            },
            queue: k("client_queue"),
            lag: k("client_lag"),
            spans: Vec::new(), // no requests read back: whole cells' figures
        },
    }
}

fn turn(r: &Row) -> (String, TurnRow) {
    let requests = count(r, "requests");
    let (known_, hits) = (count(r, "known"), count(r, "hits"));
    let (cached, prompt) = (count(r, "cached"), count(r, "prompt"));
    (
        count(r, "turn").to_string(),
        TurnRow {
            requests,
            error_rate: count(r, "errors") as f64 / requests.max(1) as f64,
            ttft_ms: known(r, "ttft"),
            input_tokens_median: float(r, "input_tokens_p50"),
            cache_hit_rate: (known_ > 0).then(|| hits as f64 / known_ as f64),
            cached_token_share: (prompt > 0).then(|| cached as f64 / prompt as f64),
        },
    )
}

fn key(r: &Row) -> KeyRow {
    let requests = count(r, "requests");
    KeyRow {
        key_id: text(r, "key"),
        arm: opt_text(r, "arm"),
        requests,
        error_rate: count(r, "errors") as f64 / requests.max(1) as f64,
        client_errors: count(r, "client_errors"),
        input_tokens: count(r, "input_tokens") as u64,
        output_tokens: count(r, "output_tokens") as u64,
        ttft_ms: known(r, "ttft"),
        tpot_ms: known(r, "tpot"),
        e2e_ms: known(r, "e2e"),
    }
}

fn shape(r: &Row) -> ShapeRow {
    let requests = count(r, "requests");
    ShapeRow {
        requests,
        error_rate: count(r, "errors") as f64 / requests.max(1) as f64,
        ttft_ms: known(r, "ttft"),
        ttfo_ms: known(r, "ttfo"),
        tpot_ms: known(r, "tpot"),
        e2e_ms: known(r, "e2e"),
        input_tokens: count(r, "input_tokens") as u64,
        output_tokens: count(r, "output_tokens") as u64,
        reasoning_tokens: count(r, "reasoning_tokens") as u64,
    }
}

fn cache(rows: &[Row]) -> Option<CacheSplit> {
    let all = rows.iter().find(|r| text(r, "scope") == "all")?;
    let (cached, prompt) = (count(all, "cached"), count(all, "prompt"));
    let (hit, miss) = (known(all, "hit"), known(all, "miss"));
    Some(CacheSplit {
        ttft_saved_ms: saved(&hit, &miss),
        hit,
        miss,
        cached_token_share: (prompt > 0).then(|| cached as f64 / prompt as f64),
        by_bucket: rows
            .iter()
            .filter(|r| text(r, "scope") == "bucket")
            .map(|r| {
                (text(r, "name"), {
                    let (hit, miss) = (known(r, "hit"), known(r, "miss"));
                    CacheBucket {
                        ttft_saved_ms: saved(&hit, &miss),
                        hit,
                        miss,
                    }
                })
            })
            .collect(),
    })
}

fn hop_rec(r: &Row, gateway: &str) -> HopRec {
    HopRec {
        pair_id: opt_text(r, "pair_id").map(Into::into),
        gateway: text(r, "arm") == gateway,
        bucket: Arc::from(text(r, "bucket_")),
        concurrency: int(r, "concurrency").map(|c| c.max(0) as u64),
        in_flight: count(r, "in_flight") as u64,
        ts: humantime::parse_rfc3339(&text(r, "ts")).ok(),
        ttft_ms: float(r, "ttft_ms"),
        upstream_headers_ms: float(r, "upstream_headers_ms"),
        tpot_ms: float(r, "tpot_ms"),
        e2e_ms: float(r, "e2e_ms").unwrap_or(0.0),
    }
}

/// A record of the gateway board; one whose outcome (or delivery verdict) this tokentap does
/// not know is left out, as the file reader skips such a line.
fn board_rec(r: &Row) -> Option<BoardRec> {
    let parse = |k: &str| r.get(k).cloned().filter(|v| !v.is_null());
    let delivery = match parse("delivery_verdict") {
        Some(v) => Some(serde_json::from_value(v).ok()?),
        None => None,
    };
    Some(BoardRec {
        pair_id: opt_text(r, "pair_id")?.into(),
        arm: Arc::from(opt_text(r, "arm")?),
        level: level_key(
            int(r, "concurrency").map(|c| c.max(0) as u64),
            float(r, "request_rate"),
            count(r, "in_flight") as u64,
        ),
        outcome: serde_json::from_value(parse("outcome")?).ok()?,
        stream: int(r, "stream") == Some(1),
        finish: int(r, "has_finish") == Some(1),
        delivery,
        output_tokens: int(r, "output_tokens").map(|c| c.max(0) as u64),
        ttft_ms: float(r, "ttft_ms"),
        itl_p50_ms: float(r, "itl_p50_ms"),
        itl_p99_ms: float(r, "itl_p99_ms"),
        itl_max_ms: float(r, "itl_max_ms"),
    })
}

/// A tap record; one whose side (or join, or reason) this tokentap does not know is left out,
/// as the file reader skips such a line.
fn tap_rec(r: &Row) -> Option<TapRec> {
    let parse = |k: &str| r.get(k).cloned().filter(|v| !v.is_null());
    let side = serde_json::from_value(parse("tap_side")?).ok()?;
    let join = match parse("tap_join") {
        Some(v) => Some(serde_json::from_value(v).ok()?),
        None => None,
    };
    let unjoined = match parse("tap_unjoined") {
        Some(v) => Some(serde_json::from_value(v).ok()?),
        None => None,
    };
    Some(TapRec {
        tap: TapRow {
            side,
            peer: int(r, "has_peer") == Some(1),
            join,
            unjoined,
            admission_ms: float(r, "tap_admission_ms"),
            relay_ms: float(r, "tap_relay_ms"),
            ttft_ms: float(r, "tap_ttft_ms"),
            relay_max_ms: None,
            relay_verdict: None,
        },
        route: Arc::from(text(r, "route")),
        bucket: Arc::from(text(r, "bucket_")),
        concurrency: int(r, "concurrency").map(|c| c.max(0) as u64),
        in_flight: count(r, "in_flight") as u64,
        gateway_overhead_ms: float(r, "gateway_overhead_ms"),
        across: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board row as ClickHouse answers it (64-bit integers quoted) reads as the file path
    /// reads the record; an outcome this tokentap does not know leaves the row out.
    #[test]
    fn a_board_row_reads_as_its_record() {
        let row = |outcome: &str| -> Row {
            let v = serde_json::json!({"arm": "nginx", "pair_id": "p1", "concurrency": "4",
                "request_rate": null, "in_flight": "3", "outcome": outcome, "stream": 1,
                "ttft_ms": 12.5, "itl_p50_ms": 20.0, "itl_p99_ms": 22.0, "itl_max_ms": 25.0,
                "output_tokens": "16", "has_finish": 1, "delivery_verdict": "buffered"});
            v.as_object().cloned().unwrap_or_default()
        };
        let b = board_rec(&row("ok"));
        let b = b.as_ref();
        assert_eq!(b.map(|b| (&*b.arm, &*b.pair_id)), Some(("nginx", "p1")));
        assert_eq!(
            b.map(|b| b.level),
            Some((super::super::Axis::Concurrency, 4))
        );
        assert_eq!(
            b.and_then(|b| b.delivery),
            Some(crate::meter::delivery::Verdict::Buffered)
        );
        assert_eq!(
            b.map(|b| (b.stream, b.finish, b.output_tokens)),
            Some((true, true, Some(16)))
        );
        assert!(board_rec(&row("no_such_outcome")).is_none());
    }

    #[test]
    fn urls_credentials_and_tables() {
        let s = Source::new("http://ops:s%40cret@127.0.0.1:8123", "tokentap.requests");
        let s = s.map_err(|e| e.to_string());
        assert!(s.is_ok(), "{s:?}", s = s.as_ref().err());
        if let Ok(s) = s {
            assert_eq!(s.name(), "http://127.0.0.1:8123/");
            assert_eq!(s.table, "tokentap.requests");
            let a = s
                .auth
                .first()
                .map(|(_, a)| a.expose().to_str().unwrap_or("").to_owned());
            assert_eq!(a.as_deref(), Some("Basic b3BzOnNAY3JldA=="));
        }
        let e = Source::new("ftp://u:hunter2@h", "requests")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("--clickhouse ftp://u:***@h: the scheme must be http or https")
        );
        let e = Source::new("http://h:8123", "x.y.z")
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.starts_with("--clickhouse-table x.y.z: names are")));
        let s = Source::new("https://h/ch", "requests").map(|s| (s.name(), s.table));
        assert_eq!(
            s.ok(),
            Some(("https://h/ch/".to_owned(), "default.requests".to_owned()))
        );
    }
}
