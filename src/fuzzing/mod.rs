//! Property checks over arbitrary bytes, one per fuzz target (`fuzz/fuzz_targets/`), and
//! replayed over every corpus and regression input by `tests/suite/fuzz_replay.rs` on stable. Each
//! `pub fn <target>(data: &[u8])` returns normally or panics on a violated property; it never
//! does I/O. A leaf: it imports what it checks and nothing uses it.
//!
//! Inputs that need a knob (an event bound, where reads split) take it from their first bytes,
//! so a corpus file replays exactly as it was fuzzed.

mod decode;
mod offline;
mod request;
mod stream;
mod wire;

pub use decode::compressed_body;
pub use offline::{config, report_line};
pub use request::{fingerprint, request_splice};
pub use stream::{event_verdict, sse_split};
pub use wire::{http_chunked, http_head};

/// A target's check: returns, or panics on a violated property.
pub type Check = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` and `fuzz/corpus/<name>/` call it.
pub const TARGETS: &[(&str, Check)] = &[
    ("http_head", http_head),
    ("http_chunked", http_chunked),
    ("sse_split", sse_split),
    ("event_verdict", event_verdict),
    ("request_splice", request_splice),
    ("fingerprint", fingerprint),
    ("report_line", report_line),
    ("config", config),
    ("compressed_body", compressed_body),
];

/// Cut points for `len` bytes, drawn from `seed` (a small xorshift: the same seed, the same
/// cuts). Pieces are mostly short, sometimes empty, sometimes long.
fn cuts(len: usize, seed: u8) -> Vec<usize> {
    let mut x = u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut at = 0;
    let mut out = Vec::new();
    while at < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let step = match x % 8 {
            0 => 0,
            1..=5 => (x >> 8) as usize % 8 + 1,
            _ => (x >> 8) as usize % 300 + 1,
        };
        at = (at + step).min(len);
        out.push(at);
    }
    out
}

/// `data` in the pieces [`cuts`] gives.
fn pieces(data: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut from = 0;
    cuts(data.len(), seed)
        .into_iter()
        .map(|to| {
            let p = &data[from..to];
            from = to;
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn pieces_cover_the_input_in_order() {
        let data: Vec<u8> = (0..=255).cycle().take(5000).collect();
        for seed in [0, 1, 7, 255] {
            assert_eq!(super::pieces(&data, seed).concat(), data);
        }
        assert!(super::pieces(b"", 3).is_empty());
    }
}
