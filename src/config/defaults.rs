//! Every default of the config file, in one place (`config/tokentap.toml` documents the same
//! values; change both together).

/// `listen.addr`.
pub const LISTEN: &str = "0.0.0.0:8080";
/// `admin.addr`.
pub const ADMIN: &str = "127.0.0.1:9464";
/// The shortest `admin.reload_token` accepted (no default: unset, `POST /reload` is off).
pub const RELOAD_TOKEN_MIN: usize = 16;
/// `request_id.headers`: where a client's request id is read (the first present), a generated
/// one is sent (the first), and the upstream's is read from its response.
pub const REQUEST_ID_HEADERS: &[&str] = &["x-request-id"];
/// `request_id.generate`: make an id for a request that came without one.
pub const REQUEST_ID_GENERATE: bool = false;
/// `[otlp]`: spans waiting for export, spans per export, how long a span waits for its batch,
/// one export's deadline, and `service.name`.
pub const OTLP_QUEUE: u64 = 8192;
pub const OTLP_BATCH: u64 = 512;
pub const OTLP_FLUSH_MS: u64 = 1000;
pub const OTLP_TIMEOUT_MS: u64 = 10_000;
pub const OTLP_SERVICE: &str = "tokentap";
/// `[clickhouse]`: records waiting for insert, rows per INSERT, how long a record waits for its
/// batch, one INSERT's deadline, and where rows go.
pub const CLICKHOUSE_QUEUE: u64 = 100_000;
pub const CLICKHOUSE_BATCH: u64 = 10_000;
pub const CLICKHOUSE_FLUSH_MS: u64 = 1000;
pub const CLICKHOUSE_TIMEOUT_MS: u64 = 10_000;
pub const CLICKHOUSE_DATABASE: &str = "default";
pub const CLICKHOUSE_TABLE: &str = "requests";
/// `log.path`.
pub const LOG_PATH: &str = "tokentap.jsonl";
pub const LOG_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// The smallest `log.max_bytes` accepted.
pub const LOG_MIN_BYTES: u64 = 4096;
pub const LOG_KEEP: u32 = 5;
pub const LOG_QUEUE: usize = 16_384;

pub const CONNECT_MS: u64 = 5_000;
pub const FIRST_BYTE_MS: u64 = 300_000;
pub const IDLE_MS: u64 = 120_000;
/// 0 = no limit.
pub const TOTAL_MS: u64 = 0;
pub const SHUTDOWN_GRACE_MS: u64 = 30_000;
pub const HEADER_READ_MS: u64 = 30_000;
pub const BODY_READ_MS: u64 = 60_000;

pub const MAX_REQUEST_BYTES: usize = 32 * 1024 * 1024;
pub const MAX_CONCURRENT: usize = 10_000;
pub const MAX_SSE_EVENT_BYTES: usize = 1024 * 1024;
pub const MAX_RESPONSE_JSON_BYTES: usize = 8 * 1024 * 1024;
pub const MAX_KEY_LABELS: usize = 100;
pub const MAX_MODEL_LABELS: usize = 50;

// `[buckets]`: `meter::Buckets::default()` (the meter classifies records without a config).

/// The route added by `--upstream` when the file has none.
pub const QUICK_ROUTE: &str = "default";
/// `routes[].path_prefix`.
pub const PATH_PREFIX: &str = "/";

/// `routes[].behind_window_ms`: how long an outer request waits for its inner one.
pub const BEHIND_WINDOW_MS: u64 = 60_000;

/// `routes[].join_sources` (and `serve --join-sources`): whose `x-tokentap-join` a route
/// records when the file names none: loopback.
pub const JOIN_SOURCES: [&str; 2] = ["127.0.0.0/8", "::1"];

/// `[experiment]`.
pub const EXPERIMENT_MODE: &str = "off";
pub const ROUTE_HEADER: &str = "x-tokentap-route";
pub const EXPERIMENT_SEED: u64 = 42;
pub const SAMPLE: f64 = 1.0;
pub const MAX_SHADOW_IN_FLIGHT: usize = 64;
pub const WEIGHTS: [f64; 2] = [0.5, 0.5];
