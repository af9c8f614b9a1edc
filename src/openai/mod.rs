//! Lenient, read-only views of OpenAI-compatible requests and stream chunks.
//!
//! Nothing here re-serializes what it reads: the proxy forwards the original bytes. Every field is
//! taken as raw JSON and interpreted on its own, so one odd field (a string where a number was
//! expected) loses that field, not the whole event. The only writes are the splices of
//! [`splice`], which change one top-level member and leave every other byte as it was.
//!
//! - [`request`]: what a request body says (model, stream, max_tokens).
//! - [`splice`]: byte-exact edits of a request body (model rename, cache salt).
//! - [`api`]: the API shapes (chat, completions, Responses, Anthropic Messages, embeddings).
//! - [`chunk`]: what one event or JSON body says, in every shape (output and whether it is
//!   reasoning, usage with cached and reasoning tokens, errors, the end marker, engine timings).
//! - [`fast`]: the per-event fast path (a plain token event classified without a parse).
//! - [`finish`]: finish reasons: bounded, and which ones say a generation was cut.
//! - [`fingerprint`]: a hash of what a gateway forwards unchanged (text, sampling, length).

pub mod api;
pub mod chunk;
pub mod fast;
pub mod fingerprint;
pub mod finish;
pub mod request;
pub mod splice;

use serde::Deserialize;
use serde_json::value::RawValue;

pub use api::Api;
pub use chunk::{describe_error, served, ChunkInfo, Served, ServerTimings, Usage};
pub use fast::{inspect_chunk, inspect_chunk_in, Shape};
pub use fingerprint::fingerprint;
pub use finish::{finish_is_cut, finish_word};
pub use request::{peek_request, RequestInfo};
pub use splice::{insert_field, rewrite_model};

fn raw_as<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}
