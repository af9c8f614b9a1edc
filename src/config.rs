//! Configuration: TOML → raw structs (unknown keys refused) → `validate()` → typed [`Config`].
//!
//! Every error names the file, the key path and what is wrong. Everything is parsed and checked
//! before any port is bound. `${NAME}` in string values is replaced from the environment (so
//! secrets stay out of files); `$$` is a literal `$`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::Uri;
use serde::Deserialize;

use crate::keys::Secret;

#[derive(Debug, thiserror::Error)]
#[error("{file}: {key}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub message: String,
}

fn err(file: &str, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        file: file.to_owned(),
        key: key.into(),
        message: message.into(),
    }
}

// ---------------------------------------------------------------- raw (as written)

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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExperiment {
    pub mode: Option<String>,
    pub arms: Option<Vec<String>>,
    pub gateway: Option<String>,
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
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub addr: Option<String>,
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
}

// ---------------------------------------------------------------- typed (validated)

#[derive(Debug, Clone)]
pub struct Config {
    pub source: String,
    pub listen: SocketAddr,
    pub tls: Option<TlsFiles>,
    pub admin: Option<SocketAddr>,
    pub log: LogConfig,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub buckets: Buckets,
    pub key_aliases: HashMap<String, String>,
    pub routes: Vec<RouteConfig>,
    pub experiment: ExperimentConfig,
}

/// How the two arms of the gateway-hop experiment share traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// Each request goes to one arm, chosen at random (weighted, seeded).
    Split,
    /// The client is served by the primary arm; a copy goes to the other arm at once.
    Mirror,
    /// Like mirror, but the copy is sent after the primary's response ended.
    Paired,
}

#[derive(Debug, Clone)]
pub struct ExperimentConfig {
    pub mode: Mode,
    /// Route indices of the two arms.
    pub arms: [usize; 2],
    /// The arm that authenticates (the gateway); the other is the direct arm.
    pub gateway: usize,
    /// The arm that serves the client in mirror/paired mode.
    pub primary: usize,
    pub weights: [f64; 2],
    pub seed: u64,
    /// Fraction of requests copied (mirror/paired).
    pub sample: f64,
    pub max_shadow_in_flight: usize,
    /// Add a per-request `cache_salt` (vLLM prefix-cache isolation) to experiment requests.
    pub cache_salt: bool,
    /// Header that forces an arm; always stripped before forwarding.
    pub route_header: HeaderName,
    pub allow_forcing: bool,
    /// Key ids (fingerprints or aliases) allowed on the direct arm without the gateway.
    pub direct_keys: std::collections::HashSet<String>,
}

impl ExperimentConfig {
    pub fn direct(&self) -> usize {
        if self.arms[0] == self.gateway {
            self.arms[1]
        } else {
            self.arms[0]
        }
    }
}

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// `None` = records are not written (metrics and /stats still work).
    pub path: Option<PathBuf>,
    pub max_bytes: u64,
    pub keep: u32,
    pub queue: usize,
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub idle: Duration,
    /// Zero = no limit.
    pub total: Duration,
    pub shutdown_grace: Duration,
    /// A client gets this long to send a complete request head (slowloris).
    pub header_read: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_request_bytes: usize,
    pub max_concurrent: usize,
    pub max_sse_event_bytes: usize,
    pub max_response_json_bytes: usize,
    pub max_key_labels: usize,
    pub max_model_labels: usize,
}

/// Prompt-shape thresholds for live traffic, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buckets {
    pub short_input_max: u64,
    pub long_input_min: u64,
    pub short_output_max: u64,
    pub long_output_min: u64,
}

impl Default for Buckets {
    fn default() -> Self {
        Self {
            short_input_max: 300,
            long_input_min: 900,
            short_output_max: 128,
            long_output_min: 384,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub name: String,
    /// Scheme and authority of the upstream.
    pub upstream: Uri,
    /// The upstream's base path without a trailing slash ("" for none).
    pub base_path: String,
    /// Requests whose path starts with this go to this route; it is stripped unless it is "/".
    pub path_prefix: String,
    pub set_headers: Vec<(HeaderName, Secret<HeaderValue>)>,
    pub model_map: HashMap<String, String>,
    pub ca_file: Option<PathBuf>,
}

/// Values given on the command line; they override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub upstream: Option<String>,
    pub listen: Option<String>,
    pub admin: Option<String>,
    pub log: Option<String>,
}

impl Config {
    /// Read, parse and validate a config file, then apply command-line overrides.
    pub fn load(path: &Path, over: &Overrides) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(&file, "(file)", format!("cannot read: {e}")))?;
        Self::from_toml(&text, &file, over)
    }

    pub fn from_toml(text: &str, file: &str, over: &Overrides) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.message().to_owned();
            let at = inner
                .span()
                .map(|s| {
                    format!(
                        " (line {})",
                        text[..s.start.min(text.len())].lines().count().max(1)
                    )
                })
                .unwrap_or_default();
            err(
                file,
                if key == "." {
                    "(top level)".into()
                } else {
                    key
                },
                format!("{msg}{at}"),
            )
        })?;
        raw.validate(file, over)
    }

    /// A config built from command-line flags alone.
    pub fn from_flags(over: &Overrides) -> Result<Config, ConfigError> {
        RawConfig::default().validate("(command line)", over)
    }
}

