//! `[clickhouse]`: every record also inserted into a ClickHouse table, in batches over HTTP.
//! Off unless the section names a `url`.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Uri};

use super::raw::RawClickHouse;
use super::{defaults, err, expand_env, ConfigError};
use crate::keys::Secret;

#[derive(Debug, Clone)]
pub struct ClickHouseConfig {
    /// Scheme and authority of the server's HTTP interface (port 8123, or 8443 with TLS).
    pub url: Uri,
    /// The URL's own path (a proxy in front of ClickHouse may serve it below one), ending in `/`.
    pub base: String,
    pub database: String,
    pub table: String,
    /// `Authorization: Basic` from `user` and `password` (values never echoed).
    pub auth: Option<Secret<HeaderValue>>,
    /// Records waiting for insert; when full, a record is dropped and counted.
    pub queue: usize,
    /// Rows per INSERT.
    pub batch: usize,
    /// How long a record waits for its batch to fill.
    pub flush: Duration,
    /// One INSERT's deadline.
    pub timeout: Duration,
}

impl ClickHouseConfig {
    /// The path and query of every INSERT: rows as JSONEachRow, fields the table lacks skipped
    /// (so a newer tokentap's records still go into an older table).
    pub fn insert_path(&self) -> String {
        format!(
            "{}?database={}&input_format_skip_unknown_fields=1&query=INSERT%20INTO%20{}.{}%20FORMAT%20JSONEachRow",
            self.base, self.database, self.database, self.table
        )
    }

    pub fn auth_header(&self) -> Vec<(HeaderName, Secret<HeaderValue>)> {
        self.auth
            .as_ref()
            .map(|a| {
                vec![(
                    http::header::AUTHORIZATION,
                    Secret::new(HeaderValue::clone(a.expose())),
                )]
            })
            .unwrap_or_default()
    }
}

/// Equal settings, credentials included (compared, never printed).
impl PartialEq for ClickHouseConfig {
    fn eq(&self, o: &Self) -> bool {
        self.url == o.url
            && self.base == o.base
            && self.database == o.database
            && self.table == o.table
            && self.auth.as_ref().map(|a| a.expose()) == o.auth.as_ref().map(|a| a.expose())
            && self.queue == o.queue
            && self.batch == o.batch
            && self.flush == o.flush
            && self.timeout == o.timeout
    }
}

/// A database or table name as it goes into the query unquoted.
fn identifier(s: &str, file: &str, key: &str) -> Result<String, ConfigError> {
    let ok = !s.is_empty()
        && s.len() <= 128
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && !s.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(s.to_owned())
    } else {
        Err(err(
            file,
            key,
            format!("{s:?} is not a plain identifier (letters, digits and _, not starting with a digit)"),
        ))
    }
}

/// The value of `Authorization: Basic` for a user and password (a credential: never echo it).
pub fn basic_auth(user: &str, password: &str) -> String {
    format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
}

