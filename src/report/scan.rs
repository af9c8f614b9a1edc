//! Byte-level scanning for the report's fast path: eight bytes at a time (SWAR, in safe code)
//! to find a string's end or a run of digits, and JSON numbers read exactly as serde_json
//! reads them. Never allocates; never guesses: a number serde would read by its slower route
//! (more than 19 digits, a large exponent) is `None` here, and the caller asks serde.

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The eight bytes at `i`, little-endian, when there are eight.
#[inline(always)]
pub fn word(b: &[u8], i: usize) -> Option<u64> {
    match b.get(i..) {
        Some(&[x0, x1, x2, x3, x4, x5, x6, x7, ..]) => {
            Some(u64::from_le_bytes([x0, x1, x2, x3, x4, x5, x6, x7]))
        }
        _ => None,
    }
}

/// The high bit of each byte of `w` that is not an ASCII digit (exact per byte).
#[inline(always)]
fn non_digit_mask(w: u64) -> u64 {
    // '0'..='9' become 0..=9; a byte stays under 0x80 after adding 0x76 only if it was ≤ 9.
    let t = w ^ (LO * 0x30);
    (((t & LOW7) + LO * 0x76) | t) & HI
}

/// The index of the first byte at or after `i` that ends a string's plain run: `"`, `\\`, or a
/// control character (which JSON does not allow in a string).
#[inline]
pub fn string_stop(b: &[u8], mut i: usize) -> Option<usize> {
    while let Some(w) = word(b, i) {
        // Each test flags its bytes in the high bit, and may flag a byte *above* a flagged one
        // (a borrow runs upward), never one below: so the lowest flag is exact, which is all a
        // search for the first stop needs. Four operations a test instead of six.
        let q = w ^ (LO * u64::from(b'"'));
        let e = w ^ (LO * u64::from(b'\\'));
        let m = ((q.wrapping_sub(LO) & !q)
            | (e.wrapping_sub(LO) & !e)
            | (w.wrapping_sub(LO * 0x20) & !w))
            & HI;
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b.get(i..)?
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| p + i)
}

/// The index of the first byte at or after `i` that is not an ASCII digit (`b.len()` if none).
#[inline]
pub fn digits_end(b: &[u8], mut i: usize) -> usize {
    while let Some(w) = word(b, i) {
        let m = non_digit_mask(w);
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// The end of the JSON number starting at `i`, its grammar checked as serde checks a number
/// it ignores: a sign, no leading zero, a digit after the point and in the exponent.
#[inline]
pub fn number_end(b: &[u8], mut i: usize) -> Option<usize> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    let e = digits_end(b, i);
    if e == i || (b[i] == b'0' && e > i + 1) {
        return None;
    }
    i = e;
    if b.get(i) == Some(&b'.') {
        let e = digits_end(b, i + 1);
        if e == i + 1 {
            return None;
        }
        i = e;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        let e = digits_end(b, i);
        if e == i {
            return None;
        }
        i = e;
    }
    Some(i)
}

/// Eight ASCII digits (the first in the lowest byte) as their number: three multiplies.
#[inline(always)]
fn eight_digits(w: u64) -> u64 {
    const MASK: u64 = 0x0000_00ff_0000_00ff;
    const MUL1: u64 = 100 + (1_000_000 << 32);
    const MUL2: u64 = 1 + (10_000 << 32);
    let v = w - LO * 0x30;
    let v = v * 10 + (v >> 8);
    let v1 = (v & MASK).wrapping_mul(MUL1);
    let v2 = ((v >> 16) & MASK).wrapping_mul(MUL2);
    u64::from(((v1.wrapping_add(v2)) >> 32) as u32)
}

/// The run of digits at `i`, read as it is found: `acc` followed by them, how many there
/// are, and where the run ends. The value wraps past 19 digits in all: a caller uses it only
/// when there are at most 19, which never overflow.
#[inline(always)]
fn digits(mut acc: u64, b: &[u8], mut i: usize) -> (u64, usize, usize) {
    const POW: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];
    let start = i;
    while let Some(w) = word(b, i) {
        let m = non_digit_mask(w);
        if m == 0 {
            acc = acc.wrapping_mul(100_000_000).wrapping_add(eight_digits(w));
            i += 8;
            continue;
        }
        let r = (m.trailing_zeros() / 8) as usize;
        if r > 0 {
            // The r digits are the low bytes: move them to the top, '0's below.
            let w = (w << (8 * (8 - r))) | ((LO * 0x30) >> (8 * r));
            acc = acc.wrapping_mul(POW[r]).wrapping_add(eight_digits(w));
        }
        return (acc, i + r - start, i + r);
    }
    while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
        acc = acc.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
        i += 1;
    }
    (acc, i - start, i)
}

