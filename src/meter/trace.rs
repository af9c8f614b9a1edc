//! A request's W3C trace context (<https://www.w3.org/TR/trace-context/>): the client's
//! `traceparent` continued when it sent a valid one, a new trace otherwise, and tokentap's own
//! span id for the request's span.

use http::HeaderMap;

/// The trace a request's span belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub trace_id: [u8; 16],
    /// tokentap's span for this request.
    pub span_id: [u8; 8],
    /// The caller's span, when the request carried a `traceparent`.
    pub parent: Option<[u8; 8]>,
    /// The trace flags (bit 0: sampled), the caller's when continued.
    pub flags: u8,
    /// The caller's `tracestate`, carried as it came (at most 512 bytes, as the spec allows
    /// a vendor to truncate).
    pub state: Option<String>,
}

impl Trace {
    /// The caller's context when `traceparent` is valid; a new sampled root trace otherwise.
    pub fn from_headers(h: &HeaderMap) -> Trace {
        let span_id = nonzero(fastrand::u64(..)).to_be_bytes();
        if let Some((trace_id, parent, flags)) = h
            .get("traceparent")
            .and_then(|v| parse_traceparent(v.as_bytes()))
        {
            let state = h
                .get("tracestate")
                .and_then(|v| v.to_str().ok())
                .filter(|s| !s.is_empty() && s.len() <= 512)
                .map(str::to_owned);
            return Trace {
                trace_id,
                span_id,
                parent: Some(parent),
                flags,
                state,
            };
        }
        let hi = nonzero(fastrand::u64(..));
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&hi.to_be_bytes());
        trace_id[8..].copy_from_slice(&fastrand::u64(..).to_be_bytes());
        Trace {
            trace_id,
            span_id,
            parent: None,
            flags: 1,
            state: None,
        }
    }

    /// Whether the span is to be exported: the caller's sampling decision is kept (a parent
    /// that was not sampled is not traced here either).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The `traceparent` that makes tokentap's span the upstream's parent.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.span_id),
            self.flags
        )
    }
}

fn nonzero(v: u64) -> u64 {
    if v == 0 {
        1
    } else {
        v
    }
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(HEX[(x >> 4) as usize] as char);
        s.push(HEX[(x & 15) as usize] as char);
    }
    s
}

fn unhex<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None, // the spec allows lowercase only
    };
    let mut out = [0u8; N];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        out[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// `version-traceid-parentid-flags`. Version `ff` and all-zero ids are invalid; a later version
/// is read by its first four fields, as the spec asks.
pub fn parse_traceparent(v: &[u8]) -> Option<([u8; 16], [u8; 8], u8)> {
    let v = v.trim_ascii();
    if v.len() < 55 {
        return None;
    }
    let version: [u8; 1] = unhex(&v[0..2])?;
    if version[0] == 0xff || (version[0] == 0 && v.len() != 55) {
        return None;
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' || (v.len() > 55 && v[55] != b'-') {
        return None;
    }
    let trace: [u8; 16] = unhex(&v[3..35])?;
    let parent: [u8; 8] = unhex(&v[36..52])?;
    let flags: [u8; 1] = unhex(&v[53..55])?;
    if trace == [0; 16] || parent == [0; 8] {
        return None;
    }
    Some((trace, parent, flags[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_as_the_spec_says() {
        let ok = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (t, p, f) = parse_traceparent(ok).unwrap();
        assert_eq!(hex(&t), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&p), "00f067aa0ba902b7");
        assert_eq!(f, 1);
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"garbage",
        ] {
            assert!(
                parse_traceparent(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // A later version with more fields is read by its first four.
        assert!(
            parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what")
                .is_some()
        );
    }

    #[test]
    fn a_new_trace_is_a_sampled_root_and_a_continued_one_keeps_the_callers_flags() {
        let root = Trace::from_headers(&HeaderMap::new());
        assert!(root.parent.is_none() && root.sampled());
        assert_ne!(root.trace_id, [0; 16]);
        let mut h = HeaderMap::new();
        h.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
                .parse()
                .unwrap(),
        );
        h.insert("tracestate", "vendor=x".parse().unwrap());
        let t = Trace::from_headers(&h);
        assert_eq!(hex(&t.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            t.parent.map(|p| hex(&p)).as_deref(),
            Some("00f067aa0ba902b7")
        );
        assert!(!t.sampled());
        assert_eq!(t.state.as_deref(), Some("vendor=x"));
        let tp = t.traceparent();
        assert!(tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && tp.ends_with("-00"));
        assert!(
            !tp.contains("00f067aa0ba902b7"),
            "the upstream's parent is tokentap's span"
        );
    }
}
