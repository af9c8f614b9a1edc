//! `[request_id]`: which headers carry a client's request id, and whether tokentap makes one for
//! a request that came without.

use http::HeaderName;

use super::raw::RawRequestId;
use super::{defaults, err, ConfigError};

#[derive(Debug, Clone, PartialEq)]
pub struct RequestIdConfig {
    /// Read in order: the first a request carries is its `request_id`. The first is where a
    /// generated id goes (upstream, and back to the client); the upstream's response header of
    /// any of these names is its `upstream_request_id` when its body says none. Empty: no id
    /// is read or made.
    pub headers: Vec<HeaderName>,
    /// Make an id for a request that came without one.
    pub generate: bool,
}

impl Default for RequestIdConfig {
    fn default() -> Self {
        RequestIdConfig {
            headers: defaults::REQUEST_ID_HEADERS
                .iter()
                .map(|h| HeaderName::from_static(h))
                .collect(),
            generate: defaults::REQUEST_ID_GENERATE,
        }
    }
}

pub fn validate(raw: RawRequestId, file: &str) -> Result<RequestIdConfig, ConfigError> {
    let mut c = RequestIdConfig::default();
    c.generate = raw.generate.unwrap_or(c.generate);
    if let Some(names) = raw.headers {
        c.headers = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let key = format!("request_id.headers[{i}]");
            let h = HeaderName::try_from(name.as_str())
                .map_err(|_| err(file, &key, format!("{name:?} is not a valid header name")))?;
            if !crate::headers::forwarded(&h) {
                return Err(err(
                    file,
                    &key,
                    format!(
                        "{name:?} is a hop-by-hop or framing header: it never reaches the upstream"
                    ),
                ));
            }
            if c.headers.contains(&h) {
                return Err(err(file, &key, format!("{name:?} is listed twice")));
            }
            c.headers.push(h);
        }
    }
    if c.generate && c.headers.is_empty() {
        return Err(err(
            file,
            "request_id.generate",
            "needs a header to send the id in: request_id.headers is empty",
        ));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    fn load(section: &str) -> Result<Config, String> {
        Config::from_toml(
            &format!("[[routes]]\nname='r'\nupstream='http://h:1'\n{section}"),
            "t.toml",
            &Overrides::default(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_names_and_errors_that_name_the_key() {
        let c = load("").unwrap().request_id;
        assert_eq!(c.headers, ["x-request-id"]);
        assert!(!c.generate);
        let c =
            load("[request_id]\nheaders = ['X-Correlation-ID', 'x-request-id']\ngenerate = true\n")
                .unwrap()
                .request_id;
        assert_eq!(c.headers, ["x-correlation-id", "x-request-id"]);
        assert!(c.generate);
        let c = load("[request_id]\nheaders = []\n").unwrap().request_id;
        assert!(c.headers.is_empty());
        for (bad, key) in [
            ("headers = ['a b']\n", "t.toml: request_id.headers[0]: "),
            (
                "headers = ['x', 'connection']\n",
                "t.toml: request_id.headers[1]: ",
            ),
            ("headers = ['x', 'X']\n", "t.toml: request_id.headers[1]: "),
            (
                "headers = []\ngenerate = true\n",
                "t.toml: request_id.generate: ",
            ),
            ("generate = 'yes'\n", "request_id.generate"),
            ("header = ['x']\n", "unknown field"),
        ] {
            let e = load(&format!("[request_id]\n{bad}")).unwrap_err();
            assert!(e.contains(key), "{bad:?}: {e}");
        }
    }
}
