//! The simulated engine's prefix cache: a prompt's text in blocks of 64 bytes (16 tokens at the
//! sim's four bytes per token), each block keyed by the hash of everything up to its end. The
//! blocks an earlier prompt already had are cached: they skip prefill and are reported as
//! `cached_tokens`, in whole blocks, as vLLM reports them. Bounded: past a million blocks the
//! cache starts over.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

const BLOCK_BYTES: usize = 64;
const BLOCK_TOKENS: u64 = 16;
const MAX_BLOCKS: usize = 1 << 20;

#[derive(Default)]
pub struct PrefixCache(Mutex<HashSet<u64>>);

impl PrefixCache {
    /// The cached tokens of a prompt of `tokens` tokens, then remember its blocks. At least one
    /// token is always computed.
    pub fn lookup_and_insert(&self, text: &str, tokens: u64) -> u64 {
        let Ok(mut seen) = self.0.lock() else {
            return 0;
        };
        if seen.len() > MAX_BLOCKS {
            seen.clear();
        }
        let mut h = DefaultHasher::new();
        let (mut hit, mut prefix) = (0u64, true);
        for block in text.as_bytes().chunks_exact(BLOCK_BYTES) {
            block.hash(&mut h);
            let key = h.finish();
            if prefix && seen.contains(&key) {
                hit += 1;
            } else {
                prefix = false;
                seen.insert(key);
            }
        }
        (hit * BLOCK_TOKENS).min(tokens.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::PrefixCache;

    #[test]
    fn a_repeated_prefix_is_cached_in_whole_blocks() {
        let c = PrefixCache::default();
        let a = "x".repeat(64 * 10 + 5);
        assert_eq!(c.lookup_and_insert(&a, 162), 0);
        assert_eq!(c.lookup_and_insert(&a, 162), 160);
        // The same start, then something else: only the shared whole blocks.
        let b = format!("{}{}", &a[..64 * 4 + 10], "y".repeat(300));
        assert_eq!(c.lookup_and_insert(&b, 150), 64);
        assert_eq!(c.lookup_and_insert("short", 2), 0);
    }
}
