//! SLO thresholds (the write-up's, overridable by a TOML file or serve's `[slo]`), what each
//! bounds, and how one request stands against each: the rule the report's verdicts and the
//! proxy's per-request SLO counts share. A leaf: it reaches no other module.

use serde::{Deserialize, Serialize};

/// SLO thresholds (defaults from the write-up), overridable by a TOML file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Slos {
    /// TTFT p95 bounds in ms.
    pub ttft_interactive_ms: f64,
    pub ttft_strict_ms: f64,
    pub ttft_code_completion_ms: f64,
    pub ttft_agents_ms: f64,
    /// Per-stream output tok/s floors (at p95, i.e. the slowest 5 % of streams).
    pub reading_tok_s: f64,
    pub coding_tok_s: f64,
    /// The knee: first concurrency whose p95 TTFT exceeds this multiple of its C=1 value.
    pub knee_factor: f64,
    /// Goodput: a request counts when its TTFT ≤ this and its tok/s ≥ `goodput_tok_s`.
    pub goodput_ttft_ms: f64,
    pub goodput_tok_s: f64,
}

impl Default for Slos {
    fn default() -> Self {
        Slos {
            ttft_interactive_ms: 500.0,
            ttft_strict_ms: 200.0,
            ttft_code_completion_ms: 100.0,
            ttft_agents_ms: 1000.0,
            reading_tok_s: 6.0,
            coding_tok_s: 60.0,
            knee_factor: 2.0,
            goodput_ttft_ms: 500.0,
            goodput_tok_s: 6.0,
        }
    }
}

/// What an SLO bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SloKind {
    /// p95 TTFT at most the threshold, ms.
    #[serde(rename = "ttft")]
    Ttft,
    /// The slowest 5 % of streams (1000 ÷ TPOT p95) at least the threshold, tok/s.
    #[serde(rename = "tok_s")]
    TokS,
}

impl SloKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SloKind::Ttft => "ttft",
            SloKind::TokS => "tok_s",
        }
    }
}

impl Slos {
    /// (name, kind, threshold): [`SloKind::Ttft`] = p95 TTFT ≤ ms; [`SloKind::TokS`] =
    /// p95-slowest tok/s ≥.
    pub fn list(&self) -> Vec<(&'static str, SloKind, f64)> {
        use SloKind::{TokS, Ttft};
        vec![
            ("interactive", Ttft, self.ttft_interactive_ms),
            ("strict", Ttft, self.ttft_strict_ms),
            ("code_completion", Ttft, self.ttft_code_completion_ms),
            ("agents", Ttft, self.ttft_agents_ms),
            ("reading_speed", TokS, self.reading_tok_s),
            ("interactive_coding", TokS, self.coding_tok_s),
        ]
    }
}

/// The name of the goodput SLO in the per-request counts (beside the six of [`Slos::list`]).
pub const GOODPUT: &str = "goodput";

/// What the SLOs read of one request.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// A generating API shape (chat, completions, Responses, Messages).
    pub generates: bool,
    /// The status the client received (0: none).
    pub status: u16,
    /// Its outcome was `ok`.
    pub ok: bool,
    /// Its client left before the end (`client_cancelled`).
    pub cancelled: bool,
    pub stream: bool,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
}

/// How the report classes a request, reduced to what the SLOs need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Served,
    /// Failed by the service, or throttled (429): a miss of every SLO it is in.
    Failed,
    /// Cancelled by its client, refused as the client's fault (4xx but 429), or not a
    /// generation: in no SLO.
    Out,
}

impl Request {
    fn standing(&self) -> Standing {
        if !self.generates || self.cancelled {
            return Standing::Out;
        }
        match self.status {
            429 => Standing::Failed,
            400..=499 => Standing::Out,
            _ if self.ok => Standing::Served,
            _ => Standing::Failed,
        }
    }

    /// Per-stream output tok/s, 1000 ÷ TPOT.
    fn tok_s(&self) -> Option<f64> {
        self.tpot_ms.filter(|t| *t > 0.0).map(|t| 1000.0 / t)
    }
}

impl Slos {
    /// The SLOs [`Slos::judge`] judges, in its order: the six of [`Slos::list`], then goodput.
    pub const NAMES: [&'static str; 7] = [
        "interactive",
        "strict",
        "code_completion",
        "agents",
        "reading_speed",
        "interactive_coding",
        GOODPUT,
    ];