/// Expand `${NAME}` from the environment; `$$` is a literal `$`.
pub fn expand_env(s: &str, file: &str, key: &str) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .ok_or_else(|| err(file, key, "unterminated ${…} (write $$ for a literal $)"))?;
            let name = &body[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(err(
                    file,
                    key,
                    format!("invalid environment variable name {name:?}"),
                ));
            }
            let val = std::env::var(name)
                .map_err(|_| err(file, key, format!("environment variable {name} is not set")))?;
            out.push_str(&val);
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn parse_addr(s: &str, file: &str, key: &str) -> Result<SocketAddr, ConfigError> {
    s.parse().map_err(|_| {
        err(
            file,
            key,
            format!("{s:?} is not an address like 127.0.0.1:8080"),
        )
    })
}

fn parse_upstream(s: &str, file: &str, key: &str) -> Result<(Uri, String), ConfigError> {
    let uri: Uri = s
        .parse()
        .map_err(|e| err(file, key, format!("invalid URL {s:?}: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(err(
                file,
                key,
                format!("{s:?} must start with http:// or https://"),
            ))
        }
    }
    let Some(authority) = uri.authority().cloned() else {
        return Err(err(file, key, format!("{s:?} has no host")));
    };
    if uri.query().is_some() {
        return Err(err(
            file,
            key,
            format!("{s:?} must not have a query string"),
        ));
    }
    let base = uri.path().trim_end_matches('/').to_owned();
    let root = Uri::builder()
        .scheme(uri.scheme_str().unwrap_or("http"))
        .authority(authority)
        .path_and_query("/")
        .build()
        .map_err(|e| err(file, key, format!("invalid URL {s:?}: {e}")))?;
    Ok((root, base))
}

