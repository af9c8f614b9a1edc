//! What a TOML parse error says: one line, types in words, and the line of the key itself.

/// A TOML or serde message in one line, with Rust's type names in words.
pub(super) fn in_words(msg: &str) -> String {
    let mut m = msg.trim().replace('\n', "; ");
    for (ty, words) in [
        ("usize", "a whole number (0 or more)"),
        ("u64", "a whole number (0 or more)"),
        ("u32", "a whole number (0 or more)"),
        ("u16", "a whole number from 0 to 65535"),
        ("u8", "a whole number from 0 to 255"),
        ("i64", "a whole number"),
        ("f64", "a number"),
    ] {
        m = m.replace(&format!("expected {ty}"), &format!("expected {words}"));
    }
    m
}

/// The 1-based line of byte `at`; for an unknown key, the line where that key is written at or
/// after `at` (its table's span starts at the table).
pub(super) fn line_of(text: &str, at: usize, unknown: Option<&str>) -> usize {
    let at = at.min(text.len());
    let line = text.as_bytes()[..at]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1;
    let Some(key) = unknown else { return line };
    text.lines()
        .enumerate()
        .skip(line - 1)
        .find(|(_, l)| {
            let l = l.trim_start();
            let bare = l.strip_prefix(key);
            let quoted = l
                .strip_prefix('"')
                .and_then(|q| q.strip_prefix(key))
                .and_then(|q| q.strip_prefix('"'));
            bare.or(quoted)
                .is_some_and(|rest| matches!(rest.trim_start().chars().next(), Some('=' | '.')))
        })
        .map_or(line, |(i, _)| i + 1)
}
