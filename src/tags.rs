//! tokentap's own request headers (`x-tokentap-*`): bench's load tags as one value, from the
//! request bench sends to the record the proxy writes, and the gateway tap's join header. A
//! tag is added here (its header, how it is read and written) and as a field of the record;
//! the proxy takes every tag off, so none ever reaches an upstream.

use http::HeaderMap;
use serde::Serialize;

/// The header a gateway tap's outer route (or a route with `join_header`) adds to what it
/// forwards (its record's id). Taken off every request a route receives; recorded as `join_id`
/// only from a source the route trusts.
pub const TAP_HEADER: &str = "x-tokentap-join";

/// The [`TAP_HEADER`] value of a record id: its 16 hex digits, as the record's `id` writes it.
pub fn join_token(id: u64) -> String {
    format!("{id:016x}")
}

/// A [`TAP_HEADER`] value back to the id: exactly 16 hex digits, else nothing.
pub fn parse_join(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v)
        .ok()
        .filter(|s| s.len() == 16)
        .and_then(|s| u64::from_str_radix(s, 16).ok())
}
/// The header `tokentap bench` names its concurrency level in (taken off, recorded).
pub const CONCURRENCY_HEADER: &str = "x-tokentap-concurrency";
/// The header `tokentap bench` names an open-loop cell's offered rate in (taken off, recorded).
pub const RATE_HEADER: &str = "x-tokentap-request-rate";
/// The header `tokentap bench --multi-turn` names a request's conversation turn in (taken off,
/// recorded).
pub const TURN_HEADER: &str = "x-tokentap-turn";
/// The header `tokentap bench` names a request's prompt-shape bucket in (taken off, recorded:
/// the proxy's record then has bench's bucket, as bench's own record does). Only bench's
/// bucket names are taken; any other value is ignored.
pub const BUCKET_HEADER: &str = "x-tokentap-bucket";

/// Does `headers` hold a header of tokentap's own (named `x-tokentap-…`: every tag's and the
/// tap's join)?
pub fn has_own_headers(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("x-tokentap-"))
}

/// The bucket names the proxy takes from [`BUCKET_HEADER`].
const BUCKETS: [&str; 4] = ["long-short", "balanced", "short-long", "other"];

/// What a load generator says of one request it sends: each tag is a header on the wire and a
/// field of the record (serialised under the record's names).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadTags {
    /// The prompt-shape bucket (`x-tokentap-bucket`).
    pub bucket: Option<String>,
    /// The closed loop's concurrency level (`x-tokentap-concurrency`).
    pub concurrency: Option<u64>,
    /// The open loop's offered rate, requests a second (`x-tokentap-request-rate`).
    pub request_rate: Option<f64>,
    /// The request's conversation turn, from 1 (`x-tokentap-turn`).
    pub turn: Option<u32>,
}

impl LoadTags {
    /// Every tag's header and the record field it fills.
    pub const FIELDS: [(&'static str, &'static str); 4] = [
        (BUCKET_HEADER, "bucket"),
        (CONCURRENCY_HEADER, "concurrency"),
        (RATE_HEADER, "request_rate"),
        (TURN_HEADER, "turn"),
    ];