/// 10^0 ..= 10^22: every one exactly representable, so the products are exact.
const POW10: [f64; 23] = {
    let mut t = [1.0; 23];
    let mut k = 1;
    while k < 23 {
        t[k] = t[k - 1] * 10.0;
        k += 1;
    }
    t
};

/// The JSON number at `i` as an `f64`, the same double serde_json (without `float_roundtrip`)
/// gives, and its end. `None`: not a number, or one serde reads by its slower route (more than
/// 19 digits, a power of ten beyond ±22).
///
/// serde reads the digits, point removed, into a u64 significand and divides (or multiplies)
/// it as an f64 by the power of ten from its table; an integer becomes a u64 (or an i64, or
/// -0.0) and then an f64. The same steps here give the same double.
#[inline]
pub fn f64_at(b: &[u8], i: usize) -> Option<(f64, usize)> {
    let negative = b.get(i) == Some(&b'-');
    let int = i + usize::from(negative);
    let (significand, n_int, int_end) = digits(0, b, int);
    if n_int == 0 || (b[int] == b'0' && n_int > 1) {
        return None;
    }
    let (significand, n_frac, mut end) = if b.get(int_end) == Some(&b'.') {
        let (s, n, e) = digits(significand, b, int_end + 1);
        if n == 0 {
            return None;
        }
        (s, n, e)
    } else {
        (significand, 0, int_end)
    };
    if n_int + n_frac > 19 {
        return None;
    }
    let mut exponent = -(n_frac as i32);
    let mut integer = n_frac == 0;
    if matches!(b.get(end), Some(b'e' | b'E')) {
        integer = false;
        end += 1;
        let minus = match b.get(end) {
            Some(b'-') => {
                end += 1;
                true
            }
            Some(b'+') => {
                end += 1;
                false
            }
            _ => false,
        };
        let e = digits_end(b, end);
        if e == end {
            return None;
        }
        // Saturated: anything past ±22 is left to serde anyway.
        let mut v = 0i32;
        for c in &b[end..e] {
            v = (v * 10 + i32::from(c - b'0')).min(100_000);
        }
        exponent += if minus { -v } else { v };
        end = e;
    }
    let f = significand as f64;
    let v = if integer {
        f
    } else {
        let pow = *POW10.get(exponent.unsigned_abs() as usize)?;
        // serde refuses an infinite product; nothing under 10^19 · 10^22 overflows.
        if exponent >= 0 {
            f * pow
        } else {
            f / pow
        }
    };
    Some((if negative { -v } else { v }, end))
}

