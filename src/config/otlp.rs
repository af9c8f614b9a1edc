//! `[otlp]`: one span per request, exported over OTLP/HTTP. Off unless the section names an
//! endpoint.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Uri};

use super::raw::RawOtlp;
use super::{defaults, err, expand_env, ConfigError};
use crate::keys::Secret;

#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// Scheme and authority of the collector.
    pub endpoint: Uri,
    /// The path spans are posted to: the endpoint's own path + `/v1/traces`.
    pub path: String,
    /// Sent with every export (a collector's credentials: values never echoed).
    pub headers: Vec<(HeaderName, Secret<HeaderValue>)>,
    pub service_name: String,
    /// Spans waiting for export; when full, a span is dropped and counted.
    pub queue: usize,
    /// Spans per export request.
    pub batch: usize,
    /// How long a span waits for its batch to fill.
    pub flush: Duration,
    /// One export attempt's deadline (retries back off up to this too).
    pub timeout: Duration,
    /// Send `traceparent` upstream with tokentap's span as the parent (otherwise the request
    /// goes upstream unchanged, the client's own `traceparent` included).
    pub forward_traceparent: bool,
}

/// Equal settings, header values included (compared, never printed): a reload tells a changed
/// collector token from an unchanged one.
impl PartialEq for OtlpConfig {
    fn eq(&self, o: &Self) -> bool {
        let headers = |c: &OtlpConfig| -> Vec<(HeaderName, HeaderValue)> {
            c.headers
                .iter()
                .map(|(n, v)| (n.clone(), v.expose().clone()))
                .collect()
        };
        self.endpoint == o.endpoint
            && self.path == o.path
            && headers(self) == headers(o)
            && self.service_name == o.service_name
            && self.queue == o.queue
            && self.batch == o.batch
            && self.flush == o.flush
            && self.timeout == o.timeout
            && self.forward_traceparent == o.forward_traceparent
    }
}

pub fn validate(raw: Option<RawOtlp>, file: &str) -> Result<Option<OtlpConfig>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let k = |f: &str| format!("otlp.{f}");
    let Some(endpoint) = raw.endpoint else {
        return Err(err(
            file,
            "otlp.endpoint",
            "is required in [otlp]: the collector's OTLP/HTTP base URL, e.g. http://otel-collector:4318",
        ));
    };
    let endpoint = expand_env(&endpoint, file, &k("endpoint"))?;
    let (root, base) = super::routes::parse_upstream(&endpoint, file, &k("endpoint"))?;
    let path = if base.ends_with("/v1/traces") {
        base
    } else {
        format!("{base}/v1/traces")
    };
    let mut headers = Vec::new();
    for (name, value) in raw.headers {
        let key = format!("otlp.headers.{name}");
        let n = HeaderName::try_from(name.as_str())
            .map_err(|_| err(file, &key, "is not a valid header name"))?;
        let v = expand_env(&value, file, &key)?;
        // NB: the value may be a credential: never echoed.
        let v = HeaderValue::try_from(v)
            .map_err(|_| err(file, &key, "value is not a valid header value"))?;
        headers.push((n, Secret::new(v)));
    }
    let (queue, batch) = super::queue_and_batch(
        file,
        "otlp",
        (raw.queue, raw.batch),
        (defaults::OTLP_QUEUE, defaults::OTLP_BATCH),
    )?;
    let ms = |v, d, f: &str| super::positive(file, &k(f), v, d).map(Duration::from_millis);
    let service_name = raw
        .service_name
        .unwrap_or_else(|| defaults::OTLP_SERVICE.into());
    if service_name.is_empty() {
        return Err(err(file, k("service_name"), "must not be empty"));
    }
    Ok(Some(OtlpConfig {
        endpoint: root,
        path,
        headers,
        service_name,
        queue,
        batch,
        flush: ms(raw.flush_ms, defaults::OTLP_FLUSH_MS, "flush_ms")?,
        timeout: ms(raw.timeout_ms, defaults::OTLP_TIMEOUT_MS, "timeout_ms")?,
        forward_traceparent: raw.forward_traceparent.unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    fn load(otlp: &str) -> Result<Config, String> {
        Config::from_toml(
            &format!("[[routes]]\nname='r'\nupstream='http://h:1'\n[otlp]\n{otlp}"),
            "t.toml",
            &Overrides::default(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn the_endpoint_gets_its_traces_path_and_errors_name_the_key() {
        let c = load("endpoint = 'http://collector:4318'\n").unwrap();
        let o = c.otlp.unwrap();
        assert_eq!(o.path, "/v1/traces");
        assert_eq!(o.endpoint.to_string(), "http://collector:4318/");
        assert!(!o.forward_traceparent);
        let o = load("endpoint = 'https://c/otlp/v1/traces'\n")
            .unwrap()
            .otlp
            .unwrap();
        assert_eq!(o.path, "/otlp/v1/traces");
        for (bad, key) in [
            ("", "t.toml: otlp.endpoint: is required"),
            ("endpoint = 'grpc://c:4317'\n", "t.toml: otlp.endpoint: "),
            (
                "endpoint = 'http://c'\nbatch = 10\nqueue = 5\n",
                "t.toml: otlp.batch: ",
            ),
            (
                "endpoint = 'http://c'\nflush_ms = 0\n",
                "t.toml: otlp.flush_ms: ",
            ),
            (
                "endpoint = 'http://c'\nheaders = { 'a b' = 'x' }\n",
                "t.toml: otlp.headers.a b: ",
            ),
            ("endpoint = 'http://c'\nendpont = 1\n", "endpont"),
        ] {
            let e = load(bad).unwrap_err();
            assert!(e.contains(key), "{bad:?}: {e}");
        }
        // A header's value is a credential: never in an error.
        let e =
            load("endpoint = 'http://c'\nheaders = { authorization = \"Bearer s3cret\\u0001\" }\n")
                .unwrap_err();
        assert!(
            e.contains("otlp.headers.authorization") && !e.contains("s3cret"),
            "{e}"
        );
    }
}
