//! A route's part in the tap across pods (docs/tap.md): whether it sends `x-tokentap-join`
//! (`join_header`), and whose received `x-tokentap-join` it records as `join_id` (`join_sources`,
//! default loopback; `join_keys`). A header from anyone else is taken off and not recorded: a
//! client cannot forge a join.

use std::net::IpAddr;

use super::admit::{self, Context};
use super::cidr::Cidr;
use super::raw::RawRoute;
use super::{defaults, ConfigError};

/// `routes[].join_*`.
#[derive(Debug, Clone, Default)]
pub struct Join {
    /// `join_header`: add `x-tokentap-join: <record id>` to what the route forwards.
    pub header: bool,
    /// `join_sources`: networks whose header is recorded.
    pub sources: Vec<Cidr>,
    /// `join_keys`: key ids (fingerprints or aliases, as records write them) whose header is
    /// recorded.
    pub keys: Vec<String>,
}

impl Join {
    /// Whether a request from `peer` is trusted by its address alone.
    pub fn trusts_source(&self, peer: Option<IpAddr>) -> bool {
        peer.is_some_and(|ip| self.sources.iter().any(|c| c.contains(ip)))
    }

    /// Whether a request with this key id is trusted by its key.
    pub fn trusts_key(&self, key_id: Option<&str>) -> bool {
        key_id.is_some_and(|k| self.keys.iter().any(|x| x == k))
    }
}

/// The `join_*` keys of route `i`.
pub fn validate(
    r: &RawRoute,
    i: usize,
    ctx: &Context<'_>,
    file: &str,
) -> Result<Join, ConfigError> {
    let k = |f: &str| format!("routes[{i}].{f}");
    let sources = match &r.join_sources {
        Some(list) => Cidr::parse_all(list, &k("join_sources"), file)?,
        None => defaults::JOIN_SOURCES
            .iter()
            .filter_map(|s| Cidr::parse(s))
            .collect(),
    };
    let keys = admit::key_ids(&r.join_keys, &k("join_keys"), ctx, file, false)?;
    Ok(Join {
        header: r.join_header.unwrap_or(false),
        sources,
        keys,
    })
}

/// `serve --join-header` and `--join-sources`, onto the first route (the one-route form's
/// route; with a file's routes, the one `--upstream` names). A bad block is named by its flag.
pub fn flags(routes: &mut [RawRoute], over: &super::Overrides) -> Result<(), ConfigError> {
    let Some(first) = routes.first_mut() else {
        return Ok(());
    };
    if over.join_header {
        first.join_header = Some(true);
    }
    if let Some(list) = &over.join_sources {
        // `--join-sources ''`: no address is trusted.
        let list: Vec<String> = list
            .iter()
            .filter(|s| !s.trim().is_empty())
            .cloned()
            .collect();
        Cidr::parse_all(&list, "--join-sources", "(command line)")?;
        first.join_sources = Some(list);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    fn join(extra: &str) -> Result<super::Join, String> {
        let text = format!("[[routes]]\nname='r'\nupstream='http://h:1'\n{extra}");
        Config::from_toml(&text, "t.toml", &Overrides::default())
            .map(|c| c.routes[0].join.clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn loopback_is_trusted_unless_the_file_says_otherwise() {
        let lo = "127.0.0.1".parse().ok();
        let j = join("").unwrap_or_default();
        assert!(!j.header);
        assert!(j.trusts_source(lo) && j.trusts_source("::1".parse().ok()));
        assert!(!j.trusts_source("10.1.2.3".parse().ok()));
        let j = join("join_header = true\njoin_sources = ['10.0.0.0/8']\n").unwrap_or_default();
        assert!(j.header && !j.trusts_source(lo));
        assert!(j.trusts_source("10.1.2.3".parse().ok()));
        let j = join("join_sources = []\n").unwrap_or_default();
        assert!(!j.trusts_source(lo));
    }

    #[test]
    fn serve_flags_set_the_one_route() {
        let over = |sources: &[&str]| Overrides {
            upstream: Some("http://h:1".into()),
            join_header: true,
            join_sources: Some(sources.iter().map(|s| s.to_string()).collect()),
            ..Overrides::default()
        };
        let c = Config::from_flags(&over(&["10.0.0.0/8"])).map_err(|e| e.to_string());
        let j = c.map(|c| c.routes[0].join.clone()).unwrap_or_default();
        assert!(j.header && j.trusts_source("10.9.9.9".parse().ok()));
        assert!(!j.trusts_source("127.0.0.1".parse().ok()));
        let e = Config::from_flags(&over(&["10.0.0.0/8", "nope"]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("(command line): --join-sources[1]: "), "{e}");
        // `--join-sources ''`: no address is trusted.
        let c = Config::from_flags(&over(&[""])).map_err(|e| e.to_string());
        let j = c.map(|c| c.routes[0].join.clone()).unwrap_or_default();
        assert!(j.header && !j.trusts_source("127.0.0.1".parse().ok()));
    }

    #[test]
    fn a_bad_value_names_file_and_key() {
        let e = join("join_header = 'yes'\n").err().unwrap_or_default();
        assert!(e.starts_with("t.toml: routes[0].join_header: "), "{e}");
        let e = join("join_sources = ['127.0.0.1', '10.0.0/8']\n")
            .err()
            .unwrap_or_default();
        assert!(e.starts_with("t.toml: routes[0].join_sources[1]: "), "{e}");
        let e = join("join_keys = ['sk-raw-key']\n")
            .err()
            .unwrap_or_default();
        assert!(
            e.starts_with("t.toml: routes[0].join_keys[0]: ") && !e.contains("sk-raw"),
            "{e}"
        );
    }
}
