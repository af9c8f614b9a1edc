//! A response cut short although its transport ended cleanly: the rule that keeps a stream
//! stopped mid-way from reading as `ok` (docs/records.md, "A stream cut short"). A stream of a
//! generating shape says why it ended (a finish reason); one that ends without saying, or saying
//! it was cut (`abort`: what vLLM sends every stream in flight when it is stopped), is
//! `incomplete`.

use super::Meter;
use crate::openai;

impl Meter {
    /// Keep a finish reason: the last one, unless an earlier one said the generation was cut.
    pub(super) fn note_finish(&mut self, finish: Option<String>) {
        if finish.is_some()
            && !self
                .finish_reason
                .as_deref()
                .is_some_and(openai::finish_is_cut)
        {
            self.finish_reason = finish;
        }
    }

    /// Why a response whose transport ended cleanly (a stream with its end marker) was still
    /// cut short (docs/records.md, "A stream cut short"). Judged for the generating shapes
    /// (chat, completions, Responses, Messages: by the events, else by the path): a finish
    /// reason that says the generation was cut (`abort`: what vLLM sends every stream in flight
    /// when it is stopped), or a stream that ended without any. A whole JSON body without one
    /// is not judged (its length says it is whole), nor a body not read (a coding not decoded).
    pub fn cut_short(&self) -> Option<String> {
        if !self.api.unwrap_or(self.path_api).generates() {
            return None;
        }
        let what = if self.is_sse() { "stream" } else { "response" };
        match self.finish_reason.as_deref() {
            Some(r) if openai::finish_is_cut(r) => {
                Some(format!("{what} ended with finish reason {r}"))
            }
            Some(_) => None,
            None if self.is_sse() => Some("stream ended without a finish reason".into()),
            None => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use super::*;
    use crate::meter::Outcome;
    use tokio::time::Instant;

    const ROLE: &str = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
    const TOKEN: &str =
        r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#;
    const LAST: &str =
        r#"{"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"length"}]}"#;
    const ABORT: &str = r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"abort","stop_reason":null}]}"#;
    const USAGE: &str = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;

    fn end(path: &str, ct: &str, events: &[&str]) -> (Outcome, Option<String>, Option<String>) {
        let mut m = Meter::new(Instant::now());
        m.path_api = openai::Api::from_path(path);
        m.expect_body(Some(ct.as_bytes()), 1 << 20, 1 << 20);
        for e in events {
            let bytes = if ct.starts_with("text/event-stream") {
                format!("data: {e}\n\n")
            } else {
                (*e).to_owned()
            };
            m.on_data(bytes.as_bytes(), Instant::now());
        }
        m.settle();
        let (o, why) = m.clean_end(200);
        (o, why, m.finish_reason)
    }

    const SSE: &str = "text/event-stream";
    const CHAT: &str = "/v1/chat/completions";

    #[test]
    fn a_stream_that_says_why_it_ended_is_ok() {
        let ok = end(CHAT, SSE, &[ROLE, TOKEN, LAST, USAGE, "[DONE]"]);
        assert_eq!(ok, (Outcome::Ok, None, Some("length".into())));
        // `max_tokens` reached is a finish like any other.
        assert_eq!(end(CHAT, SSE, &[TOKEN, LAST, "[DONE]"]).0, Outcome::Ok);
    }

    #[test]
    fn a_stream_without_a_finish_reason_is_incomplete() {
        let cut = end(CHAT, SSE, &[ROLE, TOKEN, TOKEN, "[DONE]"]);
        assert_eq!(
            cut,
            (
                Outcome::Incomplete,
                Some("stream ended without a finish reason".into()),
                None
            )
        );
        // Usage at the end is no finish reason; nor is a role chunk alone.
        assert_eq!(
            end(CHAT, SSE, &[ROLE, TOKEN, USAGE, "[DONE]"]).0,
            Outcome::Incomplete
        );
        assert_eq!(end(CHAT, SSE, &[ROLE, "[DONE]"]).0, Outcome::Incomplete);
        // No event said its shape: the path does.
        assert_eq!(end(CHAT, SSE, &["[DONE]"]).0, Outcome::Incomplete);
        assert_eq!(
            end("/v1/completions", SSE, &["[DONE]"]).0,
            Outcome::Incomplete
        );
        // An event stream of no generating shape is not judged.
        assert_eq!(
            end("/v1/events", SSE, &["{\"x\":1}", "[DONE]"]).0,
            Outcome::Ok
        );
    }

    #[test]
    fn a_stream_the_engine_aborted_is_incomplete_whatever_follows() {
        // vLLM stopped with SIGTERM: `abort`, then usage and `[DONE]`.
        let (o, why, finish) = end(CHAT, SSE, &[ROLE, TOKEN, ABORT, USAGE, "[DONE]"]);
        assert_eq!(o, Outcome::Incomplete);
        assert_eq!(
            why.as_deref(),
            Some("stream ended with finish reason abort")
        );
        assert_eq!(finish.as_deref(), Some("abort"));
        // A later finish reason does not hide the abort.
        assert_eq!(
            end(CHAT, SSE, &[TOKEN, ABORT, LAST, "[DONE]"]).0,
            Outcome::Incomplete
        );
    }

    #[test]
    fn every_shape_is_held_to_its_own_end() {
        let resp = |status: &str| {
            format!(
                r#"{{"type":"response.completed","response":{{"status":"{status}","usage":{{"input_tokens":3,"output_tokens":2}}}}}}"#
            )
        };
        let delta = r#"{"type":"response.output_text.delta","delta":"hi"}"#;
        let done = resp("completed");
        assert_eq!(end("/v1/responses", SSE, &[delta, &done]).0, Outcome::Ok);
        let cancelled = resp("cancelled");
        assert_eq!(
            end("/v1/responses", SSE, &[delta, &cancelled]).0,
            Outcome::Incomplete
        );
        // LiteLLM adds `[DONE]` to a Responses stream: without `response.completed` it is cut.
        assert_eq!(
            end("/v1/responses", SSE, &[delta, "[DONE]"]).0,
            Outcome::Incomplete
        );
        let text =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#;
        let stop = |reason: &str| {
            format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":{reason}}},"usage":{{"output_tokens":2}}}}"#
            )
        };
        let (end_turn, null) = (stop("\"end_turn\""), stop("null"));
        let msg_stop = r#"{"type":"message_stop"}"#;
        assert_eq!(
            end("/v1/messages", SSE, &[text, &end_turn, msg_stop]).0,
            Outcome::Ok
        );
        // vLLM maps its abort to a null stop reason.
        assert_eq!(
            end("/v1/messages", SSE, &[text, &null, msg_stop]).0,
            Outcome::Incomplete
        );
    }

    #[test]
    fn a_whole_body_is_cut_only_when_it_says_so() {
        let json = "application/json";
        let body = |finish: &str| {
            format!(
                r#"{{"object":"chat.completion","choices":[{{"index":0,"message":{{"content":"x"}},"finish_reason":{finish}}}],"usage":{{"prompt_tokens":3,"completion_tokens":1}}}}"#
            )
        };
        let (stop, abort, none) = (body("\"stop\""), body("\"abort\""), body("null"));
        assert_eq!(
            end(CHAT, json, &[&stop]),
            (Outcome::Ok, None, Some("stop".into()))
        );
        assert_eq!(end(CHAT, json, &[&abort]).0, Outcome::Incomplete);
        // A whole body is complete by its length: no finish reason is no evidence of a cut.
        assert_eq!(end(CHAT, json, &[&none]).0, Outcome::Ok);
        assert_eq!(
            end(
                "/v1/embeddings",
                json,
                &[r#"{"object":"list","data":[],"usage":{"prompt_tokens":3}}"#]
            )
            .0,
            Outcome::Ok
        );
    }
}
