//! `[[routes]]`: named upstreams, their path prefixes, credentials and model maps. Upstreams come
//! only from here (no open proxy). A header value is never echoed into an error: it is usually a
//! credential.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::Uri;

use super::admit::{self, Admit, Context};
pub use super::cidr::Cidr;
use super::env::expand_env;
use super::raw::RawRoute;
use super::{defaults, err, ConfigError};
use crate::keys::Secret;

/// The route name recorded for requests that matched no route; no configured route may take it.
pub const UNROUTED: &str = "unrouted";

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
    /// Set on the inner route of a gateway tap: the gateway's upstream is this route.
    pub behind: Option<Behind>,
    /// Who may use this route (always set when it injects a credential).
    pub admit: Option<Admit>,
    /// The tap across pods: whether the route sends `x-tokentap-join`, and whose it records.
    pub join: super::join::Join,
}

/// `behind = "gateway"`: this route serves only the gateway named, and tokentap joins each of
/// its requests to the request the gateway route forwarded.
#[derive(Debug, Clone)]
pub struct Behind {
    /// The outer route (the gateway's own route in tokentap).
    pub gateway: String,
    /// `sha256:` fingerprints of the credential the gateway sends upstream.
    pub keys: Vec<String>,
    /// Networks the gateway connects from.
    pub sources: Vec<Cidr>,
    /// How long an outer request waits for its inner one (and a fingerprint stays ambiguous).
    pub window: Duration,
}

impl Behind {
    /// Whether a request with this key fingerprint, from this address, is the gateway's.
    pub fn admits(&self, key_fingerprint: Option<&str>, peer: Option<IpAddr>) -> bool {
        key_fingerprint.is_some_and(|k| self.keys.iter().any(|x| x == k))
            || peer.is_some_and(|ip| self.sources.iter().any(|c| c.contains(ip)))
    }
}