/// Standard base64 (for the Basic credentials).
fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn validate(
    raw: Option<RawClickHouse>,
    file: &str,
) -> Result<Option<ClickHouseConfig>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let k = |f: &str| format!("clickhouse.{f}");
    let Some(url) = raw.url else {
        return Err(err(
            file,
            "clickhouse.url",
            "is required in [clickhouse]: the server's HTTP interface, e.g. http://clickhouse:8123",
        ));
    };
    let url = expand_env(&url, file, &k("url"))?;
    let (root, base) = super::routes::parse_upstream(&url, file, &k("url"))?;
    let base = if base.ends_with('/') {
        base
    } else {
        format!("{base}/")
    };
    let database = identifier(
        raw.database
            .as_deref()
            .unwrap_or(defaults::CLICKHOUSE_DATABASE),
        file,
        &k("database"),
    )?;
    let table = identifier(
        raw.table.as_deref().unwrap_or(defaults::CLICKHOUSE_TABLE),
        file,
        &k("table"),
    )?;
    let user = raw
        .user
        .map(|u| expand_env(&u, file, &k("user")))
        .transpose()?;
    let password = raw
        .password
        .map(|p| expand_env(&p, file, &k("password")))
        .transpose()?;
    if password.is_some() && user.is_none() {
        return Err(err(file, k("password"), "is set without clickhouse.user"));
    }
    let auth = match user {
        None => None,
        Some(u) => {
            if u.contains(':') {
                return Err(err(file, k("user"), "must not contain ':'"));
            }
            // NB: the value is a credential: never echoed.
            let v = HeaderValue::try_from(basic_auth(&u, &password.unwrap_or_default()))
                .map_err(|_| err(file, k("user"), "is not valid in a header"))?;
            Some(Secret::new(v))
        }
    };
    let (queue, batch) = super::queue_and_batch(
        file,
        "clickhouse",
        (raw.queue, raw.batch),
        (defaults::CLICKHOUSE_QUEUE, defaults::CLICKHOUSE_BATCH),
    )?;
    let ms = |v, d, f: &str| super::positive(file, &k(f), v, d).map(Duration::from_millis);
    Ok(Some(ClickHouseConfig {
        url: root,
        base,
        database,
        table,
        auth,
        queue,
        batch,
        flush: ms(raw.flush_ms, defaults::CLICKHOUSE_FLUSH_MS, "flush_ms")?,
        timeout: ms(
            raw.timeout_ms,
            defaults::CLICKHOUSE_TIMEOUT_MS,
            "timeout_ms",
        )?,
    }))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use crate::config::{Config, Overrides};

    fn load(ch: &str) -> Result<Config, String> {
        Config::from_toml(
            &format!("[[routes]]\nname='r'\nupstream='http://h:1'\n[clickhouse]\n{ch}"),
            "t.toml",
            &Overrides::default(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_credentials_and_errors_that_name_the_key() {
        let c = load("url = 'http://ch:8123'\n")
            .unwrap()
            .clickhouse
            .unwrap();
        assert_eq!(
            c.insert_path(),
            "/?database=default&input_format_skip_unknown_fields=1&query=INSERT%20INTO%20default.requests%20FORMAT%20JSONEachRow"
        );
        assert!(c.auth.is_none());
        assert_eq!((c.batch, c.queue), (10_000, 100_000));
        std::env::set_var("TOKENTAP_TEST_CH_PASSWORD", "s3cret");
        let c = load("url = 'https://ch:8443/proxy'\ndatabase='tt'\ntable='reqs'\nuser='tokentap'\npassword='${TOKENTAP_TEST_CH_PASSWORD}'\n")
            .unwrap()
            .clickhouse
            .unwrap();
        assert!(c.insert_path().starts_with("/proxy/?database=tt&"));
        assert!(c
            .insert_path()
            .ends_with("INSERT%20INTO%20tt.reqs%20FORMAT%20JSONEachRow"));
        let auth = c
            .auth
            .as_ref()
            .map(|a| a.expose().to_str().unwrap_or_default().to_owned());
        // base64("tokentap:s3cret")
        assert_eq!(auth.as_deref(), Some("Basic dG9rZW50YXA6czNjcmV0"));
        assert!(
            !format!("{c:?}").contains("dG9rZW50YXA6czNjcmV0"),
            "never printed"
        );
        for (bad, key) in [
            ("", "t.toml: clickhouse.url: is required"),
            ("url = 'tcp://ch:9000'\n", "t.toml: clickhouse.url: "),
            (
                "url = 'http://ch'\ntable = 'x; DROP'\n",
                "t.toml: clickhouse.table: ",
            ),
            (
                "url = 'http://ch'\ndatabase = '1db'\n",
                "t.toml: clickhouse.database: ",
            ),
            (
                "url = 'http://ch'\npassword = 'p'\n",
                "t.toml: clickhouse.password: ",
            ),
            (
                "url = 'http://ch'\nbatch = 10\nqueue = 5\n",
                "t.toml: clickhouse.batch: ",
            ),
            (
                "url = 'http://ch'\nflush_ms = 0\n",
                "t.toml: clickhouse.flush_ms: ",
            ),
            (
                "url = 'http://ch'\nuser = '${TOKENTAP_TEST_UNSET_VAR}'\n",
                "t.toml: clickhouse.user: ",
            ),
            ("url = 'http://ch'\nbatch_size = 5\n", "unknown field"),
        ] {
            let e = load(bad).unwrap_err();
            assert!(e.contains(key), "{bad:?}: {e}");
        }
    }

    #[test]
    fn base64_is_standard() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
        ] {
            assert_eq!(super::base64(i.as_bytes()), o);
        }
    }
}
