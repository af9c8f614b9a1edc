//! `[[routes]]`: named upstreams, their path prefixes, credentials and model maps. Upstreams come
//! only from here (no open proxy). A header value is never echoed into an error: it is usually a
//! credential.

use std::collections::HashMap;
use std::path::PathBuf;

use http::header::{HeaderName, HeaderValue};
use http::Uri;

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
}

/// Check every route, in order; names and prefixes must be unique.
pub fn validate(raw: Vec<RawRoute>, file: &str) -> Result<Vec<RouteConfig>, ConfigError> {
    let mut routes: Vec<RouteConfig> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let route = validate_one(r, i, file)?;
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
    Ok(routes)
}

fn validate_one(r: RawRoute, i: usize, file: &str) -> Result<RouteConfig, ConfigError> {
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
    for (name, value) in r.set_headers {
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
    Ok(RouteConfig {
        name: r.name,
        upstream,
        base_path,
        path_prefix,
        set_headers,
        model_map: r.model_map.into_iter().collect(),
        ca_file,
    })
}

/// `http(s)://host[:port][/base]` → (scheme + authority, base path without trailing slash).
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
