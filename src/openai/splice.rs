//! Byte-exact edits of a request body: one top-level member changed or added, every other byte
//! left as it was (no re-serialisation).

/// Replace the top-level `"model"` string of a JSON object with `new_model`, leaving every other
/// byte untouched. Returns `None` when the body has no top-level string `model`.
pub fn rewrite_model(body: &[u8], new_model: &str) -> Option<Vec<u8>> {
    let (start, end) = top_level_span(body, b"model", true)?;
    let quoted = serde_json::to_string(new_model).ok()?;
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[end..]);
    Some(out)
}

/// Insert `"key":"value"` as the first member of a top-level JSON object, leaving every other
/// byte untouched. `None` when the body is not an object or already has `key` (of any type:
/// a second member of one name is read by one parser as the first, by another as the last).
pub fn insert_field(body: &[u8], key: &str, value: &str) -> Option<Vec<u8>> {
    let start = skip_ws(body, 0);
    if body.get(start) != Some(&b'{') || top_level_span(body, key.as_bytes(), false).is_some() {
        return None;
    }
    let after = skip_ws(body, start + 1);
    let empty = body.get(after) == Some(&b'}');
    let member = format!(
        "{}:{}{}",
        serde_json::to_string(key).ok()?,
        serde_json::to_string(value).ok()?,
        if empty { "" } else { "," }
    );
    let mut out = Vec::with_capacity(body.len() + member.len());
    out.extend_from_slice(&body[..=start]);
    out.extend_from_slice(member.as_bytes());
    out.extend_from_slice(&body[start + 1..]);
    Some(out)
}

/// Byte span (quotes included) of the value of top-level key `key` in a JSON object; with
/// `string`, of its first string value only.
fn top_level_span(body: &[u8], key: &[u8], string: bool) -> Option<(usize, usize)> {
    let mut i = skip_ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(body, i);
        match body.get(i)? {
            b'}' => return None,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(body, i)?;
        let this_key = &body[i + 1..key_end - 1];
        i = skip_ws(body, key_end);
        if body.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(body, i + 1);
        let value_end = value_end(body, i)?;
        if this_key == key && (!string || body.get(i) == Some(&b'"')) {
            return Some((i, value_end));
        }
        i = value_end;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// Index just past the closing quote of the string starting at `i`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// Index just past the JSON value starting at `i` (strings, nesting and scalars).
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while !matches!(
                b.get(j),
                None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            ) {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}
