//! A request's fingerprint: what a gateway forwards unchanged even when it re-serialises the
//! body — the text of the conversation and the sampling and length fields — hashed. Used to
//! join the two sides of a gateway tap when the gateway does not forward tokentap's header.
//!
//! Left out on purpose: `model` (gateways map it), `stream`/`stream_options` (LiteLLM adds
//! `include_usage`), `user`, `metadata` and anything else a gateway may add, drop or rename.
//! Object keys are visited in sorted order and numbers as `f64`, so key order, spacing and
//! `1` vs `1.0` do not matter. Only comparable within one process (the hasher is not stable
//! across builds).

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// The conversation itself, in every API shape.
const TEXT_FIELDS: &[&str] = &["messages", "prompt", "input", "system", "instructions"];

/// Sampling and length fields; the length limits share one slot (gateways translate them).
const PARAM_FIELDS: &[(&str, &str)] = &[
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("top_k", "top_k"),
    ("min_p", "min_p"),
    ("seed", "seed"),
    ("n", "n"),
    ("stop", "stop"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
    ("repetition_penalty", "repetition_penalty"),
    ("max_tokens", "max"),
    ("max_completion_tokens", "max"),
    ("max_output_tokens", "max"),
];

/// The fingerprint of a request body; `None` when it is not JSON or carries no conversation.
pub fn fingerprint(body: &[u8]) -> Option<u64> {
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let mut h = DefaultHasher::new();
    let mut any = false;
    for f in TEXT_FIELDS {
        if let Some(v) = obj.get(*f).filter(|v| !v.is_null()) {
            f.hash(&mut h);
            walk(v, &mut h);
            any = true;
        }
    }
    if !any {
        return None;
    }
    let mut params: Vec<(&str, &Value)> = PARAM_FIELDS
        .iter()
        .filter_map(|(f, slot)| Some((*slot, obj.get(*f).filter(|v| !v.is_null())?)))
        .collect();
    params.sort_by(|a, b| a.0.cmp(b.0));
    for (slot, v) in params {
        slot.hash(&mut h);
        walk(v, &mut h);
    }
    Some(h.finish())
}

/// Hash a value's strings and numbers, skipping nulls (gateways drop null fields).
fn walk(v: &Value, h: &mut DefaultHasher) {
    match v {
        Value::Null => {}
        Value::Bool(b) => b.hash(h),
        Value::Number(n) => n.as_f64().map(f64::to_bits).hash(h),
        Value::String(s) => s.hash(h),
        Value::Array(a) => {
            a.len().hash(h);
            a.iter().for_each(|x| walk(x, h));
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().filter(|k| !o[*k].is_null()).collect();
            keys.sort();
            for k in keys {
                k.hash(h);
                walk(&o[k], h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    #[test]
    fn survives_a_gateways_reserialisation() {
        let client = br#"{"model":"tiny","messages":[{"role":"user","content":"hi there"}],"max_tokens":16,"temperature":1,"stream":true}"#;
        // As LiteLLM forwards it: another model name, keys reordered and spaced, nulls dropped,
        // stream_options added, 1 written as 1.0, max_tokens renamed.
        let forwarded = br#"{"messages": [{"content": "hi there", "role": "user", "name": null}], "model": "Qwen/Qwen2.5-7B", "stream": true, "stream_options": {"include_usage": true}, "temperature": 1.0, "max_completion_tokens": 16}"#;
        assert_eq!(fingerprint(client), fingerprint(forwarded));
        assert!(fingerprint(client).is_some());
    }

    #[test]
    fn differs_on_text_and_sampling() {
        let a = br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":16}"#;
        let b = br#"{"messages":[{"role":"user","content":"ho"}],"max_tokens":16}"#;
        let c = br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":17}"#;
        let d = br#"{"messages":[{"role":"system","content":"hi"}],"max_tokens":16}"#;
        let fa = fingerprint(a);
        for other in [b.as_slice(), c, d] {
            assert_ne!(fa, fingerprint(other));
        }
        assert_eq!(fingerprint(br#"{"model":"x"}"#), None);
        assert_eq!(fingerprint(b"not json"), None);
        assert!(fingerprint(br#"{"prompt":"once upon"}"#).is_some());
    }
}
