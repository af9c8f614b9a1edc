//! What a record is to the report: a generation (served, cancelled, failed, throttled), a
//! client error, or other traffic.

use serde::Serialize;

/// What a record is to the report. Only generations (a generating API shape — chat,
/// completions, Responses, Messages — that the service answered or failed: `Served`,
/// `Cancelled`, `Failed`, `Throttled`) enter prompt-shape cells, SLO verdicts, goodput, the
/// ceiling and the failure mode. docs/report.md states the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A generation served to its end.
    Served,
    /// A generation the client left before its end.
    Cancelled,
    /// A generation the service failed: 5xx, a timeout, a reset, a cut or broken stream,
    /// tokentap's own 503.
    Failed,
    /// A generation refused with 429: throttling, counted apart from failures.
    Throttled,
    /// A generating shape refused as the client's fault: a 4xx other than 429 (bad key,
    /// unknown model, malformed body).
    ClientError,
    /// Not a generation: model listings, health and metrics probes, embeddings, other paths.
    Other,
}

impl Class {
    /// Served, cancelled, failed or throttled: judged.
    pub fn is_generation(self) -> bool {
        matches!(
            self,
            Class::Served | Class::Cancelled | Class::Failed | Class::Throttled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Served => "served",
            Class::Cancelled => "cancelled",
            Class::Failed => "failed",
            Class::Throttled => "throttled",
            Class::ClientError => "client_error",
            Class::Other => "other",
        }
    }
}
