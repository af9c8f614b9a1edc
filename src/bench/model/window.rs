//! A replay's slice (`--window FROM..TO`): each end an offset from the first request or a
//! wall-clock time, parsed from the flag and asked of each recorded request.

use std::time::{Duration, SystemTime};

/// One end of `--window`: an offset from the first request, or a wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    Offset(Duration),
    At(SystemTime),
}

/// `--window FROM..TO`: either side an offset from the first request (`90s`, `1h30m`) or an
/// RFC 3339 time, either side may be left out (`..10m`, `2026-12-01T14:00:00Z..`).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub from: Option<Bound>,
    pub to: Option<Bound>,
    /// As given.
    pub text: String,
}

impl Window {
    pub fn parse(s: &str) -> Result<Window, String> {
        let (a, b) = s
            .split_once("..")
            .ok_or_else(|| format!("--window {s:?}: expected FROM..TO (e.g. 10m..20m)"))?;
        let bound = |v: &str| -> Result<Option<Bound>, String> {
            let v = v.trim();
            if v.is_empty() {
                return Ok(None);
            }
            if let Ok(t) = humantime::parse_rfc3339_weak(v) {
                return Ok(Some(Bound::At(t)));
            }
            humantime::parse_duration(v)
                .map(|d| Some(Bound::Offset(d)))
                .map_err(|e| {
                    format!("--window {s:?}: {v:?} is neither a duration (10m) nor an RFC 3339 time ({e})")
                })
        };
        Ok(Window {
            from: bound(a)?,
            to: bound(b)?,
            text: s.to_owned(),
        })
    }

    pub fn holds(&self, offset: Duration, at: Option<SystemTime>) -> bool {
        let after = |b: &Bound| match b {
            Bound::Offset(d) => offset >= *d,
            Bound::At(t) => at.is_some_and(|a| a >= *t),
        };
        let before = |b: &Bound| match b {
            Bound::Offset(d) => offset <= *d,
            Bound::At(t) => at.is_some_and(|a| a <= *t),
        };
        self.from.as_ref().is_none_or(after) && self.to.as_ref().is_none_or(before)
    }
}
