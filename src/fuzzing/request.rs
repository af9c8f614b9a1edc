//! The request side: the byte-exact splices and the two fingerprints.

use serde_json::Value;

use crate::openai::{insert_field, peek_request, rewrite_model};

/// `out` is `body` with `body[s..e]` replaced by `new` for some span, and that span is the
/// JSON string `old`: every other byte as it was.
fn spliced_at(body: &[u8], out: &[u8], new: &[u8], old: &str) {
    let prefix = body.iter().zip(out).take_while(|(a, b)| a == b).count();
    let suffix = body
        .iter()
        .rev()
        .zip(out.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let Some(tail) = out.len().checked_sub(new.len()) else {
        panic!("output shorter than the spliced value");
    };
    let found = (tail.saturating_sub(suffix)..=prefix.min(tail)).any(|s| {
        let after = tail - s;
        let Some(e) = body.len().checked_sub(after) else {
            return false;
        };
        e >= s
            && out[s..s + new.len()] == *new
            && serde_json::from_slice::<String>(&body[s..e]).is_ok_and(|v| v == old)
    });
    assert!(
        found,
        "the splice changed bytes outside the value it replaced"
    );
}

/// The splices as the proxy makes them: the first line is the new value (the model the route
/// maps to, or the cache salt), the rest the request body. A model is rewritten only when the
/// request names one (as `forward` does); the output is JSON when the body was, differs from it
/// only in that member, and leaves every other byte as it was. `cache_salt` and
/// `stream_options` are inserted the same way (one function, `insert_field`).
pub fn request_splice(data: &[u8]) {
    let (first, body) = match data.iter().position(|&b| b == b'\n') {
        Some(nl) => (&data[..nl], &data[nl + 1..]),
        None => (&b""[..], data),
    };
    let value = String::from_utf8_lossy(first).into_owned();
    let quoted = serde_json::to_vec(&value).unwrap_or_default();
    let parsed = serde_json::from_slice::<Value>(body).ok();

    // NB: only objects: `peek_request` also reads an array positionally (serde's derive does),
    // and there is no member to rewrite in one.
    let info = peek_request(body);
    if let (Some(old), Some(Value::Object(_))) = (&info.model, &parsed) {
        match rewrite_model(body, &value) {
            Some(out) => {
                spliced_at(body, &out, &quoted, old);
                if let Some(Value::Object(mut want)) = parsed.clone() {
                    want.insert("model".into(), Value::String(value.clone()));
                    let got = serde_json::from_slice::<Value>(&out);
                    assert!(
                        got.as_ref().is_ok_and(|g| *g == Value::Object(want)),
                        "{got:?}"
                    );
                }
                assert_eq!(peek_request(&out).model.as_deref(), Some(value.as_str()));
            }
            None => panic!("the request names model {old:?} but it was not rewritten"),
        }
    }

    for key in ["cache_salt", "stream_options"] {
        let out = insert_field(body, key, &value);
        let Some(Value::Object(obj)) = &parsed else {
            continue;
        };
        match out {
            Some(out) => {
                assert!(!obj.contains_key(key), "{key} inserted a second time");
                let mut want = obj.clone();
                want.insert(key.into(), Value::String(value.clone()));
                let got = serde_json::from_slice::<Value>(&out);
                assert!(
                    got.as_ref().is_ok_and(|g| *g == Value::Object(want)),
                    "{got:?}"
                );
            }
            None => assert!(obj.contains_key(key), "an object without {key} refused"),
        }
    }
}

/// The fingerprints. A key's is `sha256:` and 64 lowercase hex digits. A request's survives
/// what a gateway does to a body — re-serialised (keys sorted, spacing changed), the model
/// renamed, `stream_options` added — and is the same on every call.
pub fn fingerprint(data: &[u8]) {
    let fp = crate::keys::fingerprint(data);
    assert!(fp.len() == 71 && fp.starts_with("sha256:"));
    assert!(fp[7..]
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));

    let Some(h) = crate::openai::fingerprint(data) else {
        return;
    };
    assert_eq!(crate::openai::fingerprint(data), Some(h));
    let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(data) else {
        panic!("a fingerprint of a body that is not a JSON object");
    };
    for pretty in [false, true] {
        let re = if pretty {
            serde_json::to_vec_pretty(&obj)
        } else {
            serde_json::to_vec(&obj)
        };
        let Ok(re) = re else {
            panic!("a parsed body does not serialise");
        };
        assert_eq!(crate::openai::fingerprint(&re), Some(h), "re-serialised");
    }
    obj.insert("model".into(), Value::String("gateway/mapped".into()));
    obj.insert(
        "stream_options".into(),
        serde_json::json!({"include_usage": true}),
    );
    let Ok(re) = serde_json::to_vec(&obj) else {
        panic!("a parsed body does not serialise");
    };
    assert_eq!(
        crate::openai::fingerprint(&re),
        Some(h),
        "model or stream_options"
    );
}
