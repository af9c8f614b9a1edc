//! One request as bench sends it: the conversation so far (with an optional shared system
//! prompt), the API shape, the output length asked for, and the load it belongs to (its
//! concurrency level or open-loop rate, its turn, its schedule). Also synthetic prompt text of
//! an exact length, for replays and shared prefixes.

use std::sync::Arc;

use crate::meter::Schedule;
use crate::openai::Api;
use crate::tags::LoadTags;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Message {
    pub role: Role,
    pub text: Arc<str>,
}

impl Message {
    pub fn user(text: impl Into<Arc<str>>) -> Message {
        Message {
            role: Role::User,
            text: text.into(),
        }
    }
}

/// One request to send, and what its record says of the load it was part of.
#[derive(Debug, Clone)]
pub struct Req {
    pub model: Arc<str>,
    pub api: Api,
    /// A system prompt shared with other requests (`--shared-prefix`).
    pub system: Option<Arc<str>>,
    /// The conversation so far; the last message is the user's.
    pub messages: Vec<Message>,
    /// Output tokens asked for (`max_tokens`; exactly these with `fixed`).
    pub out: u64,
    /// Send `ignore_eos` and `min_tokens` (vLLM's extension) so the output length is exact.
    pub fixed: bool,
    /// Ask for a stream (`"stream": true`, with `stream_options.include_usage` where the shape
    /// takes it); false: one JSON body (`"stream": false`).
    pub stream: bool,
    pub bucket: Arc<str>,
    /// The closed loop's level, or the open loop's offered rate (requests a second).
    pub concurrency: Option<u64>,
    pub request_rate: Option<f64>,
    pub turn: Option<u32>,
    /// An experiment arm: (name, path prefix under the target, pair id).
    pub arm: Option<(Arc<str>, Arc<str>, String)>,
    /// With an arm, send `"cache_salt": "<pair id>-<arm>"` (vLLM's per-request prefix-cache
    /// isolation, `--cache-salt`): no copy of a group reads another's cached prefix.
    pub cache_salt: bool,
    /// The request header that chooses the arm (tokentap's experiment route header).
    pub route_header: Option<Arc<str>>,
    /// The prompt's index in its bucket's chosen set (recorded as `prompt_index`).
    pub prompt: Option<u64>,
}

/// How the request went out: requests in flight at the moment (itself included) and, in an
/// open loop, when it was due.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sent {
    pub in_flight: u64,
    pub schedule: Option<Schedule>,
}

impl Req {
    /// One streamed request of one user message, part of no load (no level, rate, turn, arm or
    /// prompt index), its output length not forced: the calibration's, the probe's, a replayed
    /// one's. Set what differs with struct update syntax.
    pub fn plain(
        model: Arc<str>,
        api: Api,
        text: impl Into<Arc<str>>,
        out: u64,
        bucket: &str,
    ) -> Req {
        Req {
            model,
            api,
            system: None,
            messages: vec![Message::user(text)],
            out,
            fixed: false,
            stream: true,
            bucket: bucket.into(),
            concurrency: None,
            request_rate: None,
            turn: None,
            arm: None,
            cache_salt: false,
            route_header: None,
            prompt: None,
        }
    }

    /// What the request says of the load it is part of: sent as headers (tokentap records
    /// them), and in bench's own record.
    pub fn tags(&self) -> LoadTags {
        LoadTags {
            bucket: Some(self.bucket.to_string()),
            concurrency: self.concurrency,
            request_rate: self.request_rate,
            turn: self.turn,
        }
    }

    /// The path (without an arm's prefix) and the JSON body for this request's API shape.
    pub fn body(&self) -> (&'static str, serde_json::Value) {
        use serde_json::json;
        let (model, out) = (&*self.model, self.out);
        let chat = |system_first: bool| {
            let mut m: Vec<serde_json::Value> = Vec::new();
            if system_first {
                if let Some(s) = &self.system {
                    m.push(json!({"role": "system", "content": &**s}));
                }
            }
            for x in &self.messages {
                m.push(json!({"role": x.role.as_str(), "content": &*x.text}));
            }
            serde_json::Value::Array(m)
        };
        let (path, mut body) = match self.api {
            Api::Completions => (
                "/v1/completions",
                json!({"model": model, "prompt": self.flat(), "max_tokens": out,
                    "stream": true, "stream_options": {"include_usage": true}}),
            ),
            // Both stream their usage at the end unasked.
            Api::Responses => {
                let mut b = json!({"model": model, "input": self.flat_turns(), "max_output_tokens": out, "stream": true});
                if let Some(s) = &self.system {
                    b["instructions"] = (&**s).into();
                }
                ("/v1/responses", b)
            }
            Api::Messages => {
                let mut b = json!({"model": model, "messages": chat(false), "max_tokens": out, "stream": true});
                if let Some(s) = &self.system {
                    b["system"] = (&**s).into();
                }
                ("/v1/messages", b)
            }
            _ => (
                "/v1/chat/completions",
                json!({"model": model, "messages": chat(true), "max_tokens": out,
                    "stream": true, "stream_options": {"include_usage": true}}),
            ),
        };
        if !self.stream {
            body["stream"] = false.into();
            if let Some(o) = body.as_object_mut() {
                o.remove("stream_options");
            }
        }
        if self.fixed {
            body["ignore_eos"] = true.into();
            body["min_tokens"] = out.into();
        }
        if let (true, Some((arm, _, pair))) = (self.cache_salt, &self.arm) {
            body["cache_salt"] = format!("{pair}-{arm}").into();
        }
        (path, body)
    }

