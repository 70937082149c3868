//! Which network addresses a server-side fetch of a user-given URL may reach: the address
//! classes that are internal (loopback, private, link-local, CGNAT, metadata, …) and the
//! `[security] fetch_allowed_hosts` patterns that let an operator allow some of them anyway.
//! Pure functions; resolving names is the fetcher's business.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is an address a fetch of a user-given URL must not reach by default: loopback,
/// unspecified, private (RFC 1918, IPv6 ULA), link-local (including the cloud metadata address
/// 169.254.169.254), CGNAT (100.64.0.0/10), multicast, broadcast, documentation and other
/// reserved ranges. IPv4-mapped and IPv4-compatible IPv6 addresses are judged as IPv4.
pub fn is_internal_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal_v4(v4);
            }
            let segments = v6.segments();
            // ::a.b.c.d (deprecated IPv4-compatible), but not :: and ::1 themselves.
            if segments[..6].iter().all(|s| *s == 0) && !v6.is_unspecified() && !v6.is_loopback() {
                let [a, b] = segments[6].to_be_bytes();
                let [c, d] = segments[7].to_be_bytes();
                return is_internal_v4(Ipv4Addr::new(a, b, c, d));
            }
            is_internal_v6(v6)
        }
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        // CGNAT 100.64.0.0/10
        || (a == 100 && (64..128).contains(&b))
        // IETF protocol assignments 192.0.0.0/24, benchmarking 198.18.0.0/15
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        // reserved 240.0.0.0/4
        || a >= 240
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // unique local fc00::/7
        || (first & 0xfe00) == 0xfc00
        // link-local fe80::/10 and the old site-local fec0::/10
        || (first & 0xffc0) == 0xfe80
        || (first & 0xffc0) == 0xfec0
        // documentation 2001:db8::/32
        || (first == 0x2001 && ip.segments()[1] == 0x0db8)
        // NAT64 64:ff9b::/96 embeds IPv4: judge the embedded address
        || (first == 0x0064 && ip.segments()[1] == 0xff9b && {
            let s = ip.segments();
            let [a, b] = s[6].to_be_bytes();
            let [c, d] = s[7].to_be_bytes();
            is_internal_v4(Ipv4Addr::new(a, b, c, d))
        })
}

/// One entry of `fetch_allowed_hosts`: a host name, an IP address, or a CIDR range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// Lower-case host name, matched exactly.
    Name(String),
    Network {
        base: IpAddr,
        prefix: u8,
    },
}

impl HostPattern {
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let text = text.trim();
        if let Some((base, prefix)) = text.split_once('/') {
            let base: IpAddr = base
                .parse()
                .map_err(|_| format!("{text:?}: {base:?} is not an IP address"))?;
            let max = if base.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix
                .parse()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {max}"))?;
            return Ok(HostPattern::Network { base, prefix });
        }
        let unbracketed = text.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            let prefix = if ip.is_ipv4() { 32 } else { 128 };
            return Ok(HostPattern::Network { base: ip, prefix });
        }
        let valid = !text.is_empty()
            && text.len() <= 253
            && text.split('.').all(|label| {
                !label.is_empty()
                    && !label.starts_with('-')
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !valid {
            return Err(format!(
                "{text:?} is not a host name, an IP address or a CIDR range (e.g. \"docs.internal\", \"10.1.2.0/24\")"
            ));
        }
        Ok(HostPattern::Name(text.to_ascii_lowercase()))
    }

    /// Whether a URL's host (`host`, as written) or an address it resolved to (`ip`) matches.
    pub fn matches(&self, host: &str, ip: Option<IpAddr>) -> bool {
        match self {
            HostPattern::Name(name) => host.trim_end_matches('.').eq_ignore_ascii_case(name),
            HostPattern::Network { base, prefix } => {
                let literal = host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .ok();
                [literal, ip]
                    .into_iter()
                    .flatten()
                    .any(|ip| in_network(ip, *base, *prefix))
            }
        }
    }
}

fn in_network(ip: IpAddr, base: IpAddr, prefix: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    match (ip, base) {
        (IpAddr::V4(ip), IpAddr::V4(base)) => {
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            u32::from(ip) & mask == u32::from(base) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(base)) => {
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            u128::from(ip) & mask == u128::from(base) & mask
        }
        _ => false,
    }
}

/// The allow-list of `[security] fetch_allowed_hosts`, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchAllowList(Vec<HostPattern>);

impl FetchAllowList {
    /// Entries that do not parse are skipped (the config loader has already refused them).
    pub fn new(entries: &[String]) -> Self {
        Self(
            entries
                .iter()
                .filter_map(|e| HostPattern::parse(e).ok())
                .collect(),
        )
    }

    pub fn allows(&self, host: &str, ip: Option<IpAddr>) -> bool {
        self.0.iter().any(|p| p.matches(host, ip))
    }

    /// Whether a fetch of `host` may connect to `ip`: a public address, or one the list allows.
    pub fn may_connect(&self, host: &str, ip: IpAddr) -> bool {
        !is_internal_address(ip) || self.allows(host, Some(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses() {
        for internal in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(is_internal_address(ip(internal)), "{internal}");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_internal_address(ip(public)), "{public}");
        }
    }

    #[test]
    fn allow_list_patterns() {
        let list = FetchAllowList::new(&[
            "docs.internal".into(),
            "10.1.2.0/24".into(),
            "127.0.0.1".into(),
            "fd00::/8".into(),
        ]);
        assert!(list.allows("DOCS.internal", None));
        assert!(list.allows("wiki", Some(ip("10.1.2.77"))));
        assert!(!list.allows("wiki", Some(ip("10.1.3.1"))));
        assert!(list.allows("127.0.0.1", None));
        assert!(list.allows("localhost", Some(ip("127.0.0.1"))));
        assert!(list.allows("localhost", Some(ip("::ffff:127.0.0.1"))));
        assert!(!list.allows("localhost", Some(ip("127.0.0.2"))));
        assert!(list.allows("[fd00::5]", None));
        assert!(list.may_connect("example.com", ip("93.184.216.34")));
        assert!(!list.may_connect("evil.example", ip("169.254.169.254")));
        for bad in [
            "",
            "10.0.0.0/33",
            "not a host",
            "-x.com",
            "1.2.3.4/x",
            "a..b",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
    }
}
