//! What the report's records are, for its first line: a window of time (`report --since T
//! --until T`: only the records whose `ts` falls in `[since, until)`, from files or from
//! ClickHouse, so that the exact percentiles of the records cover the same window as a
//! Prometheus rule's `rate(…[5m])`), and a distributed bench run read as one.

use std::time::SystemTime;

use serde::Serialize;

/// The window as given, each bound in the records' own `ts` form (RFC 3339, microseconds, UTC).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Records read and left out: outside the window, or with no readable `ts` (files only;
    /// ClickHouse leaves them out in its query).
    pub outside: usize,
    #[serde(skip)]
    bounds: (Option<SystemTime>, Option<SystemTime>),
}

/// The distributed bench run the records make up (`bench --shard I/N`), read as one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Distributed {
    pub run_id: String,
    /// N.
    pub shards: u32,
    /// The shards read, from 1.
    pub present: Vec<u32>,
    /// What `--allow-partial` let through, when anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
}

/// A bound that is not a time.
#[derive(Debug, thiserror::Error)]
#[error("--{flag} {value:?}: not a time like 2026-12-05T09:00:00Z (RFC 3339, UTC)")]
pub struct BadTime {
    flag: &'static str,
    value: String,
}

fn parse(flag: &'static str, v: Option<&str>) -> Result<Option<SystemTime>, BadTime> {
    v.map(|s| {
        humantime::parse_rfc3339_weak(s.trim()).map_err(|_| BadTime {
            flag,
            value: s.to_owned(),
        })
    })
    .transpose()
}

impl Window {
    /// The window of `--since` and `--until`; none when neither is given.
    pub fn of(since: Option<&str>, until: Option<&str>) -> Result<Option<Window>, BadTime> {
        let bounds = (parse("since", since)?, parse("until", until)?);
        if bounds == (None, None) {
            return Ok(None);
        }
        let form =
            |t: Option<SystemTime>| t.map(|t| humantime::format_rfc3339_micros(t).to_string());
        Ok(Some(Window {
            since: form(bounds.0),
            until: form(bounds.1),
            outside: 0,
            bounds,
        }))
    }

    /// Whether a record of this `ts` is in the window; a `ts` that is no time is not.
    pub fn holds(&self, ts: &str) -> bool {
        let Ok(t) = humantime::parse_rfc3339_weak(ts) else {
            return false;
        };
        self.bounds.0.is_none_or(|s| t >= s) && self.bounds.1.is_none_or(|u| t < u)
    }

    /// Whether the bounds leave nothing: `until` at or before `since`.
    pub fn is_empty(&self) -> bool {
        matches!(self.bounds, (Some(s), Some(u)) if u <= s)
    }

    /// The window as SQL conditions on `ts`, a `String` column in the records' own form, which
    /// sorts as the time does. The bounds are times tokentap formatted (digits, `-`, `:`, `.`,
    /// `T`, `Z`): nothing in them needs quoting.
    pub fn conditions(&self) -> Vec<String> {
        let mut cond = Vec::new();
        if let Some(s) = &self.since {
            cond.push(format!("ts >= '{s}'"));
        }
        if let Some(u) = &self.until {
            cond.push(format!("ts < '{u}'"));
        }
        cond
    }

    /// ", records with ts from … until …" for a window, nothing for none.
    pub fn phrase(w: Option<&Window>) -> String {
        w.map_or_else(String::new, |w| format!(", records with {}", w.words()))
    }

    /// The window in words, for the report's first line.
    pub fn words(&self) -> String {
        match (&self.since, &self.until) {
            (Some(s), Some(u)) => format!("ts from {s} until {u}"),
            (Some(s), None) => format!("ts from {s}"),
            (None, Some(u)) => format!("ts until {u}"),
            (None, None) => String::new(),
        }
    }
}

impl super::Report {
    /// Where the records came from, and their window when one was given: the report's first
    /// line.
    pub fn scope(&self) -> String {
        let mut s = self.sources.as_str().to_owned();
        if let Some(d) = &self.distributed {
            if d.present.len() as u32 == d.shards {
                s += &format!("; run {}, its {} shards merged", d.run_id, d.shards);
            } else {
                let list: Vec<String> = d.present.iter().map(u32::to_string).collect();
                s += &format!(
                    "; run {}, shards {} of {} only",
                    d.run_id,
                    list.join(", "),
                    d.shards
                );
            }
        }
        if let Some(w) = &self.window {
            s += &format!("; {}", w.words());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_holds_since_and_not_until() {
        let w = Window::of(Some("2026-12-05T09:00:00Z"), Some("2026-12-05 09:05:00"))
            .unwrap()
            .unwrap();
        assert_eq!(w.since.as_deref(), Some("2026-12-05T09:00:00.000000Z"));
        assert!(w.holds("2026-12-05T09:00:00.000000Z"));
        assert!(w.holds("2026-12-05T09:04:59.999999Z"));
        assert!(!w.holds("2026-12-05T09:05:00.000000Z"));
        assert!(!w.holds("2026-12-05T08:59:59.999Z"));
        assert!(!w.holds("yesterday"));
        assert_eq!(
            w.conditions(),
            [
                "ts >= '2026-12-05T09:00:00.000000Z'",
                "ts < '2026-12-05T09:05:00.000000Z'"
            ]
        );
        assert!(!w.is_empty());
        assert!(Window::of(None, None).unwrap().is_none());
        let e = Window::of(Some("5 minutes ago"), None).unwrap_err();
        assert!(
            e.to_string().starts_with("--since \"5 minutes ago\""),
            "{e}"
        );
        let open = Window::of(None, Some("2026-12-05T09:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(open.words(), "ts until 2026-12-05T09:00:00.000000Z");
        assert!(
            Window::of(Some("2026-12-05T09:00:00Z"), Some("2026-12-05T09:00:00Z"))
                .unwrap()
                .unwrap()
                .is_empty()
        );
    }
}
