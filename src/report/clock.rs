//! Record times (`ts`, RFC 3339 in UTC) read fast: the same `SystemTime` humantime gives, with
//! the minute of the last record kept so that only its seconds are read again.

use std::time::{Duration, SystemTime};

/// Record times (RFC 3339, UTC) read as `humantime` reads them, with the minute of the last
/// one kept: records of one minute share their first 17 bytes (`2026-11-18T11:06:`), so only
/// the seconds are read again.
#[derive(Debug, Default)]
pub struct Clock {
    minute: [u8; 17],
    /// The time of `minute`, when one is kept.
    base: Option<SystemTime>,
}

impl Clock {
    pub fn time(&mut self, ts: &str) -> Option<SystemTime> {
        let b = ts.as_bytes();
        if let (Some(base), Some(head)) = (self.base, b.get(..17)) {
            if head == self.minute {
                if let Some(d) = seconds(b) {
                    return Some(base + d);
                }
            }
        }
        let t = humantime::parse_rfc3339(ts).ok()?;
        // A new minute: kept when the seconds read here agree with humantime's reading.
        self.base = None;
        if let (Some(d), Some(head)) = (seconds(b), b.get(..17)) {
            if let Some(base) = t.checked_sub(d) {
                self.minute.copy_from_slice(head);
                self.base = Some(base);
            }
        }
        Some(t)
    }
}

/// The seconds of `YYYY-MM-DDTHH:MM:SS[.fraction]Z` as humantime counts them (a leap second
/// 60 as 59; fraction digits past nine ignored), or `None` for any other form.
fn seconds(b: &[u8]) -> Option<Duration> {
    let (s, rest) = (b.get(17..19)?, b.get(19..)?);
    if !s.iter().all(u8::is_ascii_digit) || b.last() != Some(&b'Z') {
        return None;
    }
    let sec = (u64::from(s[0] - b'0') * 10 + u64::from(s[1] - b'0')).min(59);
    if s[0] > b'6' || (s[0] == b'6' && s[1] > b'0') {
        return None;
    }
    let mut nanos = 0u32;
    match rest {
        [b'Z'] => {}
        [b'.', digits @ .., b'Z'] if !digits.is_empty() => {
            let mut mult = 100_000_000;
            for c in digits {
                if !c.is_ascii_digit() {
                    return None;
                }
                nanos += mult * u32::from(c - b'0');
                mult /= 10;
            }
        }
        _ => return None,
    }
    Some(Duration::new(sec, nanos))
}

#[cfg(test)]
mod tests {
    #[test]
    fn record_times_read_as_humantime_reads_them_with_the_minute_kept_or_not() {
        let times = [
            "2026-11-18T11:06:40.004425Z",
            "2026-11-18T11:06:41Z",
            "2026-11-18T11:06:41.5Z",
            "2026-11-18T11:06:41.123456789123Z",
            "2026-11-18T11:06:60Z",
            "2026-11-18T11:06:61Z",
            "2026-11-18T11:06:59.Z",
            "2026-11-18T11:06:0xZ",
            "2026-11-18T11:06:40.004425+00:00",
            "2026-11-18T11:06:40.0a4425Z",
            "2026-11-18T11:07:00.000001Z",
            "2026-11-18T11:06",
            "",
            "2024-02-29T23:59:59.999999Z",
        ];
        for warm in times {
            for t in times {
                let mut c = super::Clock::default();
                c.time(warm);
                assert_eq!(
                    c.time(t),
                    humantime::parse_rfc3339(t).ok(),
                    "{t} after {warm}"
                );
            }
        }
    }
}
