//! Configuration: TOML → raw structs (unknown keys refused) → `validate()` → typed [`Config`].
//!
//! Every error names the file, the key path and what is wrong. Everything is parsed and checked
//! before any port is bound. `${NAME}` in string values is replaced from the environment (so
//! secrets stay out of files); `$$` is a literal `$`. Imports nothing above it: the layers that
//! use a `Config` depend on it, never the reverse.

mod admit;
mod cidr;
mod clickhouse;
pub mod defaults;
mod env;
mod experiment;
mod join;
mod listen;
mod otlp;
mod parse_error;
pub mod raw;
mod request_id;
mod routes;
mod slo;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::meter::Buckets;
pub use clickhouse::{basic_auth, ClickHouseConfig};
pub use env::expand_env;
pub use experiment::{ExperimentConfig, Mode};
pub use join::Join;
pub use otlp::OtlpConfig;
use raw::RawConfig;
pub use request_id::RequestIdConfig;
pub use routes::{RouteConfig, UNROUTED};

use crate::keys::Secret;

#[derive(Debug, thiserror::Error)]
#[error("{file}: {key}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub message: String,
}

/// An exporter section's `queue` and `batch` (each > 0, the batch no larger than the queue),
/// or their defaults; errors name `<section>.queue` / `<section>.batch`.
fn queue_and_batch(
    file: &str,
    section: &str,
    (queue, batch): (Option<u64>, Option<u64>),
    (default_queue, default_batch): (u64, u64),
) -> Result<(usize, usize), ConfigError> {
    let queue = positive(file, &format!("{section}.queue"), queue, default_queue)? as usize;
    let batch = positive(file, &format!("{section}.batch"), batch, default_batch)? as usize;
    if batch > queue {
        return Err(err(
            file,
            format!("{section}.batch"),
            format!("{batch} is larger than {section}.queue ({queue})"),
        ));
    }
    Ok((queue, batch))
}

/// A setting that must be greater than 0, or its default.
fn positive(file: &str, key: &str, v: Option<u64>, default: u64) -> Result<u64, ConfigError> {
    match v.unwrap_or(default) {
        0 => Err(err(file, key, "must be greater than 0")),
        n => Ok(n),
    }
}

