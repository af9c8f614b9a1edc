//! The one rule for how a metered request ended: the proxy's exchange (`proxy::ending`) and
//! bench's client (`bench::runner`) each name how their side saw the end, as a [`Close`], and
//! [`verdict`] makes of it the status, outcome and error text the record carries. A leaf: it
//! names nothing outside `meter` (tests/suite/layout.rs holds that), so both sides may reach it.

use super::{Meter, Outcome, Verdict};

/// How the reader of a response saw it end.
#[derive(Debug)]
pub enum Close {
    /// The body reached its end.
    Complete,
    /// The reader stopped before the body's end: the client went away, or (`cut`) the
    /// shutdown's grace period ran out. A stream already complete (`[DONE]` read) is complete.
    Dropped { cut: bool },
    /// The exchange failed for a reason its own side names: the outcome and the error text.
    Failed(Outcome, String),
}

/// The verdict on a request whose response ended as `close`, the client having got `status`
/// (0 when none). The last chunk handed on may not be inspected yet: it can turn a drop into a
/// complete stream (a client that hangs up right after `[DONE]` got the whole stream); a JSON
/// body is read at its end. An error event in the stream is merged into the text.
pub fn verdict(close: Close, status: u16, meter: &mut Meter) -> Verdict {
    meter.settle();
    let (outcome, error) = match close {
        Close::Complete => meter.clean_end(status),
        Close::Dropped { .. } if meter.done => meter.clean_end(status),
        Close::Dropped { cut: true } => (
            Outcome::ShutdownCut,
            Some("cut at shutdown grace deadline".into()),
        ),
        Close::Dropped { cut: false } => {
            (Outcome::ClientCancelled, Some("client went away".into()))
        }
        Close::Failed(outcome, text) => (outcome, Some(text)),
    };
    let error = meter.merge_error_event(outcome, error);
    Verdict {
        status,
        outcome,
        error,
    }
}

#[allow(clippy::disallowed_methods)] // tests drive their own clock
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokio::time::Instant;

    /// A streamed response's meter, fed these SSE events (the proxy's tests read it too).
    pub(crate) fn stream(events: &[&str]) -> Meter {
        let mut m = Meter::new(Instant::now());
        m.path_api = crate::openai::Api::Chat;
        m.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
        for e in events {
            m.defer(
                bytes::Bytes::from(format!("data: {e}\n\n")),
                Instant::now(),
                crate::meter::ReadClock::Process,
            );
        }
        m
    }

    pub(crate) const TOKEN: &str = r#"{"choices":[{"delta":{"content":"hi"}}]}"#;
    pub(crate) const LAST: &str =
        r#"{"choices":[{"delta":{"content":"!"},"finish_reason":"stop"}]}"#;
    const DONE: [&str; 3] = [TOKEN, LAST, "[DONE]"];

    fn v(close: Close, status: u16, events: &[&str]) -> (u16, Outcome, Option<String>) {
        let r = verdict(close, status, &mut stream(events));
        (r.status, r.outcome, r.error)
    }

    #[test]
    fn a_complete_stream_is_ok_however_its_reader_stopped() {
        let ok = (200, Outcome::Ok, None);
        assert_eq!(v(Close::Complete, 200, &DONE), ok);
        assert_eq!(v(Close::Dropped { cut: false }, 200, &DONE), ok);
        assert_eq!(v(Close::Dropped { cut: true }, 200, &DONE), ok);
    }

    #[test]
    fn a_stream_stopped_short_says_who_stopped_it() {
        assert_eq!(
            v(Close::Dropped { cut: false }, 200, &[TOKEN]),
            (
                200,
                Outcome::ClientCancelled,
                Some("client went away".into())
            )
        );
        assert_eq!(
            v(Close::Dropped { cut: true }, 200, &[TOKEN]).1,
            Outcome::ShutdownCut
        );
        assert_eq!(v(Close::Complete, 200, &[TOKEN]).1, Outcome::Incomplete);
        assert_eq!(
            v(Close::Complete, 503, &DONE),
            (
                503,
                Outcome::UpstreamError,
                Some("upstream status 503".into())
            )
        );
    }

    #[test]
    fn a_failure_keeps_its_side_s_words_and_the_stream_s_error_event() {
        assert_eq!(
            v(
                Close::Failed(Outcome::Timeout, "total timeout".into()),
                0,
                &[]
            ),
            (0, Outcome::Timeout, Some("total timeout".into()))
        );
        let err = r#"{"error":{"message":"key sk-1 bad","type":"x","code":7}}"#;
        assert_eq!(
            v(
                Close::Failed(Outcome::UpstreamReset, "body: reset".into()),
                200,
                &[err]
            ),
            (
                200,
                Outcome::UpstreamReset,
                Some("body: reset; type=x,code=7".into())
            )
        );
    }
}
