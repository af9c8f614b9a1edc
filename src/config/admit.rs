//! Who may use a route that injects a credential. A route whose `set_headers` sets a
//! credential-bearing header forwards only the requests of admitted clients: a key on its
//! allow-list (`admit_keys`: fingerprints or aliases) or an address in its networks
//! (`admit_sources`). Otherwise the config is refused: whoever reaches the listener would hold
//! the route's credential. The one opt-out, `inject_without_admission`, is for a sidecar that
//! listens on loopback only.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use http::header::HeaderName;

use super::cidr::Cidr;
use super::raw::RawRoute;
use super::{err, ConfigError};

/// Headers that carry a credential whatever the config says.
pub const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

/// What route validation needs from the rest of the config.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// `[keys.aliases]`: fingerprint → alias.
    pub aliases: &'a HashMap<String, String>,
    /// `[keys].secret_headers`, lowercased.
    pub secret_headers: &'a [HeaderName],
    /// The client listener.
    pub listen: SocketAddr,
}

/// A route's admission: who may send through it.
#[derive(Debug, Clone, Default)]
pub struct Admit {
    /// Key ids (a `sha256:` fingerprint, or its alias), as the records write them.
    pub keys: Vec<String>,
    pub sources: Vec<Cidr>,
    /// `inject_without_admission`: any client (a loopback-only sidecar).
    pub anyone: bool,
}

impl Admit {
    /// Whether a client with this key id, from this address, may use the route.
    pub fn admits(&self, key_id: Option<&str>, peer: Option<IpAddr>) -> bool {
        self.anyone
            || key_id.is_some_and(|k| self.keys.iter().any(|x| x == k))
            || peer.is_some_and(|ip| self.sources.iter().any(|c| c.contains(ip)))
    }
}

/// Whether a header carries a credential (the three always, and `[keys].secret_headers`).
pub fn is_credential(h: &HeaderName, ctx: &Context<'_>) -> bool {
    CREDENTIAL_HEADERS.contains(&h.as_str()) || ctx.secret_headers.contains(h)
}

/// A list of key ids (`admit_keys`, `join_keys`): `sha256:<64 hex>` fingerprints or aliases of
/// `[keys.aliases]`, as the records write them (an aliased key is known by its alias). `echo`:
/// whether an error quotes the value (`admit_keys` always has; `join_keys` never does, as a
/// pasted key would be printed).
pub fn key_ids(
    list: &[String],
    key: &str,
    ctx: &Context<'_>,
    file: &str,
    echo: bool,
) -> Result<Vec<String>, ConfigError> {
    let mut keys = Vec::new();
    for (j, id) in list.iter().enumerate() {
        let hex = id.strip_prefix("sha256:");
        let fingerprint =
            hex.is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        if fingerprint {
            let fp = id.to_ascii_lowercase();
            keys.push(ctx.aliases.get(&fp).cloned().unwrap_or(fp));
        } else if ctx.aliases.values().any(|a| a == id) {
            keys.push(id.clone());
        } else {
            let what = if echo {
                format!("{id:?}")
            } else {
                "the value".into()
            };
            return Err(err(
                file,
                format!("{key}[{j}]"),
                format!("{what} is neither sha256:<64 hex> (a key's fingerprint: printf %s \"$KEY\" | tokentap fingerprint) nor an alias in [keys.aliases]"),
            ));
        }
    }
    Ok(keys)
}

/// The admission of route `i`: `None` when it injects no credential and lists no one.
pub fn validate(
    r: &RawRoute,
    i: usize,
    injected: &[HeaderName],
    ctx: &Context<'_>,
    file: &str,
) -> Result<Option<Admit>, ConfigError> {
    let k = |f: &str| format!("routes[{i}].{f}");
    let keys = key_ids(&r.admit_keys, &k("admit_keys"), ctx, file, true)?;
    let sources = Cidr::parse_all(&r.admit_sources, &k("admit_sources"), file)?;
    let anyone = r.inject_without_admission.unwrap_or(false);
    if anyone && !ctx.listen.ip().is_loopback() {
        return Err(err(
            file,
            k("inject_without_admission"),
            format!(
                "only for a sidecar that listens on loopback; listen.addr is {}: anyone who reaches it would use this route's credential",
                ctx.listen
            ),
        ));
    }
    if anyone && injected.is_empty() {
        return Err(err(
            file,
            k("inject_without_admission"),
            "this route injects no credential (set_headers has no authorization, x-api-key, api-key or [keys].secret_headers)",
        ));
    }
    if let Some(h) = injected.first() {
        if keys.is_empty() && sources.is_empty() && !anyone {
            return Err(err(
                file,
                k(&format!("set_headers.{h}")),
                format!(
                    "route {:?} injects a credential for every client who reaches it. Admit clients: routes[{i}].admit_keys (their key fingerprints or aliases) or routes[{i}].admit_sources (their networks); or remove set_headers.{h} so that clients keep their own keys; or, for a sidecar listening on loopback only, routes[{i}].inject_without_admission = true",
                    r.name
                ),
            ));
        }
    }
    let listed = !keys.is_empty() || !sources.is_empty();
    Ok((listed || anyone).then_some(Admit {
        keys,
        sources,
        anyone,
    }))
}
