//! The config file as written: every section optional, unknown keys refused. Nothing here is
//! checked beyond its TOML type; `validate` turns it into a typed `Config`.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub listen: RawListen,
    #[serde(default)]
    pub admin: RawAdmin,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub timeouts: RawTimeouts,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub buckets: RawBuckets,
    #[serde(default)]
    pub keys: RawKeys,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    #[serde(default)]
    pub experiment: RawExperiment,
    #[serde(default)]
    pub request_id: RawRequestId,
    pub otlp: Option<RawOtlp>,
    pub clickhouse: Option<RawClickHouse>,
    /// `[slo]`, with the keys of `report --slo FILE`.
    pub slo: Option<crate::slo::Slos>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequestId {
    pub headers: Option<Vec<String>>,
    pub generate: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOtlp {
    pub endpoint: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub service_name: Option<String>,
    pub queue: Option<u64>,
    pub batch: Option<u64>,
    pub flush_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub forward_traceparent: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClickHouse {
    pub url: Option<String>,
    pub database: Option<String>,
    pub table: Option<String>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub queue: Option<u64>,
    pub batch: Option<u64>,
    pub flush_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExperiment {
    pub mode: Option<String>,
    pub arms: Option<Vec<String>>,
    pub gateway: Option<String>,
    pub baseline: Option<String>,
    pub primary: Option<String>,
    pub weights: Option<Vec<f64>>,
    pub seed: Option<u64>,
    pub sample: Option<f64>,
    pub max_shadow_in_flight: Option<usize>,
    pub cache_salt: Option<bool>,
    pub route_header: Option<String>,
    pub allow_forcing: Option<bool>,
    #[serde(default)]
    pub direct_keys: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    pub addr: Option<String>,
    pub backlog: Option<u64>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub addr: Option<String>,
    pub reload_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub path: Option<String>,
    pub max_bytes: Option<u64>,
    pub keep: Option<u32>,
    pub queue: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    pub connect_ms: Option<u64>,
    pub first_byte_ms: Option<u64>,
    pub idle_ms: Option<u64>,
    pub total_ms: Option<u64>,
    pub shutdown_grace_ms: Option<u64>,
    pub header_read_ms: Option<u64>,
    pub body_read_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_request_bytes: Option<usize>,
    pub max_concurrent: Option<usize>,
    pub max_sse_event_bytes: Option<usize>,
    pub max_response_json_bytes: Option<usize>,
    pub max_key_labels: Option<usize>,
    pub max_model_labels: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBuckets {
    pub short_input_max: Option<u64>,
    pub long_input_min: Option<u64>,
    pub short_output_max: Option<u64>,
    pub long_output_min: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKeys {
    /// `"sha256:<hex>" = "alias"`.
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
    /// Headers that carry a credential, beside `authorization`, `x-api-key` and `api-key`.
    #[serde(default)]
    pub secret_headers: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: String,
    pub upstream: String,
    pub path_prefix: Option<String>,
    #[serde(default)]
    pub set_headers: BTreeMap<String, String>,
    #[serde(default)]
    pub model_map: BTreeMap<String, String>,
    pub ca_file: Option<String>,
    pub behind: Option<String>,
    #[serde(default)]
    pub behind_keys: Vec<String>,
    #[serde(default)]
    pub behind_sources: Vec<String>,
    pub behind_window_ms: Option<u64>,
    /// Key ids (fingerprints or aliases) admitted on this route.
    #[serde(default)]
    pub admit_keys: Vec<String>,
    /// Networks admitted on this route.
    #[serde(default)]
    pub admit_sources: Vec<String>,
    /// A loopback-only sidecar's opt-out: inject credentials for any client.
    pub inject_without_admission: Option<bool>,
    /// Add `x-tokentap-join: <record id>` to what this route forwards (the tap across pods).
    pub join_header: Option<bool>,
    /// Networks whose `x-tokentap-join` is recorded (`join_id`); unset: loopback.
    pub join_sources: Option<Vec<String>>,
    /// Key ids (fingerprints or aliases) whose `x-tokentap-join` is recorded.
    #[serde(default)]
    pub join_keys: Vec<String>,
}
