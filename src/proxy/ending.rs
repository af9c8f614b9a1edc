//! How a proxied request ended, and the one function that decides what that makes of it: the
//! status the client got, the outcome and the record's error text. Every ending of every request
//! goes through [`verdict`]; nothing else sets an outcome. It names the proxy's side of the end
//! (its own errors, the upstream body's) and leaves the rule to `meter::ending`, which bench's
//! client shares.

use super::error::{BodyError, ProxyError};
use crate::meter::ending::Close;
use crate::meter::{BodyEnd, Meter, Outcome, Verdict};

/// Every way a request can end.
#[derive(Debug)]
pub enum Ending<'a> {
    /// tokentap answered itself, with this error, before or instead of the upstream.
    Local(&'a ProxyError),
    /// The upstream's response body ended, failed, or was dropped by the client.
    Body(BodyEnd<'a>),
    /// The request was dropped before it had a response: the client went away (or the
    /// shutdown cut it) while its body was read or the upstream was asked.
    Abandoned,
}

/// The verdict on a request. `head` is the status of the upstream's response head, once it
/// came; `cut` is set once the shutdown's grace period ran out.
pub fn verdict(ending: &Ending<'_>, head: Option<u16>, meter: &mut Meter, cut: bool) -> Verdict {
    let status = head.unwrap_or(0);
    let (status, close) = match ending {
        Ending::Local(err) => {
            let outcome = match err {
                ProxyError::BodyRead => Outcome::ClientCancelled,
                ProxyError::Connect(..) => Outcome::ConnectError,
                ProxyError::Upstream(..) => Outcome::UpstreamReset,
                ProxyError::Timeout(..) => Outcome::Timeout,
                ProxyError::BodyTooLarge(_)
                | ProxyError::BodyTimeout(_)
                | ProxyError::NoRoute
                | ProxyError::Overloaded(_)
                | ProxyError::BadRequest(_)
                | ProxyError::ForcedDirect
                | ProxyError::NotTheGateway(_)
                | ProxyError::NotAdmitted(_) => Outcome::Rejected,
            };
            let text = match err {
                ProxyError::BodyRead => "request body not received".to_owned(),
                _ => format!("tokentap: {}", err.kind().1),
            };
            (err.status().as_u16(), Close::Failed(outcome, text))
        }
        Ending::Abandoned | Ending::Body(BodyEnd::Dropped) => (status, Close::Dropped { cut }),
        Ending::Body(BodyEnd::Complete) => (status, Close::Complete),
        Ending::Body(BodyEnd::Error(e)) => {
            let (o, text) = match e.downcast_ref::<BodyError>() {
                Some(BodyError::Idle(_)) => (Outcome::Timeout, "idle timeout".to_owned()),
                Some(BodyError::Total) => (Outcome::Timeout, "total timeout".to_owned()),
                Some(BodyError::Upstream(u)) => {
                    (Outcome::UpstreamReset, format!("upstream body: {u}"))
                }
                None => (Outcome::UpstreamReset, format!("upstream body: {e}")),
            };
            (status, Close::Failed(o, text))
        }
    };
    crate::meter::ending::verdict(close, status, meter)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use super::*;
    use crate::meter::ending::tests::{stream, LAST, TOKEN};

    fn v(
        e: &Ending<'_>,
        head: Option<u16>,
        events: &[&str],
        cut: bool,
    ) -> (u16, Outcome, Option<String>) {
        let r = verdict(e, head, &mut stream(events), cut);
        (r.status, r.outcome, r.error)
    }

    #[test]
    fn every_ending_has_one_verdict() {
        let done = [TOKEN, LAST, "[DONE]"];
        let ok = (200, Outcome::Ok, None);
        assert_eq!(
            v(&Ending::Body(BodyEnd::Complete), Some(200), &done, false),
            ok
        );
        // A client that left after `[DONE]` got the whole stream; shutdown or not.
        assert_eq!(
            v(&Ending::Body(BodyEnd::Dropped), Some(200), &done, false),
            ok
        );
        assert_eq!(
            v(&Ending::Body(BodyEnd::Dropped), Some(200), &done, true),
            ok
        );
        assert_eq!(
            v(&Ending::Body(BodyEnd::Dropped), Some(200), &[TOKEN], false).1,
            Outcome::ClientCancelled
        );
        assert_eq!(
            v(&Ending::Body(BodyEnd::Dropped), Some(200), &[TOKEN], true).1,
            Outcome::ShutdownCut
        );
        assert_eq!(
            v(&Ending::Abandoned, None, &[], false),
            (0, Outcome::ClientCancelled, Some("client went away".into()))
        );
        assert_eq!(
            v(&Ending::Body(BodyEnd::Complete), Some(200), &[TOKEN], false).1,
            Outcome::Incomplete
        );
        // `[DONE]` without a finish reason, or after one that says the engine aborted it (vLLM
        // stopped with SIGTERM): cut short, even when the client hangs up after `[DONE]`.
        let abort = r#"{"choices":[{"delta":{"content":""},"finish_reason":"abort"}]}"#;
        for (events, why) in [
            (
                &[TOKEN, "[DONE]"][..],
                "stream ended without a finish reason",
            ),
            (
                &[TOKEN, abort, "[DONE]"][..],
                "stream ended with finish reason abort",
            ),
        ] {
            for end in [BodyEnd::Complete, BodyEnd::Dropped] {
                assert_eq!(
                    v(&Ending::Body(end), Some(200), events, false),
                    (200, Outcome::Incomplete, Some(why.into()))
                );
            }
        }
        assert_eq!(
            v(&Ending::Body(BodyEnd::Complete), Some(503), &done, false),
            (
                503,
                Outcome::UpstreamError,
                Some("upstream status 503".into())
            )
        );
        let err = [
            r#"{"error":{"message":"key sk-1 bad","type":"x","code":7}}"#,
            "[DONE]",
        ];
        assert_eq!(
            v(&Ending::Body(BodyEnd::Complete), Some(200), &err, false),
            (200, Outcome::StreamError, Some("type=x,code=7".into()))
        );
        let idle = BodyError::Idle(std::time::Duration::from_secs(1));
        assert_eq!(
            v(
                &Ending::Body(BodyEnd::Error(&idle)),
                Some(200),
                &[TOKEN],
                false
            ),
            (200, Outcome::Timeout, Some("idle timeout".into()))
        );
    }

    #[test]
    fn every_local_answer_has_one_verdict() {
        for (e, status, outcome, text) in [
            (
                ProxyError::BodyRead,
                400,
                Outcome::ClientCancelled,
                "request body not received",
            ),
            (
                ProxyError::BodyTimeout(1),
                408,
                Outcome::Rejected,
                "tokentap: request_body_timeout",
            ),
            (
                ProxyError::Overloaded(1),
                503,
                Outcome::Rejected,
                "tokentap: overloaded",
            ),
            (
                ProxyError::NoRoute,
                404,
                Outcome::Rejected,
                "tokentap: no_route",
            ),
            (
                ProxyError::ForcedDirect,
                403,
                Outcome::Rejected,
                "tokentap: forced_direct_not_allowed",
            ),
            (
                ProxyError::Connect("r".into(), "x".into()),
                502,
                Outcome::ConnectError,
                "tokentap: upstream_unreachable",
            ),
            (
                ProxyError::Timeout("r".into(), 5),
                504,
                Outcome::Timeout,
                "tokentap: upstream_timeout",
            ),
        ] {
            assert_eq!(
                v(&Ending::Local(&e), None, &[], false),
                (status, outcome, Some(text.to_owned()))
            );
        }
    }
}