fn err(file: &str, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        file: file.to_owned(),
        key: key.into(),
        message: message.into(),
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub source: String,
    pub listen: SocketAddr,
    /// `listen.backlog` (or `--backlog`): the proxy listener's accept queue; `None`, the
    /// system's maximum.
    pub backlog: Option<u32>,
    pub tls: Option<TlsFiles>,
    pub admin: Option<SocketAddr>,
    /// `admin.reload_token`: the bearer `POST /reload` needs; unset, the endpoint is off.
    pub reload_token: Option<crate::keys::Secret<String>>,
    pub log: LogConfig,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub buckets: Buckets,
    pub key_aliases: HashMap<String, String>,
    pub routes: Vec<RouteConfig>,
    pub experiment: ExperimentConfig,
    /// `[request_id]`: the client's request id, read, and made when none came.
    pub request_id: RequestIdConfig,
    /// `[otlp]`: span export, off when `None`.
    pub otlp: Option<OtlpConfig>,
    /// `[clickhouse]`: records also inserted into ClickHouse, off when `None`.
    pub clickhouse: Option<ClickHouseConfig>,
    /// `[slo]`: the thresholds every request is counted against.
    pub slo: crate::slo::Slos,
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
    /// A client gets this long to send its whole request body, from the head's arrival (slowloris
    /// on bodies); then 408.
    pub body_read: Duration,
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

/// Values given on the command line; they override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub upstream: Option<String>,
    pub listen: Option<String>,
    pub admin: Option<String>,
    pub log: Option<String>,
    pub backlog: Option<u64>,
    /// `serve --join-header`: the first route (the one `--upstream` names) sends
    /// `x-tokentap-join`.
    pub join_header: bool,
    /// `serve --join-sources`: the first route's `join_sources`.
    pub join_sources: Option<Vec<String>>,
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
            let msg = parse_error::in_words(inner.message());
            // An unknown key: its own line, not its table's.
            let unknown = msg
                .strip_prefix("unknown field `")
                .and_then(|m| m.split('`').next());
            let at = inner
                .span()
                .map(|s| format!(" (line {})", parse_error::line_of(text, s.start, unknown)))
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

fn parse_addr(s: &str, file: &str, key: &str) -> Result<SocketAddr, ConfigError> {
    s.parse().map_err(|_| {
        err(
            file,
            key,
            format!("{s:?} is not an address like 127.0.0.1:8080"),
        )
    })
}

impl RawConfig {
    pub fn validate(mut self, file: &str, over: &Overrides) -> Result<Config, ConfigError> {
        if let Some(up) = &over.upstream {
            // The quick start: one route named "default" unless the file already has routes,
            // in which case the flag replaces the first route's upstream.
            match self.routes.first_mut() {
                Some(r) => r.upstream = up.clone(),
                None => self.routes.push(raw::RawRoute {
                    name: defaults::QUICK_ROUTE.into(),
                    upstream: up.clone(),
                    ..raw::RawRoute::default()
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
        join::flags(&mut self.routes, over)?;
        let listen_s = over
            .listen
            .clone()
            .or(self.listen.addr.take())
            .unwrap_or_else(|| defaults::LISTEN.into());
        let listen = parse_addr(&listen_s, file, "listen.addr")?;
        let backlog = listen::backlog(file, self.listen.backlog, over.backlog)?;
        let tls = self.tls(file)?;
        let admin_s = over
            .admin
            .clone()
            .or(self.admin.addr.take())
            .unwrap_or_else(|| defaults::ADMIN.into());
        let admin = if admin_s.is_empty() || admin_s == "off" {
            None
        } else {
            Some(parse_addr(&admin_s, file, "admin.addr")?)
        };
        let reload_token = self.reload_token(file)?;
        let log = self.log(file, over)?;
        let timeouts = self.timeouts(file)?;
        let limits = self.limits(file)?;
        let buckets = self.buckets(file)?;
        let key_aliases = self.aliases(file)?;
        let secret_headers = self.secret_headers(file)?;
        let ctx = admit::Context {
            aliases: &key_aliases,
            secret_headers: &secret_headers,
            listen,
        };
        let routes = routes::validate(std::mem::take(&mut self.routes), &ctx, file)?;
        let experiment = experiment::validate(self.experiment, &routes, &ctx, file)?;
        let request_id = request_id::validate(self.request_id, file)?;
        let otlp = otlp::validate(self.otlp, file)?;
        let clickhouse = clickhouse::validate(self.clickhouse, file)?;
        let slo = slo::validate(self.slo, file)?;
        Ok(Config {
            source: file.to_owned(),
            listen,
            backlog,
            tls,
            admin,
            reload_token,
            log,
            timeouts,
            limits,
            buckets,
            key_aliases,
            routes,
            experiment,
            request_id,
            otlp,
            clickhouse,
            slo,
        })
    }

    fn reload_token(&mut self, file: &str) -> Result<Option<Secret<String>>, ConfigError> {
        let Some(t) = self.admin.reload_token.take() else {
            return Ok(None);
        };
        const KEY: &str = "admin.reload_token";
        let t = expand_env(&t, file, KEY)?;
        // NB: the token is never echoed, only its length.
        if t.len() < defaults::RELOAD_TOKEN_MIN {
            return Err(err(
                file,
                KEY,
                format!(
                    "is {} characters long: a token needs at least {} (for example `openssl rand -hex 16`)",
                    t.len(),
                    defaults::RELOAD_TOKEN_MIN
                ),
            ));
        }
        if t.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            return Err(err(
                file,
                KEY,
                "must be printable ASCII without spaces (it is sent as a bearer token)",
            ));
        }
        Ok(Some(Secret::new(t)))
    }

    fn tls(&mut self, file: &str) -> Result<Option<TlsFiles>, ConfigError> {
        match (self.listen.tls_cert.take(), self.listen.tls_key.take()) {
            (None, None) => Ok(None),
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
                Ok(Some(TlsFiles { cert, key }))
            }
            (Some(_), None) => Err(err(
                file,
                "listen.tls_key",
                "tls_cert is set but tls_key is not",
            )),
            (None, Some(_)) => Err(err(
                file,
                "listen.tls_cert",
                "tls_key is set but tls_cert is not",
            )),
        }
    }

    fn log(&mut self, file: &str, over: &Overrides) -> Result<LogConfig, ConfigError> {
        let path = match over.log.clone().or(self.log.path.take()) {
            None => Some(PathBuf::from(defaults::LOG_PATH)),
            Some(p) if p.is_empty() || p == "off" => None,
            Some(p) => Some(PathBuf::from(expand_env(&p, file, "log.path")?)),
        };
        let log = LogConfig {
            path,
            max_bytes: self.log.max_bytes.unwrap_or(defaults::LOG_MAX_BYTES),
            keep: self.log.keep.unwrap_or(defaults::LOG_KEEP),
            queue: self.log.queue.unwrap_or(defaults::LOG_QUEUE),
        };
        if log.max_bytes < defaults::LOG_MIN_BYTES {
            return Err(err(
                file,
                "log.max_bytes",
                format!(
                    "{} is too small (minimum {})",
                    log.max_bytes,
                    defaults::LOG_MIN_BYTES
                ),
            ));
        }
        if log.queue == 0 {
            return Err(err(file, "log.queue", "must be at least 1"));
        }
        Ok(log)
    }

    fn timeouts(&self, file: &str) -> Result<Timeouts, ConfigError> {
        let ms = |v: Option<u64>, d: u64| Duration::from_millis(v.unwrap_or(d));
        let t = &self.timeouts;
        let timeouts = Timeouts {
            connect: ms(t.connect_ms, defaults::CONNECT_MS),
            first_byte: ms(t.first_byte_ms, defaults::FIRST_BYTE_MS),
            idle: ms(t.idle_ms, defaults::IDLE_MS),
            total: ms(t.total_ms, defaults::TOTAL_MS),
            shutdown_grace: ms(t.shutdown_grace_ms, defaults::SHUTDOWN_GRACE_MS),
            header_read: ms(t.header_read_ms, defaults::HEADER_READ_MS),
            body_read: ms(t.body_read_ms, defaults::BODY_READ_MS),
        };
        for (v, k) in [
            (timeouts.connect, "timeouts.connect_ms"),
            (timeouts.first_byte, "timeouts.first_byte_ms"),
            (timeouts.idle, "timeouts.idle_ms"),
            (timeouts.header_read, "timeouts.header_read_ms"),
            (timeouts.body_read, "timeouts.body_read_ms"),
        ] {
            if v.is_zero() {
                return Err(err(file, k, "must be greater than 0"));
            }
        }
        Ok(timeouts)
    }

    fn limits(&self, file: &str) -> Result<Limits, ConfigError> {
        let l = &self.limits;
        let limits = Limits {
            max_request_bytes: l.max_request_bytes.unwrap_or(defaults::MAX_REQUEST_BYTES),
            max_concurrent: l.max_concurrent.unwrap_or(defaults::MAX_CONCURRENT),
            max_sse_event_bytes: l
                .max_sse_event_bytes
                .unwrap_or(defaults::MAX_SSE_EVENT_BYTES),
            max_response_json_bytes: l
                .max_response_json_bytes
                .unwrap_or(defaults::MAX_RESPONSE_JSON_BYTES),
            max_key_labels: l.max_key_labels.unwrap_or(defaults::MAX_KEY_LABELS),
            max_model_labels: l.max_model_labels.unwrap_or(defaults::MAX_MODEL_LABELS),
        };
        if limits.max_concurrent == 0 {
            return Err(err(file, "limits.max_concurrent", "must be at least 1"));
        }
        Ok(limits)
    }

    fn buckets(&self, file: &str) -> Result<Buckets, ConfigError> {
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
        Ok(buckets)
    }

    /// `[keys].secret_headers`: header names, lowercased.
    fn secret_headers(&mut self, file: &str) -> Result<Vec<http::HeaderName>, ConfigError> {
        let mut out = Vec::new();
        for (i, h) in std::mem::take(&mut self.keys.secret_headers)
            .iter()
            .enumerate()
        {
            out.push(
                http::HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()).map_err(|_| {
                    err(
                        file,
                        format!("keys.secret_headers[{i}]"),
                        format!("{h:?} is not a valid header name"),
                    )
                })?,
            );
        }
        Ok(out)
    }

    fn aliases(&mut self, file: &str) -> Result<HashMap<String, String>, ConfigError> {
        let mut key_aliases = HashMap::new();
        for (fp, alias) in std::mem::take(&mut self.keys.aliases) {
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
        Ok(key_aliases)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
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
            "[[routes]]\nname='g'\nupstream='http://h:1'\nset_headers={authorization='Bearer ${TOKENTAP_TEST_KEY}'}\nadmit_sources=['10.0.0.0/8']\n",
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