impl RawConfig {
    pub fn validate(mut self, file: &str, over: &Overrides) -> Result<Config, ConfigError> {
        if let Some(up) = &over.upstream {
            // The quick start: one route named "default" unless the file already has routes,
            // in which case the flag replaces the first route's upstream.
            match self.routes.first_mut() {
                Some(r) => r.upstream = up.clone(),
                None => self.routes.push(RawRoute {
                    name: "default".into(),
                    upstream: up.clone(),
                    ..RawRoute::default()
                }),
            }
        }
        if self.routes.is_empty() {
            return Err(err(
                file,
                "routes",
                "no route: add a [[routes]] table or pass --upstream URL",
            ));
        }

        let listen_s = over
            .listen
            .clone()
            .or(self.listen.addr)
            .unwrap_or_else(|| "0.0.0.0:8080".into());
        let listen = parse_addr(&listen_s, file, "listen.addr")?;
        let tls = match (self.listen.tls_cert, self.listen.tls_key) {
            (None, None) => None,
            (Some(c), Some(k)) => {
                let cert = PathBuf::from(expand_env(&c, file, "listen.tls_cert")?);
                let key = PathBuf::from(expand_env(&k, file, "listen.tls_key")?);
                for (p, k) in [(&cert, "listen.tls_cert"), (&key, "listen.tls_key")] {
                    if !p.is_file() {
                        return Err(err(
                            file,
                            k,
                            format!("{} is not a readable file", p.display()),
                        ));
                    }
                }
                Some(TlsFiles { cert, key })
            }
            (Some(_), None) => {
                return Err(err(
                    file,
                    "listen.tls_key",
                    "tls_cert is set but tls_key is not",
                ))
            }
            (None, Some(_)) => {
                return Err(err(
                    file,
                    "listen.tls_cert",
                    "tls_key is set but tls_cert is not",
                ))
            }
        };
        let admin_s = over
            .admin
            .clone()
            .or(self.admin.addr)
            .unwrap_or_else(|| "127.0.0.1:9464".into());
        let admin = if admin_s.is_empty() || admin_s == "off" {
            None
        } else {
            Some(parse_addr(&admin_s, file, "admin.addr")?)
        };

        let log_path = match over.log.clone().or(self.log.path) {
            None => Some(PathBuf::from("tokentap.jsonl")),
            Some(p) if p.is_empty() || p == "off" => None,
            Some(p) => Some(PathBuf::from(expand_env(&p, file, "log.path")?)),
        };
        let log = LogConfig {
            path: log_path,
            max_bytes: self.log.max_bytes.unwrap_or(256 * 1024 * 1024),
            keep: self.log.keep.unwrap_or(5),
            queue: self.log.queue.unwrap_or(16_384),
        };
        if log.max_bytes < 4096 {
            return Err(err(
                file,
                "log.max_bytes",
                format!("{} is too small (minimum 4096)", log.max_bytes),
            ));
        }
        if log.queue == 0 {
            return Err(err(file, "log.queue", "must be at least 1"));
        }

        let ms = |v: Option<u64>, d: u64| Duration::from_millis(v.unwrap_or(d));
        let t = &self.timeouts;
        let timeouts = Timeouts {
            connect: ms(t.connect_ms, 5_000),
            first_byte: ms(t.first_byte_ms, 300_000),
            idle: ms(t.idle_ms, 120_000),
            total: ms(t.total_ms, 0),
            shutdown_grace: ms(t.shutdown_grace_ms, 30_000),
            header_read: ms(t.header_read_ms, 30_000),
        };
        for (v, k) in [
            (timeouts.connect, "timeouts.connect_ms"),
            (timeouts.first_byte, "timeouts.first_byte_ms"),
            (timeouts.idle, "timeouts.idle_ms"),
            (timeouts.header_read, "timeouts.header_read_ms"),
        ] {
            if v.is_zero() {
                return Err(err(file, k, "must be greater than 0"));
            }
        }

        let l = &self.limits;
        let limits = Limits {
            max_request_bytes: l.max_request_bytes.unwrap_or(32 * 1024 * 1024),
            max_concurrent: l.max_concurrent.unwrap_or(10_000),
            max_sse_event_bytes: l.max_sse_event_bytes.unwrap_or(1024 * 1024),
            max_response_json_bytes: l.max_response_json_bytes.unwrap_or(8 * 1024 * 1024),
            max_key_labels: l.max_key_labels.unwrap_or(100),
            max_model_labels: l.max_model_labels.unwrap_or(50),
        };
        if limits.max_concurrent == 0 {
            return Err(err(file, "limits.max_concurrent", "must be at least 1"));
        }

        let d = Buckets::default();
        let b = &self.buckets;
        let buckets = Buckets {
            short_input_max: b.short_input_max.unwrap_or(d.short_input_max),
            long_input_min: b.long_input_min.unwrap_or(d.long_input_min),
            short_output_max: b.short_output_max.unwrap_or(d.short_output_max),
            long_output_min: b.long_output_min.unwrap_or(d.long_output_min),
        };
        if buckets.short_input_max >= buckets.long_input_min {
            return Err(err(
                file,
                "buckets.short_input_max",
                "must be below buckets.long_input_min",
            ));
        }
        if buckets.short_output_max >= buckets.long_output_min {
            return Err(err(
                file,
                "buckets.short_output_max",
                "must be below buckets.long_output_min",
            ));
        }

        let mut key_aliases = HashMap::new();
        for (fp, alias) in self.keys.aliases {
            // NB: the map key is printed only once it is known to be a fingerprint: a raw API key
            // pasted here by mistake must not be echoed into an error message.
            let hex = fp.strip_prefix("sha256:").unwrap_or("");
            if hex.len() != 64
                || !hex
                    .bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
            {
                return Err(err(
                    file,
                    "keys.aliases",
                    "every key must be a fingerprint \"sha256:<64 lowercase hex>\" (never a raw API key); \
                     `tokentap fingerprint` prints one",
                ));
            }
            if alias.is_empty() || alias.len() > 64 {
                return Err(err(
                    file,
                    format!("keys.aliases.{fp:?}"),
                    "alias must be 1-64 characters",
                ));
            }
            key_aliases.insert(fp, alias);
        }

        let mut routes = Vec::with_capacity(self.routes.len());
        for (i, r) in self.routes.into_iter().enumerate() {
            let k = |f: &str| format!("routes[{i}].{f}");
            if r.name.is_empty()
                || !r
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(err(
                    file,
                    k("name"),
                    format!("{:?} must be non-empty [A-Za-z0-9_-]", r.name),
                ));
            }
            if r.name == crate::sink::UNROUTED {
                return Err(err(
                    file,
                    k("name"),
                    format!("{:?} is reserved for requests no route matched", r.name),
                ));
            }
            if routes.iter().any(|x: &RouteConfig| x.name == r.name) {
                return Err(err(
                    file,
                    k("name"),
                    format!("duplicate route name {:?}", r.name),
                ));
            }
            let upstream_s = expand_env(&r.upstream, file, &k("upstream"))?;
            let (upstream, base_path) = parse_upstream(&upstream_s, file, &k("upstream"))?;
            let prefix = r.path_prefix.unwrap_or_else(|| "/".into());
            if !prefix.starts_with('/') {
                return Err(err(
                    file,
                    k("path_prefix"),
                    format!("{prefix:?} must start with /"),
                ));
            }
            let path_prefix = if prefix.len() > 1 {
                prefix.trim_end_matches('/').to_owned()
            } else {
                prefix
            };
            if routes
                .iter()
                .any(|x: &RouteConfig| x.path_prefix == path_prefix)
            {
                return Err(err(
                    file,
                    k("path_prefix"),
                    format!("{path_prefix:?} is already another route's prefix"),
                ));
            }
            let mut set_headers = Vec::new();
            for (name, value) in r.set_headers {
                let hk = k(&format!("set_headers.{name}"));
                let hn = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| err(file, &hk, format!("{name:?} is not a valid header name")))?;
                if crate::proxy::headers::is_hop_by_hop(&hn) || hn == http::header::HOST {
                    return Err(err(
                        file,
                        &hk,
                        format!("{name} cannot be set (hop-by-hop or Host)"),
                    ));
                }
                let v = expand_env(&value, file, &hk)?;
                // NB: never echo the value: it is usually a credential.
                let hv = HeaderValue::from_str(&v)
                    .map_err(|_| err(file, &hk, "value is not a valid header value"))?;
                set_headers.push((hn, Secret::new(hv)));
            }
            let ca_file = match r.ca_file {
                None => None,
                Some(p) => {
                    let p = PathBuf::from(expand_env(&p, file, &k("ca_file"))?);
                    if !p.is_file() {
                        return Err(err(
                            file,
                            k("ca_file"),
                            format!("{} is not a readable file", p.display()),
                        ));
                    }
                    Some(p)
                }
            };
            routes.push(RouteConfig {
                name: r.name,
                upstream,
                base_path,
                path_prefix,
                set_headers,
                model_map: r.model_map.into_iter().collect(),
                ca_file,
            });
        }

        let experiment = validate_experiment(self.experiment, &routes, file)?;
        Ok(Config {
            source: file.to_owned(),
            listen,
            tls,
            admin,
            log,
            timeouts,
            limits,
            buckets,
            key_aliases,
            routes,
            experiment,
        })
    }
}

