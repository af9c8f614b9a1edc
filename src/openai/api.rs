//! The API shapes tokentap measures: what a request's path says, and what its events say.

use serde::{Deserialize, Serialize};

/// An API shape. A closed set: it becomes a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
    /// OpenAI's Responses API, `/v1/responses`.
    Responses,
    /// Anthropic's Messages API, `/v1/messages`.
    Messages,
    /// `/v1/embeddings`: input tokens and E2E, no TTFT.
    Embeddings,
    /// A model listing or lookup, `GET /v1/models` or `/v1/models/{id}`: generates nothing.
    Models,
    Other,
}

impl Api {
    /// The shape a request path names (any prefix before the API's own path).
    pub fn from_path(path: &str) -> Api {
        let p = path.trim_end_matches('/');
        if p.ends_with("/chat/completions") {
            Api::Chat
        } else if p.ends_with("/completions") {
            Api::Completions
        } else if p.ends_with("/responses") {
            Api::Responses
        } else if p.ends_with("/messages") {
            Api::Messages
        } else if p.ends_with("/embeddings") {
            Api::Embeddings
        } else if p.ends_with("/models")
            || p.rsplit_once("/models/")
                .is_some_and(|(_, id)| !id.is_empty())
        {
            Api::Models
        } else {
            Api::Other
        }
    }

    /// A shape that generates tokens: chat, completions, Responses, Messages. Only these are
    /// judged as generations (prompt-shape cells, SLO verdicts, the ceiling).
    pub fn generates(self) -> bool {
        matches!(
            self,
            Api::Chat | Api::Completions | Api::Responses | Api::Messages
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Responses => "responses",
            Api::Messages => "messages",
            Api::Embeddings => "embeddings",
            Api::Models => "models",
            Api::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Api;

    #[test]
    fn paths_name_their_shape() {
        for (p, a) in [
            ("/v1/chat/completions", Api::Chat),
            ("/gateway/v1/completions", Api::Completions),
            ("/v1/responses", Api::Responses),
            ("/anthropic/v1/messages/", Api::Messages),
            ("/v1/embeddings", Api::Embeddings),
            ("/v1/models", Api::Models),
            ("/gateway/v1/models/tiny", Api::Models),
            ("/v1/models/", Api::Models),
            ("/health", Api::Other),
        ] {
            assert_eq!(Api::from_path(p), a, "{p}");
        }
    }
}
