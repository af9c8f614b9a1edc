//! What the proxy learns from a request body. Never fails: what cannot be read is left out.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::raw_as;

/// What the proxy learns from a request body. All fields are optional: a body that is not JSON
/// yields the default and is forwarded anyway.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RequestInfo {
    pub model: Option<String>,
    pub stream: bool,
    /// `max_completion_tokens` when present, else `max_tokens` (chat, completions, Messages),
    /// else `max_output_tokens` (Responses).
    pub max_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct RawRequest<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    stream: Option<&'a RawValue>,
    #[serde(borrow)]
    max_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    max_completion_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    max_output_tokens: Option<&'a RawValue>,
}

/// Peek at a request body. Never fails: what cannot be read is left out.
pub fn peek_request(body: &[u8]) -> RequestInfo {
    let Ok(raw) = serde_json::from_slice::<RawRequest<'_>>(body) else {
        return RequestInfo::default();
    };
    let model: Option<Cow<'_, str>> = raw_as(raw.model);
    let max_completion: Option<u64> = raw_as(raw.max_completion_tokens);
    RequestInfo {
        model: model.map(Cow::into_owned),
        stream: raw_as(raw.stream).unwrap_or(false),
        max_tokens: max_completion
            .or_else(|| raw_as(raw.max_tokens))
            .or_else(|| raw_as(raw.max_output_tokens)),
    }
}

#[cfg(test)]
mod tests {
    use super::peek_request;

    #[test]
    fn every_shape_names_its_output_cap() {
        for (body, want) in [
            (r#"{"model":"m","max_tokens":64,"stream":true}"#, Some(64)),
            (r#"{"max_tokens":64,"max_completion_tokens":32}"#, Some(32)),
            // Responses: `max_output_tokens`.
            (
                r#"{"model":"m","input":"hi","max_output_tokens":48}"#,
                Some(48),
            ),
            // Messages: `max_tokens`, as chat.
            (r#"{"model":"m","messages":[],"max_tokens":16}"#, Some(16)),
            (r#"{"model":"m"}"#, None),
        ] {
            assert_eq!(peek_request(body.as_bytes()).max_tokens, want, "{body}");
        }
    }
}
