//! An address block (`10.0.0.0/8`, `::1/128` or a bare address) as the config's source lists
//! give it, and whether a peer's address falls inside.

use std::net::IpAddr;

use super::{err, ConfigError};

/// An address block, `10.0.0.0/8`, `::1/128` or a bare address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Option<Cidr> {
        let (a, bits) = match s.trim().split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().ok()?)),
            None => (s.trim(), None),
        };
        let net: IpAddr = a.parse().ok()?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        (bits <= max).then_some(Cidr { net, bits })
    }

    /// Every entry of the list at `key`, or an error naming the one that is not a block.
    pub fn parse_all(list: &[String], key: &str, file: &str) -> Result<Vec<Cidr>, ConfigError> {
        list.iter()
            .enumerate()
            .map(|(j, s)| {
                Cidr::parse(s).ok_or_else(|| {
                    err(
                        file,
                        format!("{key}[{j}]"),
                        format!("{s:?} is not an address or CIDR block"),
                    )
                })
            })
            .collect()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 client on a dual-stack listener arrives as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let prefix = |a: u128, b: u128, width: u32| {
            let shift = width - u32::from(self.bits);
            shift >= width || (a >> shift) == (b >> shift)
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => {
                prefix(u128::from(u32::from(n)), u128::from(u32::from(i)), 32)
            }
            (IpAddr::V6(n), IpAddr::V6(i)) => prefix(u128::from(n), u128::from(i), 128),
            _ => false,
        }
    }
}
