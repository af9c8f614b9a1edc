//! The request's ids: the client's, read from the first `request_id.headers` it sent, or made
//! here when none came and `request_id.generate` is on — then sent upstream in the first of
//! those headers and returned to the client in the same header; and the upstream's, from its
//! response headers of those names (its body's id, which the meter reads, comes first).
//!
//! A client's header is forwarded as it came; only the record's copy is bounded
//! (`meter::ids::MAX_ID_BYTES`).

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::RequestIdConfig;
use crate::meter::ids;

/// An id tokentap made for a request: the header it went upstream in, to be returned in the
/// client's response.
pub type Made = (HeaderName, HeaderValue);

/// The first of `names` that `headers` carry a usable id in, bounded.
pub fn read(headers: &HeaderMap, names: &[HeaderName]) -> Option<String> {
    names
        .iter()
        .find_map(|n| headers.get(n).and_then(|v| ids::from_header(v.as_bytes())))
}

/// The client's request id for its record; when none came and generation is on, a new one,
/// put into `headers` (what goes upstream) and handed back to be returned to the client.
pub fn client(cfg: &RequestIdConfig, headers: &mut HeaderMap) -> (Option<String>, Option<Made>) {
    if let Some(id) = read(headers, &cfg.headers) {
        return (Some(id), None);
    }
    let Some(name) = cfg.headers.first().filter(|_| cfg.generate) else {
        return (None, None);
    };
    let id = generate();
    match HeaderValue::from_str(&id) {
        Ok(v) => {
            headers.insert(name.clone(), v.clone());
            (Some(id), Some((name.clone(), v)))
        }
        // 32 hex digits are always a valid header value.
        Err(_) => (None, None),
    }
}

/// A new id: 128 random bits as 32 lowercase hex digits.
fn generate() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(generate: bool) -> RequestIdConfig {
        RequestIdConfig {
            headers: vec![
                HeaderName::from_static("x-request-id"),
                HeaderName::from_static("x-correlation-id"),
            ],
            generate,
        }
    }

    #[test]
    fn the_first_header_sent_wins_and_an_id_is_made_only_when_asked() {
        let mut h = HeaderMap::new();
        h.insert("x-correlation-id", HeaderValue::from_static("corr"));
        assert_eq!(client(&cfg(true), &mut h), (Some("corr".into()), None));
        h.insert("x-request-id", HeaderValue::from_static("req"));
        assert_eq!(client(&cfg(true), &mut h), (Some("req".into()), None));
        // An empty header is no id.
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static(""));
        assert_eq!(client(&cfg(false), &mut h), (None, None));
        let (id, made) = client(&cfg(true), &mut h);
        let id = id.unwrap_or_default();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        let (name, value) = made.unwrap_or_else(|| panic!("an id is made"));
        assert_eq!(
            (name.as_str(), value.as_bytes()),
            ("x-request-id", id.as_bytes())
        );
        assert_eq!(h.get("x-request-id"), Some(&value), "it goes upstream");
    }
}
