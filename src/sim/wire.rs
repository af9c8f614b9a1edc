//! What the simulated engine sends, per API shape, in vLLM's formats (as recorded in
//! `tests/fixtures/sse/`): chat and completions chunks with `[DONE]`; the Responses API's
//! `event:`/`data:` pairs ending in `response.completed`; Anthropic Messages' events ending in
//! `message_stop`. Reasoning tokens go where each shape puts them. A stream stopped mid-way ends
//! as vLLM ends it when stopped ([`Wire::abort`]).

use bytes::Bytes;
use serde_json::{json, Value};

use crate::openai::Api;

/// Token counts of one request, for its usage.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub prompt: u64,
    pub cached: u64,
    pub output: u32,
    pub reasoning: u32,
}

/// One response's stream writer.
pub struct Wire {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub model: String,
    /// Messages: the index of the open content block; Responses: whether the answer item began.
    block: u32,
    in_answer: bool,
    seq: u64,
    text: String,
    reasoning_text: String,
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

impl Wire {
    pub fn new(api: Api, id: String, created: u64, model: String) -> Wire {
        Wire {
            api,
            id,
            created,
            model,
            block: 0,
            in_answer: false,
            seq: 0,
            text: String::new(),
            reasoning_text: String::new(),
        }
    }

    /// An `event:` + `data:` pair (Responses, Messages), with the Responses sequence number.
    fn typed(&mut self, kind: &str, mut v: Value) -> Bytes {
        v["type"] = kind.into();
        if self.api == Api::Responses {
            v["sequence_number"] = self.seq.into();
            self.seq += 1;
        }
        Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
    }

    fn response_obj(&self, status: &str, usage: Value, output: Value) -> Value {
        json!({"id": self.id, "created_at": self.created, "model": self.model, "object": "response",
            "status": status, "output": output, "usage": usage})
    }

    /// What goes out before the first token.
    pub fn start(&mut self, c: &Counts) -> Vec<Bytes> {
        match self.api {
            Api::Responses => {
                let r = self.response_obj("in_progress", Value::Null, json!([]));
                vec![
                    self.typed("response.created", json!({"response": r})),
                    self.typed("response.in_progress", json!({"response": r})),
                ]
            }
            Api::Messages => {
                let m = json!({"id": self.id, "type": "message", "role": "assistant", "content": [],
                    "model": self.model, "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": c.prompt - c.cached, "output_tokens": 0}});
                vec![self.typed("message_start", json!({"message": m}))]
            }
            _ => Vec::new(),
        }
    }

