//! Why a generation ended, as a response says it: its finish reason, read leniently and bounded
//! (it is upstream text), and which finish reasons say the generation was cut rather than
//! finished. The record keeps it (`finish_reason`); a stream without one is cut short
//! (`Meter::cut_short`, docs/records.md).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The longest finish reason kept; a longer one, or one with other characters than ASCII
/// letters, digits and `_ - . :`, is kept as `other` (it is upstream text: never echoed whole).
const MAX_FINISH: usize = 32;

/// A finish reason as the record keeps it: `None` for none (null, empty, not a string).
pub fn finish_word(s: &str) -> Option<String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
    match s {
        "" => None,
        s if s.len() <= MAX_FINISH && s.chars().all(plain) => Some(s.to_owned()),
        _ => Some("other".to_owned()),
    }
}

/// Finish reasons that say the generation was cut, not finished: vLLM's `abort` (it sends it to
/// every stream in flight when it is stopped) and `error`, a Responses status `cancelled`
/// (vLLM's abort there, on gpt-oss) or `failed`, and their spellings `aborted`, `canceled`.
pub fn finish_is_cut(reason: &str) -> bool {
    matches!(
        reason.to_ascii_lowercase().as_str(),
        "abort" | "aborted" | "error" | "cancelled" | "canceled" | "failed"
    )
}

/// A finish reason read leniently: a string is kept (bounded), anything else is none.
pub(super) fn lenient_finish<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    let v = <Option<&RawValue>>::deserialize(d)?;
    Ok(finish_of(v))
}

pub(super) fn finish_of(v: Option<&RawValue>) -> Option<String> {
    v.and_then(|r| serde_json::from_str::<Cow<'_, str>>(r.get()).ok())
        .and_then(|s| finish_word(&s))
}

/// A Responses response's finish reason: its `status` when that says it was cut
/// (`cancelled`, `failed`), else `incomplete_details.reason` (`max_output_tokens`), else its
/// `status` (`completed`).
pub(super) fn responses_finish(
    status: Option<&RawValue>,
    details: Option<&RawValue>,
) -> Option<String> {
    #[derive(Deserialize)]
    struct Details<'a> {
        #[serde(borrow)]
        reason: Option<&'a RawValue>,
    }
    let status = finish_of(status);
    if status.as_deref().is_some_and(finish_is_cut) {
        return status;
    }
    details
        .and_then(|d| serde_json::from_str::<Details<'_>>(d.get()).ok())
        .and_then(|d| finish_of(d.reason))
        .or(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::inspect_chunk;

    fn finish(payload: &str) -> Option<String> {
        inspect_chunk(payload.as_bytes()).unwrap().finish
    }

    #[test]
    fn every_shape_says_why_it_ended() {
        // vLLM's last token event carries it beside its text; LiteLLM's comes apart.
        let last = r#"{"choices":[{"index":0,"delta":{"content":" x"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}"#;
        assert_eq!(finish(last).as_deref(), Some("length"));
        assert_eq!(
            finish(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#).as_deref(),
            Some("stop")
        );
        // vLLM stopped mid-stream (SIGTERM): an empty delta that says `abort`.
        let abort = r#"{"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"abort","stop_reason":null}]}"#;
        assert_eq!(finish(abort).as_deref(), Some("abort"));
        assert_eq!(
            finish(r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#).as_deref(),
            Some("length")
        );
        // The role-only chunk, a token, a usage-only chunk: none.
        for none in [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":7}]}"#,
        ] {
            assert_eq!(finish(none), None, "{none}");
        }
        // A whole chat body.
        assert_eq!(
            finish(r#"{"object":"chat.completion","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"tool_calls"}]}"#).as_deref(),
            Some("tool_calls")
        );
        // Responses: the reason of an incomplete one, else the status; a cut status wins.
        let done = |status: &str, details: &str| {
            format!(
                r#"{{"type":"response.completed","response":{{"status":"{status}","incomplete_details":{details}}}}}"#
            )
        };
        assert_eq!(
            finish(&done("completed", "null")).as_deref(),
            Some("completed")
        );
        assert_eq!(
            finish(&done("incomplete", r#"{"reason":"max_output_tokens"}"#)).as_deref(),
            Some("max_output_tokens")
        );
        assert_eq!(
            finish(&done("cancelled", r#"{"reason":"max_output_tokens"}"#)).as_deref(),
            Some("cancelled")
        );
        assert_eq!(
            finish(r#"{"object":"response","status":"completed","output":[]}"#).as_deref(),
            Some("completed")
        );
        // Messages: `message_delta`'s stop reason (null when vLLM aborted), a whole body's.
        assert_eq!(
            finish(r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null}}"#).as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            finish(r#"{"type":"message_delta","delta":{"stop_reason":null}}"#),
            None
        );
        assert_eq!(
            finish(r#"{"type":"message","stop_reason":"end_turn","content":[]}"#).as_deref(),
            Some("end_turn")
        );
    }

    #[test]
    fn a_finish_reason_is_bounded_and_cut_ones_are_known() {
        assert_eq!(finish_word("stop").as_deref(), Some("stop"));
        assert_eq!(finish_word(""), None);
        assert_eq!(finish_word("sk-live key 123").as_deref(), Some("other"));
        assert_eq!(finish_word(&"x".repeat(33)).as_deref(), Some("other"));
        for cut in ["abort", "error", "cancelled", "failed", "ABORT"] {
            assert!(finish_is_cut(cut), "{cut}");
        }
        for fine in [
            "stop",
            "length",
            "tool_calls",
            "content_filter",
            "end_turn",
            "max_tokens",
            "completed",
            "max_output_tokens",
            "repetition",
        ] {
            assert!(!finish_is_cut(fine), "{fine}");
        }
        // A cut choice is kept over a finished one beside it (n > 1).
        assert_eq!(
            finish(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"abort"},{"index":1,"delta":{},"finish_reason":"length"}]}"#).as_deref(),
            Some("abort")
        );
    }
}
