//! A compressed response body, decoded for measurement: arbitrary bytes in any coding, read in
//! arbitrary pieces, never panic and never decode past the bound; a gzip or zstd stream of the
//! input, cut anywhere, decodes back to the input exactly.

use std::io::Write;

use crate::meter::decode::{Coding, Decoder, MAX_DECODED_PER_READ, MAX_RATIO};

const CODINGS: [Coding; 4] = [Coding::Gzip, Coding::Deflate, Coding::Br, Coding::Zstd];

/// Byte 0: the coding (and, above 127, a round trip of the rest); byte 1: where reads split.
pub fn compressed_body(data: &[u8]) {
    let [mode, seed, rest @ ..] = data else {
        return;
    };
    if *mode >= 128 {
        return round_trip(*mode, *seed, rest);
    }
    let Ok(mut d) = Decoder::new(CODINGS[usize::from(*mode) % 4]) else {
        return;
    };
    let mut out = Vec::new();
    for p in super::pieces(rest, *seed) {
        match d.feed(p, &mut out) {
            Ok(()) => assert!(out.len() <= MAX_DECODED_PER_READ + MAX_RATIO * p.len()),
            Err(_) => return,
        }
    }
}

fn round_trip(mode: u8, seed: u8, plain: &[u8]) {
    let (coding, packed) = if mode % 2 == 0 {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let ok = e.write_all(plain).is_ok();
        match e.finish() {
            Ok(v) if ok => (Coding::Gzip, v),
            _ => return,
        }
    } else {
        match zstd::stream::encode_all(plain, 1) {
            Ok(v) => (Coding::Zstd, v),
            Err(_) => return,
        }
    };
    let Ok(mut d) = Decoder::new(coding) else {
        panic!("{coding:?}: no decoder");
    };
    let (mut got, mut out) = (Vec::new(), Vec::new());
    for p in super::pieces(&packed, seed) {
        if let Err(e) = d.feed(p, &mut out) {
            panic!("{coding:?}: {e}");
        }
        got.extend_from_slice(&out);
    }
    assert_eq!(got, plain, "{coding:?} did not decode back");
}