    /// One token: `reasoning` or answer; `finish` on the last (chat, completions).
    pub fn token(&mut self, index: u32, word: &str, reasoning: bool, finish: Value) -> Vec<Bytes> {
        let mut out = Vec::new();
        if reasoning {
            self.reasoning_text.push_str(word);
        } else {
            self.text.push_str(word);
        }
        let (id, created, model) = (self.id.clone(), self.created, self.model.clone());
        match self.api {
            Api::Chat => {
                if index == 0 {
                    out.push(sse(&json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]})));
                }
                let delta = if reasoning {
                    json!({"reasoning_content": word})
                } else {
                    json!({"content": word})
                };
                out.push(sse(&json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})));
            }
            Api::Completions => {
                out.push(sse(&json!({"id": id, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": 0, "text": word, "logprobs": null, "finish_reason": finish}]})));
            }
            Api::Responses => {
                if reasoning {
                    if index == 0 {
                        out.push(self.typed("response.output_item.added", json!({"output_index": 0,
                            "item": {"id": format!("rs_{id}"), "type": "reasoning", "summary": [], "content": null}})));
                    }
                    out.push(self.typed(
                        "response.reasoning_text.delta",
                        json!({"item_id": format!("rs_{id}"),
                        "output_index": 0, "content_index": 0, "delta": word}),
                    ));
                } else {
                    if !self.in_answer {
                        self.in_answer = true;
                        let oi = u32::from(index > 0);
                        out.push(self.typed("response.output_item.added", json!({"output_index": oi,
                            "item": {"id": format!("msg_{id}"), "type": "message", "role": "assistant", "status": "in_progress", "content": []}})));
                        out.push(self.typed("response.content_part.added", json!({"item_id": format!("msg_{id}"),
                            "output_index": oi, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
                    }
                    out.push(self.typed(
                        "response.output_text.delta",
                        json!({"item_id": format!("msg_{id}"),
                        "output_index": u32::from(!self.reasoning_text.is_empty()),
                        "content_index": 0, "delta": word, "logprobs": []}),
                    ));
                }
            }
            Api::Messages => {
                let kind = if reasoning { "thinking" } else { "text" };
                if index == 0 || (!reasoning && !self.in_answer) {
                    if index > 0 {
                        out.push(self.typed("content_block_stop", json!({"index": self.block})));
                        self.block += 1;
                    }
                    self.in_answer = !reasoning;
                    out.push(self.typed(
                        "content_block_start",
                        json!({"index": self.block,
                        "content_block": {"type": kind, kind: ""}}),
                    ));
                }
                let delta = if reasoning {
                    json!({"type": "thinking_delta", "thinking": word})
                } else {
                    json!({"type": "text_delta", "text": word})
                };
                out.push(self.typed(
                    "content_block_delta",
                    json!({"index": self.block, "delta": delta}),
                ));
            }
            Api::Embeddings | Api::Models | Api::Other => {}
        }
        out
    }

    /// The stream's end: its usage (when asked, for chat and completions) and end marker.
    pub fn end(
        &mut self,
        c: &Counts,
        stop: &str,
        include_usage: bool,
        metrics: Value,
    ) -> Vec<Bytes> {
        let (id, created, model) = (self.id.clone(), self.created, self.model.clone());
        match self.api {
            Api::Chat | Api::Completions => {
                let mut out = Vec::new();
                if include_usage {
                    let object = if self.api == Api::Chat {
                        "chat.completion.chunk"
                    } else {
                        "text_completion"
                    };
                    out.push(sse(
                        &json!({"id": id, "object": object, "created": created, "model": model,
                        "choices": [], "usage": openai_usage(c), "metrics": metrics}),
                    ));
                }
                out.push(Bytes::from_static(b"data: [DONE]\n\n"));
                out
            }
            Api::Responses => {
                let msg = format!("msg_{id}");
                let text = self.text.clone();
                let done_part = json!({"type": "output_text", "text": text, "annotations": []});
                let status = if stop == "length" {
                    "incomplete"
                } else {
                    "completed"
                };
                let output = json!([{"id": msg, "type": "message", "role": "assistant", "status": "completed", "content": [done_part]}]);
                let r = self.response_obj(status, responses_usage(c), output);
                vec![
                    self.typed("response.output_text.done", json!({"item_id": msg, "output_index": 0, "content_index": 0, "text": text})),
                    self.typed("response.content_part.done", json!({"item_id": msg, "output_index": 0, "content_index": 0, "part": done_part})),
                    self.typed("response.completed", json!({"response": r})),
                ]
            }
            Api::Messages => {
                let stop_reason = messages_stop(stop);
                vec![
                    self.typed("content_block_stop", json!({"index": self.block})),
                    self.typed(
                        "message_delta",
                        json!({"delta": {"stop_reason": stop_reason, "stop_sequence": null},
                        "usage": messages_usage(c)}),
                    ),
                    self.typed("message_stop", json!({})),
                ]
            }
            Api::Embeddings | Api::Models | Api::Other => Vec::new(),
        }
    }

    /// The end of a stream stopped after `c.output` tokens, as vLLM 0.32 ends every stream in
    /// flight when it is stopped (SIGTERM, its default `--shutdown-timeout 0`: abort): chat and
    /// completions get one more chunk with empty text and `"finish_reason":"abort"` (a chat
    /// stream not begun gets its role chunk first), then the usage chunk when asked and
    /// `[DONE]`; the Responses API ends as if completed (`status: completed`, vLLM's own
    /// reading of an abort); Messages with `message_delta` whose `stop_reason` is null, and
    /// `message_stop`.
    pub fn abort(&mut self, c: &Counts, include_usage: bool, metrics: Value) -> Vec<Bytes> {
        let (id, created, model) = (self.id.clone(), self.created, self.model.clone());
        let mut out = Vec::new();
        match self.api {
            Api::Chat => {
                if c.output == 0 {
                    out.push(sse(&json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]})));
                }
                out.push(sse(&json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": {"content": ""}, "logprobs": null, "finish_reason": ABORT, "stop_reason": null}]})));
            }
            Api::Completions => {
                out.push(sse(&json!({"id": id, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": 0, "text": "", "logprobs": null, "finish_reason": ABORT, "stop_reason": null}]})));
            }
            _ => {}
        }
        out.extend(self.end(c, ABORT, include_usage, metrics));
        out
    }

    /// A whole (non-streaming) body.
    pub fn body(&self, c: &Counts, stop: &str, metrics: Value) -> Value {
        let (id, created, model) = (&self.id, self.created, &self.model);
        let (text, reasoning) = (&self.text, &self.reasoning_text);
        match self.api {
            Api::Chat => {
                let mut message = json!({"role": "assistant", "content": text});
                if !reasoning.is_empty() {
                    message["reasoning_content"] = reasoning.as_str().into();
                }
                json!({"id": id, "object": "chat.completion", "created": created, "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": stop}],
                    "usage": openai_usage(c), "metrics": metrics})
            }
            Api::Responses => {
                let status = if stop == "length" {
                    "incomplete"
                } else {
                    "completed"
                };
                self.response_obj(
                    status,
                    responses_usage(c),
                    json!([{"id": format!("msg_{id}"), "type": "message",
                    "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}]),
                )
            }
            Api::Messages => {
                let mut content = Vec::new();
                if !reasoning.is_empty() {
                    content.push(json!({"type": "thinking", "thinking": reasoning}));
                }
                content.push(json!({"type": "text", "text": text}));
                json!({"id": id, "type": "message", "role": "assistant", "content": content, "model": model,
                    "stop_reason": messages_stop(stop),
                    "usage": messages_usage(c)})
            }
            _ => json!({"id": id, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": 0, "text": text, "finish_reason": stop}],
                "usage": openai_usage(c), "metrics": metrics}),
        }
    }
}

/// The finish reason of a sequence the engine aborted (vLLM's `FinishReason.ABORT`).
pub const ABORT: &str = "abort";

/// Messages' `stop_reason` for a finish reason: vLLM maps `length` to `max_tokens`, `stop` to
/// `end_turn`, and anything else (an abort) to null.
fn messages_stop(stop: &str) -> Value {
    match stop {
        "length" => "max_tokens".into(),
        "stop" => "end_turn".into(),
        _ => Value::Null,
    }
}

fn openai_usage(c: &Counts) -> Value {
    let out = u64::from(c.output);
    json!({"prompt_tokens": c.prompt, "total_tokens": c.prompt + out, "completion_tokens": out,
        "prompt_tokens_details": {"cached_tokens": c.cached},
        "completion_tokens_details": {"reasoning_tokens": c.reasoning}})
}

fn responses_usage(c: &Counts) -> Value {
    let out = u64::from(c.output);
    json!({"input_tokens": c.prompt, "input_tokens_details": {"cached_tokens": c.cached},
        "output_tokens": out, "output_tokens_details": {"reasoning_tokens": c.reasoning},
        "total_tokens": c.prompt + out})
}

/// Anthropic's: `input_tokens` exclude the cache's.
fn messages_usage(c: &Counts) -> Value {
    json!({"input_tokens": c.prompt - c.cached, "output_tokens": c.output,
        "cache_read_input_tokens": c.cached, "cache_creation_input_tokens": 0})
}
