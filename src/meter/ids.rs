//! Request ids for correlation, as a record carries them: the client's (`request_id`) and the
//! upstream's (`upstream_request_id`). They are client- or upstream-controlled strings: bounded
//! here, written by the JSON writer (which escapes them), never a metric label.

/// The longest id a record carries, in bytes; a longer one is cut (on a character boundary).
pub const MAX_ID_BYTES: usize = 128;

/// An id as recorded: control characters dropped, surrounding spaces trimmed, cut to
/// [`MAX_ID_BYTES`]; `None` when nothing is left.
pub fn bounded(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len().min(MAX_ID_BYTES));
    for c in raw.trim().chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_ID_BYTES {
            break;
        }
        out.push(c);
    }
    let kept = out.trim_end().len();
    out.truncate(kept);
    (!out.is_empty()).then_some(out)
}

/// An id from a header's bytes (not necessarily UTF-8: what is not becomes U+FFFD).
pub fn from_header(value: &[u8]) -> Option<String> {
    bounded(&String::from_utf8_lossy(value))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_printable_and_never_empty() {
        assert_eq!(bounded("abc").as_deref(), Some("abc"));
        assert_eq!(bounded("  a\u{1}b\n ").as_deref(), Some("ab"));
        assert_eq!(bounded(" \t"), None);
        assert_eq!(bounded(""), None);
        let long = "x".repeat(200);
        assert_eq!(bounded(&long).map(|s| s.len()), Some(MAX_ID_BYTES));
        // Cut on a character boundary: 127 bytes of ASCII, then a 2-byte character that would
        // cross the bound.
        let mixed = format!("{}é", "y".repeat(127));
        assert_eq!(bounded(&mixed), Some("y".repeat(127)));
        assert_eq!(from_header(b"id-\xff").as_deref(), Some("id-\u{fffd}"));
        // The writer escapes what a client put in one.
        let quoted = bounded("a\"b\\c").unwrap_or_default();
        assert_eq!(
            serde_json::to_string(&quoted).unwrap_or_default(),
            r#""a\"b\\c""#
        );
    }

    #[test]
    fn each_shape_says_its_id_and_an_odd_one_costs_nothing() {
        use crate::openai::served;
        let id = |p: &str| served(p.as_bytes()).id;
        assert_eq!(
            id(r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[]}"#)
                .as_deref(),
            Some("chatcmpl-1")
        );
        let created = r#"{"type":"response.created","response":{"id":"resp_1","model":"m"}}"#;
        assert_eq!(id(created).as_deref(), Some("resp_1"));
        let start = r#"{"type":"message_start","message":{"id":"msg_1","model":"claude"}}"#;
        let s = served(start.as_bytes());
        assert_eq!(
            (s.id.as_deref(), s.model.as_deref()),
            (Some("msg_1"), Some("claude"))
        );
        // A number, or an empty string, is no id; the model is still read.
        let s = served(br#"{"id":7,"model":"m"}"#);
        assert_eq!((s.id, s.model.as_deref()), (None, Some("m")));
        assert_eq!(id(r#"{"id":"","choices":[]}"#), None);
        assert_eq!(id("not json"), None);
    }

    #[test]
    fn the_meter_reads_the_id_from_a_streams_first_events_or_the_body() {
        use crate::meter::Meter;
        let t0 = tokio::time::Instant::now();
        let mut m = Meter::new(t0);
        m.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
        let long = "z".repeat(300);
        m.on_data(
            format!("data: {{\"id\":\"{long}\",\"model\":\"m\",\"choices\":[]}}\n\n").as_bytes(),
            t0,
        );
        assert_eq!(m.response_id.as_ref().map(String::len), Some(MAX_ID_BYTES));
        // Not looked for beyond the first events.
        let mut m = Meter::new(t0);
        m.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
        for _ in 0..3 {
            m.on_data(b"data: {\"choices\":[]}\n\n", t0);
        }
        m.on_data(b"data: {\"id\":\"late\",\"choices\":[]}\n\n", t0);
        assert_eq!(m.response_id, None);
        let mut m = Meter::new(t0);
        m.expect_body(Some(b"application/json"), 1 << 20, 1 << 20);
        m.on_data(
            br#"{"id":"cmpl-9","object":"text_completion","choices":[]}"#,
            t0,
        );
        m.settle();
        assert_eq!(m.response_id.as_deref(), Some("cmpl-9"));
    }
}
