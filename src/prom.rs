//! The Prometheus text exposition format's one rule every exporter here shares: how a label
//! value is escaped.

/// A label value escaped for the text format: backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn quotes_backslashes_and_newlines_are_escaped() {
        assert_eq!(super::escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(super::escape_label("balanced C=4"), "balanced C=4");
    }
}
