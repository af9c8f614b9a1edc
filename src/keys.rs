//! API key identity: a fingerprint (`sha256:` + hex, LiteLLM's stored hash) or a configured alias.
//!
//! The raw key lives only inside [`Secret`], whose `Debug` and `Display` print `[redacted]`; it is
//! hashed once and dropped. It must never reach a record, a metric label, an error or a log line.

use std::collections::HashMap;
use std::fmt;

use http::HeaderMap;
use sha2::{Digest, Sha256};

/// A value that must never be printed.
pub struct Secret<T>(T);

impl<T> Secret<T> {
    pub fn new(v: T) -> Self {
        Secret(v)
    }
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> Clone for Secret<T> {
    fn clone(&self) -> Self {
        Secret(self.0.clone())
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `sha256:` + lowercase hex of SHA-256 of the key bytes.
pub fn fingerprint(key: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(key);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// The client's key from `Authorization: Bearer`, `x-api-key` or `api-key`, in that order.
pub fn client_key(headers: &HeaderMap) -> Option<Secret<Vec<u8>>> {
    if let Some(v) = headers.get(http::header::AUTHORIZATION) {
        let b = v.as_bytes();
        if b.len() > 7 && b[..7].eq_ignore_ascii_case(b"bearer ") {
            let key = b[7..].trim_ascii();
            if !key.is_empty() {
                return Some(Secret::new(key.to_vec()));
            }
        }
    }
    for name in ["x-api-key", "api-key"] {
        if let Some(v) = headers.get(name) {
            let key = v.as_bytes().trim_ascii();
            if !key.is_empty() {
                return Some(Secret::new(key.to_vec()));
            }
        }
    }
    None
}

/// Fingerprint → alias, from the config (which holds fingerprints, never keys).
#[derive(Debug, Default, Clone)]
pub struct KeyIdentity {
    aliases: HashMap<String, String>,
}

impl KeyIdentity {
    pub fn new(aliases: HashMap<String, String>) -> Self {
        Self { aliases }
    }

    /// The `key_id` of a request: its alias when configured, else its fingerprint.
    pub fn key_id(&self, headers: &HeaderMap) -> Option<String> {
        Some(self.id_of(client_key(headers)?.expose()))
    }

    /// The `key_id` of a key.
    pub fn id_of(&self, key: &[u8]) -> String {
        let fp = fingerprint(key);
        self.aliases.get(&fp).cloned().unwrap_or(fp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_litellm_hash() {
        // LiteLLM stores sha256(key).hexdigest(); this is sha256("sk-rig-master-key").
        let fp = fingerprint(b"sk-rig-master-key");
        assert!(fp.starts_with("sha256:"));
        assert_eq!(fp.len(), 7 + 64);
        assert_eq!(
            fingerprint(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn key_sources_and_alias() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer abc".parse().unwrap());
        let ids = KeyIdentity::new(HashMap::from([(fingerprint(b"abc"), "team-a".into())]));
        assert_eq!(ids.key_id(&h).as_deref(), Some("team-a"));
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "xyz".parse().unwrap());
        assert_eq!(ids.key_id(&h), Some(fingerprint(b"xyz")));
        let mut h = HeaderMap::new();
        h.insert("api-key", " k ".parse().unwrap());
        assert_eq!(ids.key_id(&h), Some(fingerprint(b"k")));
        assert_eq!(ids.key_id(&HeaderMap::new()), None);
        assert_eq!(format!("{:?}", Secret::new("sk-1")), "[redacted]");
    }
}