    /// Each SLO's standing for one request, in the order of [`Slos::list`] then
    /// [`GOODPUT`]: `Some(true)` met, `Some(false)` missed, `None` not in it.
    /// - A TTFT or tok/s SLO judges a served request that has the figure, and misses every
    ///   stream the service failed or throttled (as the report's p95 ranks them beyond every
    ///   threshold).
    /// - Goodput judges every generation the client did not cancel, streamed or not: met when
    ///   it was served with TTFT ≤ `goodput_ttft_ms` and tok/s ≥ `goodput_tok_s` (each when it
    ///   has the figure), missed otherwise (as the report's goodput counts).
    /// - Requests the client cancelled, its 4xx (other than 429) and other traffic are in none.
    pub fn judge(&self, r: &Request) -> [(&'static str, Option<bool>); 7] {
        let standing = r.standing();
        let tok_s = r.tok_s();
        let one = |kind: SloKind, thr: f64| match standing {
            Standing::Served => match kind {
                SloKind::Ttft => r.ttft_ms.map(|t| t <= thr),
                SloKind::TokS => tok_s.map(|s| s >= thr),
            },
            Standing::Failed if r.stream => Some(false),
            _ => None,
        };
        let list = self.list();
        let mut out = [(GOODPUT, None); 7];
        for (slot, (name, kind, thr)) in out.iter_mut().zip(list) {
            *slot = (name, one(kind, thr));
        }
        out[6].1 = match standing {
            Standing::Served => Some(
                r.ttft_ms.is_none_or(|t| t <= self.goodput_ttft_ms)
                    && tok_s.is_none_or(|s| s >= self.goodput_tok_s),
            ),
            Standing::Failed => Some(false),
            Standing::Out => None,
        };
        out
    }

    /// The first threshold that is not a positive number, as (key, value).
    pub fn invalid(&self) -> Option<(&'static str, f64)> {
        [
            ("ttft_interactive_ms", self.ttft_interactive_ms),
            ("ttft_strict_ms", self.ttft_strict_ms),
            ("ttft_code_completion_ms", self.ttft_code_completion_ms),
            ("ttft_agents_ms", self.ttft_agents_ms),
            ("reading_tok_s", self.reading_tok_s),
            ("coding_tok_s", self.coding_tok_s),
            ("knee_factor", self.knee_factor),
            ("goodput_ttft_ms", self.goodput_ttft_ms),
            ("goodput_tok_s", self.goodput_tok_s),
        ]
        .into_iter()
        .find(|(_, v)| !(v.is_finite() && *v > 0.0))
    }

    /// The TTFT thresholds in seconds (the four TTFT SLOs and goodput's): each must be a
    /// latency histogram's bucket edge, so that a count at it is exact.
    pub fn ttft_edges_s(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .list()
            .into_iter()
            .filter(|s| s.1 == SloKind::Ttft)
            .map(|s| s.2 / 1000.0)
            .chain([self.goodput_ttft_ms / 1000.0])
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }

    /// The tok/s floors as TPOT edges in seconds (1 ÷ tok/s): each must be a TPOT histogram's
    /// bucket edge.
    pub fn tpot_edges_s(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .list()
            .into_iter()
            .filter(|s| s.1 == SloKind::TokS)
            .map(|s| s.2)
            .chain([self.goodput_tok_s])
            .filter(|t| *t > 0.0)
            .map(|t| 1.0 / t)
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(status: u16, ok: bool, stream: bool, ttft: Option<f64>, tpot: Option<f64>) -> Request {
        Request {
            generates: true,
            status,
            ok,
            cancelled: false,
            stream,
            ttft_ms: ttft,
            tpot_ms: tpot,
        }
    }

    fn standing(r: &Request) -> Vec<Option<bool>> {
        Slos::default().judge(r).iter().map(|s| s.1).collect()
    }

    #[test]
    fn a_served_stream_is_judged_against_each_threshold() {
        // 300 ms TTFT, 20 ms TPOT (50 tok/s): interactive and agents met, strict and code
        // completion missed; reading speed met, interactive coding (60) missed; goodput met.
        let r = req(200, true, true, Some(300.0), Some(20.0));
        let names: Vec<_> = Slos::default().judge(&r).iter().map(|s| s.0).collect();
        assert_eq!(names, Slos::NAMES);
        let listed: Vec<_> = Slos::default().list().iter().map(|s| s.0).collect();
        assert_eq!(listed, Slos::NAMES[..6]);
        assert_eq!(
            standing(&r),
            [
                Some(true),
                Some(false),
                Some(false),
                Some(true),
                Some(true),
                Some(false),
                Some(true)
            ]
        );
        // At the threshold is met.
        assert_eq!(
            standing(&req(200, true, true, Some(500.0), None))[0],
            Some(true)
        );
    }

    #[test]
    fn failures_miss_every_slo_they_are_in_and_the_clients_own_are_in_none() {
        for status in [500, 502, 429, 0] {
            let stream = req(status, false, true, None, None);
            assert_eq!(standing(&stream), [Some(false); 7], "{status}");
            // A failed non-streamed request: no TTFT SLO would have judged it; goodput does.
            let plain = req(status, false, false, None, None);
            let mut want = [None; 7];
            want[6] = Some(false);
            assert_eq!(standing(&plain), want, "{status}");
        }
        assert_eq!(standing(&req(404, true, true, None, None)), [None; 7]);
        let mut cancelled = req(200, false, true, Some(100.0), None);
        cancelled.cancelled = true;
        assert_eq!(standing(&cancelled), [None; 7]);
        let mut listing = req(200, true, false, None, None);
        listing.generates = false;
        assert_eq!(standing(&listing), [None; 7]);
        // A stream cut short after its first token (an `ok` outcome it is not) is a miss.
        assert_eq!(
            standing(&req(200, false, true, Some(50.0), Some(10.0))),
            [Some(false); 7]
        );
    }

    #[test]
    fn a_served_request_without_the_figure_is_judged_only_by_goodput() {
        let plain = req(200, true, false, None, None);
        let mut want = [None; 7];
        want[6] = Some(true);
        assert_eq!(standing(&plain), want);
    }

    #[test]
    fn edges_are_the_thresholds_in_seconds() {
        let s = Slos::default();
        assert_eq!(s.ttft_edges_s(), [0.1, 0.2, 0.5, 1.0]);
        let t = s.tpot_edges_s();
        assert_eq!(t.len(), 2);
        assert!((t[0] - 1.0 / 60.0).abs() < 1e-12 && (t[1] - 1.0 / 6.0).abs() < 1e-12);
        assert_eq!(s.invalid(), None);
        let bad = Slos {
            goodput_tok_s: -1.0,
            ..Slos::default()
        };
        assert_eq!(bad.invalid(), Some(("goodput_tok_s", -1.0)));
    }
}