    /// The conversation as one text (completions): the system prompt, then each turn.
    fn flat(&self) -> String {
        match &self.system {
            Some(s) => format!("{s}\n\n{}", self.flat_turns()),
            None => self.flat_turns(),
        }
    }

    fn flat_turns(&self) -> String {
        match self.messages.as_slice() {
            [one] => one.text.to_string(),
            many => many
                .iter()
                .map(|m| format!("{}: {}", m.role.as_str(), m.text))
                .collect::<Vec<_>>()
                .join("\n\n"),
        }
    }
}

/// Tokens a request of this API shape carries besides its prompt text, as tokentap sim counts
/// them (a chat template's roles and separators). A real engine's template differs a little.
pub fn overhead(api: Api) -> u64 {
    match api {
        Api::Completions => 1,
        Api::Responses => 3,
        // The conversation's 3 and the one user message's 4.
        _ => 7,
    }
}

/// Text of `tokens` tokens as tokentap sim counts them (four bytes a token), made of words
/// drawn with `seed`: a prompt of a recorded length.
pub fn text_of_tokens(tokens: u64, seed: u64) -> String {
    const WORDS: [&str; 24] = [
        "latency", "token", "engine", "request", "stream", "cache", "prefill", "decode", "batch",
        "queue", "gateway", "model", "prompt", "answer", "replica", "budget", "signal", "window",
        "trace", "record", "shape", "load", "peak", "rate",
    ];
    let want = (tokens.max(1) * 4) as usize;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut s = String::with_capacity(want + 16);
    while s.len() < want {
        s.push_str(WORDS[rng.usize(..WORDS.len())]);
        s.push(' ');
    }
    s.truncate(want);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_text_has_the_tokens_asked_for() {
        for n in [1u64, 2, 17, 512, 3000] {
            let t = text_of_tokens(n, 7);
            assert_eq!(crate::tokens::estimate_tokens(&t), n);
            assert_eq!(t, text_of_tokens(n, 7), "seeded");
        }
        assert_ne!(text_of_tokens(50, 1), text_of_tokens(50, 2));
    }

    #[test]
    fn bodies_carry_the_system_prompt_and_the_history() {
        let mut r = Req {
            model: "m".into(),
            api: Api::Chat,
            system: Some("be brief".into()),
            messages: vec![
                Message::user("hi"),
                Message {
                    role: Role::Assistant,
                    text: "hello".into(),
                },
                Message::user("again"),
            ],
            out: 9,
            fixed: true,
            stream: true,
            bucket: "b".into(),
            concurrency: Some(1),
            request_rate: None,
            turn: Some(2),
            arm: None,
            cache_salt: true,
            route_header: None,
            prompt: None,
        };
        let (path, b) = r.body();
        assert!(b.get("cache_salt").is_none(), "no arm, no salt");
        assert_eq!(path, "/v1/chat/completions");
        assert_eq!(b["messages"][0]["role"], "system");
        assert_eq!(b["messages"][3]["content"], "again");
        assert_eq!(
            (b["max_tokens"].as_u64(), b["min_tokens"].as_u64()),
            (Some(9), Some(9))
        );
        r.api = Api::Messages;
        let (path, b) = r.body();
        assert_eq!((path, &b["system"]), ("/v1/messages", &"be brief".into()));
        assert_eq!(b["messages"][0]["role"], "user");
        r.api = Api::Completions;
        let (_, b) = r.body();
        let p = b["prompt"].as_str().unwrap_or_default();
        assert!(p.starts_with("be brief\n\nuser: hi"), "{p}");
        r.arm = Some(("nginx".into(), "".into(), "balanced-c1-3".into()));
        assert_eq!(r.body().1["cache_salt"], "balanced-c1-3-nginx");
        r.cache_salt = false;
        assert!(r.body().1.get("cache_salt").is_none());
        // Not streamed: "stream": false and no stream_options, in every shape.
        r.stream = false;
        for api in [Api::Chat, Api::Completions, Api::Responses, Api::Messages] {
            r.api = api;
            let b = r.body().1;
            assert_eq!(b["stream"], false, "{api:?}");
            assert!(b.get("stream_options").is_none(), "{api:?}");
        }
        r.stream = true;
        r.api = Api::Chat;
        assert_eq!(r.body().1["stream_options"]["include_usage"], true);
    }
}
