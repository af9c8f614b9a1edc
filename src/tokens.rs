//! The token estimate of a text without a tokenizer: about four bytes a token. The sim counts
//! its prompts with it (plus a per-message template overhead) and bench sorts prompts into
//! buckets with it, so the two agree. Never used for a measured count: records take tokens from
//! `usage` or the content events.

/// About four bytes per token, at least one.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4).max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn four_bytes_a_token_at_least_one() {
        assert_eq!(super::estimate_tokens(""), 1);
        assert_eq!(super::estimate_tokens("abcd"), 1);
        assert_eq!(super::estimate_tokens("abcde"), 2);
        assert_eq!(super::estimate_tokens(&"x".repeat(4000)), 1000);
    }
}