    /// Takes every tag's header off `headers` (whatever it holds) and reads the ones that are
    /// well formed and in range; the others are dropped.
    pub fn take(headers: &mut HeaderMap) -> LoadTags {
        // Most requests carry none: one look at the names costs less than four lookups by a
        // name to parse and hash.
        if !has_own_headers(headers) {
            return LoadTags::default();
        }
        let mut text = |name: &str| {
            let v = headers.remove(name)?;
            v.to_str().ok().map(|s| s.trim().to_owned())
        };
        let bucket = text(BUCKET_HEADER)
            .and_then(|v| BUCKETS.into_iter().find(|b| *b == v).map(str::to_owned));
        let concurrency = text(CONCURRENCY_HEADER)
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|c| (1..=1_000_000).contains(c));
        let request_rate = text(RATE_HEADER)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|r| r.is_finite() && *r > 0.0 && *r <= 1e6);
        let turn = text(TURN_HEADER)
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|t| (1..=100_000).contains(t));
        LoadTags {
            bucket,
            concurrency,
            request_rate,
            turn,
        }
    }

    /// The headers that carry these tags, in [`LoadTags::FIELDS`] order (a tag without a value
    /// has none).
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, String)> {
        [
            (BUCKET_HEADER, self.bucket.clone()),
            (CONCURRENCY_HEADER, self.concurrency.map(|c| c.to_string())),
            (RATE_HEADER, self.request_rate.map(|r| r.to_string())),
            (TURN_HEADER, self.turn.map(|t| t.to_string())),
        ]
        .into_iter()
        .filter_map(|(h, v)| Some((h, v?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap_or_else(|e| panic!("{e}")));
        }
        h
    }

    #[test]
    fn written_tags_read_back_and_are_taken_off() {
        let tags = LoadTags {
            bucket: Some("short-long".into()),
            concurrency: Some(8),
            request_rate: Some(2.5),
            turn: Some(3),
        };
        let mut h = HeaderMap::new();
        for (k, v) in tags.headers() {
            h.insert(k, v.parse().unwrap_or_else(|e| panic!("{e}")));
        }
        h.insert("x-other", "kept".parse().unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(h.len(), 1 + LoadTags::FIELDS.len());
        assert_eq!(LoadTags::take(&mut h), tags);
        assert_eq!(h.len(), 1, "only x-other is left: {h:?}");
    }

    #[test]
    fn bad_or_out_of_range_tags_are_dropped_but_still_taken_off() {
        let mut h = map(&[
            (BUCKET_HEADER, "replay"),
            (CONCURRENCY_HEADER, "0"),
            (RATE_HEADER, "inf"),
            (TURN_HEADER, "x"),
        ]);
        assert_eq!(LoadTags::take(&mut h), LoadTags::default());
        assert!(h.is_empty(), "{h:?}");
        let mut h = map(&[(CONCURRENCY_HEADER, " 16 "), (BUCKET_HEADER, "balanced")]);
        let t = LoadTags::take(&mut h);
        assert_eq!(
            (t.concurrency, t.bucket.as_deref()),
            (Some(16), Some("balanced"))
        );
        assert_eq!(t.headers().count(), 2);
    }

    /// The one look that lets a request without them skip the lookups: every header tokentap
    /// takes off is seen, whatever its case on the wire; no other header is.
    #[test]
    fn own_headers_are_seen_by_their_prefix() {
        for (name, _) in LoadTags::FIELDS {
            assert!(has_own_headers(&map(&[(name, "1")])), "{name}");
        }
        assert!(has_own_headers(&map(&[(TAP_HEADER, "1")])));
        let mut wire = HeaderMap::new();
        let upper =
            http::HeaderName::from_bytes(b"X-Tokentap-Turn").unwrap_or_else(|e| panic!("{e}"));
        wire.insert(upper, "2".parse().unwrap_or_else(|e| panic!("{e}")));
        assert!(has_own_headers(&wire));
        assert_eq!(LoadTags::take(&mut wire).turn, Some(2));
        let other = map(&[("host", "x"), ("x-tokentap", "1"), ("x-request-id", "a")]);
        assert!(!has_own_headers(&other));
        assert!(!has_own_headers(&HeaderMap::new()));
    }

    #[test]
    fn every_tag_is_a_header_and_a_field() {
        let all = LoadTags {
            bucket: Some("other".into()),
            concurrency: Some(1),
            request_rate: Some(1.0),
            turn: Some(1),
        };
        let names: Vec<&str> = all.headers().map(|(h, _)| h).collect();
        let fields: Vec<&str> = LoadTags::FIELDS.iter().map(|(h, _)| *h).collect();
        assert_eq!(names, fields);
        let json = serde_json::to_value(&all).unwrap_or_default();
        let mut keys: Vec<&str> = json
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        let mut want: Vec<&str> = LoadTags::FIELDS.iter().map(|(_, f)| *f).collect();
        want.sort_unstable();
        assert_eq!(keys, want);
        assert!(fields.iter().all(|h| h.starts_with("x-tokentap-")));
    }
}
