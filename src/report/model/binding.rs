//! The binding constraint's verdict per bucket and the figures it is read from.

use serde::Serialize;

/// What binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Constraint {
    Client,
    Gateway,
    KvCache,
    Queueing,
    Compute,
    /// Neither a knee nor an SLO failure in the levels measured.
    NotReached,
    /// A knee, but no engine figures to say why (`bench --scrape`).
    Unknown,
}

impl Constraint {
    pub fn as_str(self) -> &'static str {
        match self {
            Constraint::Client => "client",
            Constraint::Gateway => "gateway",
            Constraint::KvCache => "KV cache",
            Constraint::Queueing => "queueing",
            Constraint::Compute => "compute",
            Constraint::NotReached => "not reached",
            Constraint::Unknown => "unknown",
        }
    }
}

/// The figures a verdict is read from.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    pub kv_cache_usage_peak: Option<f64>,
    pub preemptions_per_request: Option<f64>,
    pub waiting_mean: Option<f64>,
    pub running_mean: Option<f64>,
    pub mbu: Option<f64>,
    pub mfu: Option<f64>,
    pub client_lag_p99_ms: Option<f64>,
    /// Time outside the engine ÷ TTFT (medians).
    pub outside_engine_share: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Binding {
    pub bucket: String,
    /// The level examined (`C=8`, `4/s`).
    pub at: Option<String>,
    /// Why that level: `knee`, `slo` (the interactive SLO's first failure) or `top` (neither
    /// reached: the highest level).
    pub point: BindPoint,
    pub constraint: Constraint,
    pub figures: Figures,
    /// The verdict in a sentence, with its figures.
    pub text: String,
}

/// Why a binding verdict examines its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BindPoint {
    /// The knee.
    Knee,
    /// The interactive SLO's first failure.
    Slo,
    /// Neither reached: the highest level.
    Top,
}

impl BindPoint {
    pub fn as_str(self) -> &'static str {
        match self {
            BindPoint::Knee => "knee",
            BindPoint::Slo => "slo",
            BindPoint::Top => "top",
        }
    }
}