/// Check every route, in order; names and prefixes must be unique.
pub fn validate(
    raw: Vec<RawRoute>,
    ctx: &Context<'_>,
    file: &str,
) -> Result<Vec<RouteConfig>, ConfigError> {
    let mut routes: Vec<RouteConfig> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let route = validate_one(r, i, ctx, file)?;
        let k = |f: &str| format!("routes[{i}].{f}");
        if routes.iter().any(|x| x.name == route.name) {
            return Err(err(
                file,
                k("name"),
                format!("duplicate route name {:?}", route.name),
            ));
        }
        if routes.iter().any(|x| x.path_prefix == route.path_prefix) {
            return Err(err(
                file,
                k("path_prefix"),
                format!("{:?} is already another route's prefix", route.path_prefix),
            ));
        }
        routes.push(route);
    }
    for (i, r) in routes.iter().enumerate() {
        let Some(b) = &r.behind else { continue };
        let key = format!("routes[{i}].behind");
        match routes.iter().find(|x| x.name == b.gateway) {
            None => {
                return Err(err(
                    file,
                    key,
                    format!(
                        "{:?} names no route: a tap needs its gateway's route",
                        b.gateway
                    ),
                ))
            }
            Some(g) if g.name == r.name => {
                return Err(err(file, key, "a route cannot be behind itself"))
            }
            Some(g) if g.behind.is_some() => {
                return Err(err(
                    file,
                    key,
                    format!(
                        "{:?} is itself behind another route: taps do not chain",
                        g.name
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(routes)
}

fn validate_behind(r: &RawRoute, i: usize, file: &str) -> Result<Option<Behind>, ConfigError> {
    let k = |f: &str| format!("routes[{i}].{f}");
    let Some(gateway) = r.behind.clone() else {
        for (f, set) in [
            ("behind_keys", !r.behind_keys.is_empty()),
            ("behind_sources", !r.behind_sources.is_empty()),
            ("behind_window_ms", r.behind_window_ms.is_some()),
        ] {
            if set {
                return Err(err(file, k(f), "only for a route with `behind`"));
            }
        }
        return Ok(None);
    };
    let mut keys = Vec::new();
    for (j, fp) in r.behind_keys.iter().enumerate() {
        let hex = fp.strip_prefix("sha256:").unwrap_or("");
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err(
                file,
                k(&format!("behind_keys[{j}]")),
                "must be sha256:<64 hex> (the fingerprint of the gateway's upstream key, never the key)",
            ));
        }
        keys.push(format!("sha256:{}", hex.to_ascii_lowercase()));
    }
    let sources = Cidr::parse_all(&r.behind_sources, &k("behind_sources"), file)?;
    if keys.is_empty() && sources.is_empty() {
        return Err(err(
            file,
            k("behind_keys"),
            "a route behind a gateway serves only the gateway: list its key (behind_keys) or its networks (behind_sources)",
        ));
    }
    let window_ms = r.behind_window_ms.unwrap_or(defaults::BEHIND_WINDOW_MS);
    if window_ms == 0 {
        return Err(err(file, k("behind_window_ms"), "must be > 0"));
    }
    Ok(Some(Behind {
        gateway,
        keys,
        sources,
        window: Duration::from_millis(window_ms),
    }))
}

fn validate_one(
    r: RawRoute,
    i: usize,
    ctx: &Context<'_>,
    file: &str,
) -> Result<RouteConfig, ConfigError> {
    let k = |f: &str| format!("routes[{i}].{f}");
    let behind = validate_behind(&r, i, file)?;
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
    if r.name == UNROUTED {
        return Err(err(
            file,
            k("name"),
            format!("{:?} is reserved for requests no route matched", r.name),
        ));
    }
    let upstream_s = expand_env(&r.upstream, file, &k("upstream"))?;
    let (upstream, base_path) = parse_upstream(&upstream_s, file, &k("upstream"))?;
    let prefix = r
        .path_prefix
        .clone()
        .unwrap_or_else(|| defaults::PATH_PREFIX.into());
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
    let mut set_headers = Vec::new();
    for (name, value) in &r.set_headers {
        let hk = k(&format!("set_headers.{name}"));
        let hn = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| err(file, &hk, format!("{name:?} is not a valid header name")))?;
        if crate::headers::is_hop_by_hop(&hn) || hn == http::header::HOST {
            return Err(err(
                file,
                &hk,
                format!("{name} cannot be set (hop-by-hop or Host)"),
            ));
        }
        let v = expand_env(value, file, &hk)?;
        // NB: never echo the value: it is usually a credential.
        let hv = HeaderValue::from_str(&v)
            .map_err(|_| err(file, &hk, "value is not a valid header value"))?;
        set_headers.push((hn, Secret::new(hv)));
    }
    let injected: Vec<HeaderName> = set_headers
        .iter()
        .map(|(h, _)| h.clone())
        .filter(|h| admit::is_credential(h, ctx))
        .collect();
    let admit = admit::validate(&r, i, &injected, ctx, file)?;
    let join = super::join::validate(&r, i, ctx, file)?;
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
    Ok(RouteConfig {
        name: r.name,
        upstream,
        base_path,
        path_prefix,
        set_headers,
        model_map: r.model_map.into_iter().collect(),
        ca_file,
        behind,
        admit,
        join,
    })
}

/// `http(s)://host[:port][/base]` → (scheme + authority, base path without trailing slash).
pub(super) fn parse_upstream(s: &str, file: &str, key: &str) -> Result<(Uri, String), ConfigError> {
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

#[cfg(test)]
mod tests {
    use super::Cidr;
    use crate::config::{Config, Overrides};

    fn tap_err(extra: &str) -> String {
        let text = format!(
            "[[routes]]\nname='gateway'\nupstream='http://h:1'\npath_prefix='/gw'\n\
             [[routes]]\nname='engine'\nupstream='http://h:2'\n{extra}"
        );
        match Config::from_toml(&text, "t.toml", &Overrides::default()) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_tap_names_its_partner_and_who_may_use_it() {
        let fp = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(
            tap_err(&format!("behind='gateway'\nbehind_keys=['{fp}']\n")),
            ""
        );
        assert_eq!(
            tap_err("behind='gateway'\nbehind_sources=['10.0.0.0/8', '::1']\n"),
            ""
        );
        let e = tap_err(&format!("behind='gatewy'\nbehind_keys=['{fp}']\n"));
        assert!(
            e.starts_with("t.toml: routes[1].behind: ") && e.contains("gatewy"),
            "{e}"
        );
        let e = tap_err(&format!("behind='engine'\nbehind_keys=['{fp}']\n"));
        assert!(
            e.contains("routes[1].behind: a route cannot be behind itself"),
            "{e}"
        );
        let e = tap_err("behind='gateway'\n");
        assert!(e.starts_with("t.toml: routes[1].behind_keys: "), "{e}");
        let e = tap_err("behind='gateway'\nbehind_keys=['sk-raw-key']\n");
        assert!(
            e.contains("routes[1].behind_keys[0]") && !e.contains("sk-raw"),
            "{e}"
        );
        let e = tap_err("behind='gateway'\nbehind_sources=['10.0.0/8']\n");
        assert!(e.contains("routes[1].behind_sources[0]"), "{e}");
        let e = tap_err(&format!("behind_keys=['{fp}']\n"));
        assert!(
            e.contains("routes[1].behind_keys: only for a route with `behind`"),
            "{e}"
        );
    }

    #[test]
    fn cidr_blocks() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        assert!(Cidr::parse("nope").is_none());
    }
}