/// The JSON number at `i` as a `u64`, when serde reads it as one (digits only, at most 19),
/// and its end.
#[inline]
pub fn u64_at(b: &[u8], i: usize) -> Option<(u64, usize)> {
    let (v, n, end) = digits(0, b, i);
    if n == 0 || n > 19 || (b[i] == b'0' && n > 1) {
        return None;
    }
    // A point or an exponent makes it a float, which serde does not read as a u64.
    if matches!(b.get(end), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    Some((v, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_stops_are_found_at_every_offset() {
        for len in 0..40 {
            for at in 0..len {
                for c in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                    let mut v = vec![b'a'; len];
                    v[at] = c;
                    if at + 1 < len {
                        v[at + 1] = b'"';
                    }
                    assert_eq!(string_stop(&v, 0), Some(at), "{len} {at}");
                    if at > 0 {
                        assert_eq!(string_stop(&v, at), Some(at), "{len} {at}");
                    }
                }
            }
        }
        // Every byte value, at every place in a word and past it, alone and before each
        // other byte value: found exactly when it is a stop.
        for c in 0..=255u8 {
            let stop = c == b'"' || c == b'\\' || c < 0x20;
            for at in 0..20 {
                for after in 0..=255u8 {
                    let mut v = vec![b'a'; 24];
                    v[at] = c;
                    v[at + 1] = after;
                    let after_stop = after == b'"' || after == b'\\' || after < 0x20;
                    let want = if stop {
                        Some(at)
                    } else if after_stop {
                        Some(at + 1)
                    } else {
                        None
                    };
                    assert_eq!(string_stop(&v, 0), want, "{c:#x} at {at} before {after:#x}");
                }
            }
        }
    }

    #[test]
    fn digit_runs_end_at_every_offset() {
        for len in 0..40 {
            for at in 0..=len {
                for stop in [b'.', b'/', b':', b'e', b',', 0xb0, 0x00, b' '] {
                    let mut v = vec![b'7'; len + 1];
                    v[at] = stop;
                    assert_eq!(digits_end(&v, 0), at, "{len} {at} {stop}");
                }
            }
        }
    }

    /// What serde_json makes of a number alone, as an f64 and as a u64.
    fn serde(s: &str) -> (Option<f64>, Option<u64>) {
        (
            serde_json::from_str::<f64>(s).ok(),
            serde_json::from_str::<u64>(s).ok(),
        )
    }

    fn check(s: &str) {
        let b = s.as_bytes();
        let (f, u) = serde(s);
        match f64_at(b, 0) {
            Some((v, end)) if end == b.len() => {
                let want = f.unwrap_or_else(|| panic!("{s}: fast read {v}, serde refuses"));
                assert_eq!(v.to_bits(), want.to_bits(), "{s}: {v} vs serde {want}");
            }
            // Not a whole number here: serde must refuse it too.
            Some(_) => assert!(f.is_none(), "{s}"),
            None => {
                // Deferred on purpose: more than 19 digits, or a power of ten beyond ±22.
                let (mantissa, exp) = s.split_once(['e', 'E']).unwrap_or((s, "0"));
                let digits = mantissa.bytes().filter(u8::is_ascii_digit).count();
                let frac = mantissa.split_once('.').map_or(0, |(_, f)| f.len() as i64);
                let exp = exp.parse::<i64>().map_or(i64::MAX, |e| e - frac);
                let slow = digits > 19 || exp.abs() > 22;
                assert!(f.is_none() || slow, "{s}: deferred, but serde reads {f:?}");
            }
        }
        let skipped = serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok();
        assert_eq!(number_end(b, 0) == Some(b.len()), skipped, "{s}: skipped?");
        match u64_at(b, 0) {
            Some((v, end)) if end == b.len() => assert_eq!(Some(v), u, "{s}"),
            _ => assert!(u.is_none() || s.len() > 19, "{s}: serde reads {u:?}"),
        }
    }

    #[test]
    fn numbers_read_as_serde_reads_them() {
        for s in [
            "0",
            "-0",
            "7",
            "-7",
            "00",
            "01",
            "-01",
            "0.5",
            "-0.0",
            "1.",
            ".5",
            "1e5",
            "1E5",
            "1e+5",
            "1e-5",
            "1e",
            "1e+",
            "-",
            "2.5e-3",
            "18.874196172882993",
            "0.35184547905112684",
            "577.3456795111554",
            "1234567890123456789",
            "12345678901234567890",
            "9007199254740993",
            "1e22",
            "1e23",
            "1.5e-22",
            "1e-23",
            "123.456e7",
            "3e2",
            "0e0",
            "0.000001",
            "1e00005",
            "99999999999999999999.5",
        ] {
            check(s);
        }
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20000))]
        #[test]
        fn every_number_reads_as_serde_reads_it(
            neg in any::<bool>(),
            int in "0|[1-9][0-9]{0,20}",
            frac in proptest::option::of("[0-9]{1,21}"),
            exp in proptest::option::of(("[eE]", "[+-]?", "[0-9]{1,3}")),
        ) {
            let mut s = String::new();
            if neg { s.push('-'); }
            s.push_str(&int);
            if let Some(f) = frac { s.push('.'); s.push_str(&f); }
            if let Some((e, sign, d)) = exp { s.push_str(&e); s.push_str(&sign); s.push_str(&d); }
            check(&s);
        }

        #[test]
        fn every_double_written_reads_back_as_serde_reads_it(v in any::<f64>()) {
            prop_assume!(v.is_finite());
            check(&serde_json::to_string(&v).unwrap_or_default());
            check(&v.to_string());
        }
    }
}