fn validate_experiment(
    e: RawExperiment,
    routes: &[RouteConfig],
    file: &str,
) -> Result<ExperimentConfig, ConfigError> {
    let mode = match e.mode.as_deref().unwrap_or("off") {
        "off" => Mode::Off,
        "split" => Mode::Split,
        "mirror" => Mode::Mirror,
        "paired" => Mode::Paired,
        other => {
            return Err(err(
                file,
                "experiment.mode",
                format!("{other:?} is not one of off, split, mirror, paired"),
            ))
        }
    };
    let route_header_s = e.route_header.unwrap_or_else(|| "x-tokentap-route".into());
    let route_header = HeaderName::from_bytes(route_header_s.as_bytes()).map_err(|_| {
        err(
            file,
            "experiment.route_header",
            format!("{route_header_s:?} is not a header name"),
        )
    })?;
    let idx = |name: &str, key: &str| -> Result<usize, ConfigError> {
        routes
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| err(file, key, format!("{name:?} is not a route name")))
    };
    let needs_arms = mode != Mode::Off || e.allow_forcing.unwrap_or(false);
    let arms = match (&e.arms, needs_arms) {
        (Some(a), _) if a.len() == 2 => [
            idx(&a[0], "experiment.arms[0]")?,
            idx(&a[1], "experiment.arms[1]")?,
        ],
        (Some(_), _) => {
            return Err(err(
                file,
                "experiment.arms",
                "exactly two route names, e.g. [\"direct\", \"gateway\"]",
            ))
        }
        (None, true) => {
            return Err(err(
                file,
                "experiment.arms",
                "required: the two routes to compare",
            ))
        }
        (None, false) => [0, 0],
    };
    if needs_arms && arms[0] == arms[1] {
        return Err(err(
            file,
            "experiment.arms",
            "the two arms must be different routes",
        ));
    }
    let gateway = match &e.gateway {
        Some(g) => {
            let i = idx(g, "experiment.gateway")?;
            if !arms.contains(&i) {
                return Err(err(
                    file,
                    "experiment.gateway",
                    format!("{g:?} is not one of the arms"),
                ));
            }
            i
        }
        // By convention the arm named "gateway"; else the second arm.
        None => arms
            .iter()
            .copied()
            .find(|&i| routes.get(i).is_some_and(|r| r.name == "gateway"))
            .unwrap_or(arms[1]),
    };
    let primary = match &e.primary {
        Some(p) => {
            let i = idx(p, "experiment.primary")?;
            if !arms.contains(&i) {
                return Err(err(
                    file,
                    "experiment.primary",
                    format!("{p:?} is not one of the arms"),
                ));
            }
            i
        }
        None => gateway,
    };
    let weights = match e.weights {
        None => [0.5, 0.5],
        Some(w)
            if w.len() == 2
                && w.iter().all(|x| x.is_finite() && *x >= 0.0)
                && w[0] + w[1] > 0.0 =>
        {
            [w[0], w[1]]
        }
        Some(_) => {
            return Err(err(
                file,
                "experiment.weights",
                "two non-negative numbers, not both 0",
            ))
        }
    };
    let sample = e.sample.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample) {
        return Err(err(
            file,
            "experiment.sample",
            format!("{sample} must be between 0 and 1"),
        ));
    }
    Ok(ExperimentConfig {
        mode,
        arms,
        gateway,
        primary,
        weights,
        seed: e.seed.unwrap_or(42),
        sample,
        max_shadow_in_flight: e.max_shadow_in_flight.unwrap_or(64),
        cache_salt: e.cache_salt.unwrap_or(false),
        route_header,
        allow_forcing: e.allow_forcing.unwrap_or(false),
        direct_keys: e.direct_keys.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(text, "t.toml", &Overrides::default())
    }

    #[test]
    fn minimal_route_and_defaults() {
        let c = load("[[routes]]\nname='vllm'\nupstream='http://127.0.0.1:8000/v1/'\n").unwrap();
        assert_eq!(c.routes[0].base_path, "/v1");
        assert_eq!(c.routes[0].path_prefix, "/");
        assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(
            c.admin.map(|a| a.to_string()).as_deref(),
            Some("127.0.0.1:9464")
        );
    }

    #[test]
    fn errors_name_file_key_and_problem() {
        let e = load("[[routes]]\nname='a'\nupstream='ftp://x'\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml: routes[0].upstream: "), "{e}");
        let e = load("[limits]\nmax_concurent = 3\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t.toml: limits") && e.contains("max_concurent"),
            "{e}"
        );
        let e = load("[timeouts]\nidle_ms = 'soon'\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("timeouts.idle_ms"), "{e}");
        let e = load("").unwrap_err().to_string();
        assert!(e.contains("routes"), "{e}");
    }

    #[test]
    fn env_expansion_and_secret_header() {
        std::env::set_var("TOKENTAP_TEST_KEY", "sk-secret-value");
        let c = load(
            "[[routes]]\nname='g'\nupstream='http://h:1'\nset_headers={authorization='Bearer ${TOKENTAP_TEST_KEY}'}\n",
        )
        .unwrap();
        assert_eq!(
            c.routes[0].set_headers[0].1.expose(),
            "Bearer sk-secret-value"
        );
        assert!(!format!("{c:?}").contains("sk-secret-value"));
        let e = load("[[routes]]\nname='g'\nupstream='http://${TOKENTAP_UNSET_VAR_X}'\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("routes[0].upstream") && e.contains("TOKENTAP_UNSET_VAR_X is not set"),
            "{e}"
        );
        assert_eq!(expand_env("a$$b$c", "f", "k").unwrap(), "a$b$c");
    }

    #[test]
    fn flags_override_and_quick_start() {
        let over = Overrides {
            upstream: Some("http://127.0.0.1:9".into()),
            listen: Some("127.0.0.1:0".into()),
            ..Default::default()
        };
        let c = Config::from_flags(&over).unwrap();
        assert_eq!(c.routes.len(), 1);
        assert_eq!(c.routes[0].name, "default");
        assert_eq!(c.listen.port(), 0);
    }

    #[test]
    fn alias_keys_must_be_fingerprints() {
        let e =
            load("[keys]\naliases={'sk-raw'='x'}\n[[routes]]\nname='a'\nupstream='http://h:1'\n")
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("keys.aliases") && e.contains("fingerprint"),
            "{e}"
        );
        assert!(!e.contains("sk-raw"), "{e}");
    }
}
