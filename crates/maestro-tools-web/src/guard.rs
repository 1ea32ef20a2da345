//! The SSRF guard: which addresses a web tool may reach, enforced after DNS resolution (a
//! `reqwest` resolver) and again on every redirect hop.
//!
//! A URL the model chooses must not reach the machine itself, the local network or a cloud
//! metadata endpoint. Checking the host name is not enough (`evil.example` can resolve to
//! `127.0.0.1`), so the check runs on the addresses the name resolves to, right before the
//! connection is made. IP-literal hosts never reach the resolver, so they are checked directly
//! before the first request and on every redirect.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use maestro_tools::BoxFuture;

/// Why an address is refused, in words a person understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockReason {
    /// `0.0.0.0/8` or `::`: "this host", which reaches the machine itself.
    Unspecified,
    /// `127.0.0.0/8` or `::1`: the machine itself.
    Loopback,
    /// The RFC 1918 private networks `10/8`, `172.16/12` and `192.168/16`.
    Private,
    /// The shared address space of carrier-grade NAT, `100.64.0.0/10`.
    CarrierGradeNat,
    /// Link-local, which includes the cloud metadata endpoint 169.254.169.254.
    LinkLocal,
    /// IPv6 unique-local addresses, `fc00::/7`: IPv6's private networks.
    UniqueLocal,
    /// `255.255.255.255`.
    Broadcast,
    /// IPv4 `224.0.0.0/4` or IPv6 `ff00::/8`.
    Multicast,
    /// Reserved, benchmarking and documentation ranges (`240.0.0.0/4`, `192.0.0.0/24`,
    /// `198.18.0.0/15`, `2001:db8::/32`, ...), which no public service uses.
    Reserved,
}

impl fmt::Display for BlockReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BlockReason::Unspecified => "unspecified address",
            BlockReason::Loopback => "loopback address",
            BlockReason::Private => "private network address",
            BlockReason::CarrierGradeNat => "carrier-grade NAT address",
            BlockReason::LinkLocal => "link-local / cloud metadata address",
            BlockReason::UniqueLocal => "unique-local IPv6 address",
            BlockReason::Broadcast => "broadcast address",
            BlockReason::Multicast => "multicast address",
            BlockReason::Reserved => "reserved address",
        })
    }
}

/// Classifies an address: `Some(reason)` when a web tool must not connect to it by default.
pub fn blocked_reason(ip: IpAddr) -> Option<BlockReason> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<BlockReason> {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some(BlockReason::Unspecified)
    } else if ip.is_loopback() {
        Some(BlockReason::Loopback)
    } else if ip.is_private() {
        Some(BlockReason::Private)
    } else if a == 100 && (64..128).contains(&b) {
        Some(BlockReason::CarrierGradeNat)
    } else if ip.is_link_local() {
        Some(BlockReason::LinkLocal)
    } else if ip.is_broadcast() {
        Some(BlockReason::Broadcast)
    } else if ip.is_multicast() {
        Some(BlockReason::Multicast)
    } else if a >= 240
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (18..20).contains(&b))
        || ip.is_documentation()
    {
        Some(BlockReason::Reserved)
    } else {
        None
    }
}

fn blocked_v6(ip: Ipv6Addr) -> Option<BlockReason> {
    let seg = ip.segments();
    // Addresses that carry an IPv4 address: mapped (::ffff:a.b.c.d), the deprecated compatible
    // form (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) are judged by that address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return blocked_v4(v4);
    }
    if seg[..6] == [0; 6] && !ip.is_unspecified() && !ip.is_loopback() {
        return blocked_v4(embedded_v4(seg[6], seg[7]));
    }
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return blocked_v4(embedded_v4(seg[6], seg[7]));
    }
    if seg[0] == 0x2002 {
        return blocked_v4(embedded_v4(seg[1], seg[2]));
    }
    if ip.is_unspecified() {
        Some(BlockReason::Unspecified)
    } else if ip.is_loopback() {
        Some(BlockReason::Loopback)
    } else if (seg[0] & 0xffc0) == 0xfe80 || (seg[0] & 0xffc0) == 0xfec0 {
        Some(BlockReason::LinkLocal)
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        Some(BlockReason::UniqueLocal)
    } else if ip.is_multicast() {
        Some(BlockReason::Multicast)
    } else if seg[0] == 0x2001 && seg[1] == 0x0db8 || seg[..4] == [0x100, 0, 0, 0] {
        Some(BlockReason::Reserved)
    } else {
        None
    }
}

fn embedded_v4(high: u16, low: u16) -> Ipv4Addr {
    let [a, b] = high.to_be_bytes();
    let [c, d] = low.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

/// A refused destination. Kept as a typed error so the tools can find it in reqwest's error
/// chain and tell the model exactly what was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The host of the URL, lower-cased (a name, or the address itself).
    pub host: String,
    /// The address that was refused: the host's own, or one it resolved to.
    pub ip: IpAddr,
    /// Why that address is refused.
    pub reason: BlockReason,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host == self.ip.to_string() {
            write!(f, "refused to connect to {} ({})", self.ip, self.reason)
        } else {
            write!(
                f,
                "refused to connect to {}: it resolves to {} ({})",
                self.host, self.ip, self.reason
            )
        }
    }
}

impl std::error::Error for Blocked {}

/// Which destinations are allowed: everything public, plus the configured exceptions.
#[derive(Debug, Clone, Default)]
pub struct HostPolicy {
    allow_private: bool,
    /// Lower-case host names allowed to resolve to anything.
    hosts: Vec<String>,
    /// Addresses and networks allowed although they are blocked by default.
    nets: Vec<IpNet>,
}

impl HostPolicy {
    /// `allow_hosts` entries are host names (`searx.lan`), addresses (`127.0.0.1`, `::1`) or
    /// networks (`10.1.0.0/16`).
    pub fn new(allow_private: bool, allow_hosts: &[String]) -> Self {
        let mut policy = HostPolicy {
            allow_private,
            ..HostPolicy::default()
        };
        for entry in allow_hosts {
            policy.allow(entry);
        }
        policy
    }

    /// Adds one exception (see [`HostPolicy::new`]).
    pub fn allow(&mut self, entry: &str) {
        let entry = entry.trim().trim_start_matches('[').trim_end_matches(']');
        if let Ok(net) = entry.parse::<IpNet>() {
            self.nets.push(net);
        } else if let Ok(ip) = entry.parse::<IpAddr>() {
            self.nets.push(IpNet::from(ip));
        } else if !entry.is_empty() {
            self.hosts.push(entry.to_ascii_lowercase());
        }
    }

    /// The one check every path goes through: may `host`, which resolved to `ips`, be reached?
    /// Refuses the whole name when any of its addresses is blocked, so a name cannot mix a
    /// public and a private answer.
    pub fn check(&self, host: &str, ips: &[IpAddr]) -> Result<(), Blocked> {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if self.allow_private || self.hosts.contains(&host) {
            return Ok(());
        }
        for &ip in ips {
            let ip = canonical(ip);
            if let Some(reason) = blocked_reason(ip)
                && !self.nets.iter().any(|net| net.contains(&ip))
            {
                return Err(Blocked {
                    host: host.clone(),
                    ip,
                    reason,
                });
            }
        }
        Ok(())
    }

    /// Checks a URL whose host is an IP literal (those skip DNS). Names pass here; the resolver
    /// checks them when the connection is made.
    pub fn check_url(&self, url: &url::Url) -> Result<(), Blocked> {
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(&ip.to_string(), &[IpAddr::V4(ip)]),
            Some(url::Host::Ipv6(ip)) => self.check(&ip.to_string(), &[IpAddr::V6(ip)]),
            Some(url::Host::Domain(_)) | None => Ok(()),
        }
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Turns a host name into addresses. The system resolver in production; tests inject a map so
/// that a name can resolve to 127.0.0.1 without touching /etc/hosts or outside DNS.
pub trait HostLookup: Send + Sync {
    /// Every address `host` resolves to (IPv4 and IPv6), or why it does not resolve.
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (getaddrinfo through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl HostLookup for SystemLookup {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// The reqwest resolver: looks the name up, then applies the [`HostPolicy`].
pub(crate) struct GuardedResolver {
    pub(crate) policy: Arc<HostPolicy>,
    pub(crate) lookup: Arc<dyn HostLookup>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let lookup = Arc::clone(&self.lookup);
        Box::pin(async move {
            let host = name.as_str().to_string();
            let ips = lookup.lookup(&host).await?;
            if ips.is_empty() {
                return Err(format!("{host} did not resolve to any address").into());
            }
            policy.check(&host, &ips)?;
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn classifies_addresses() {
        let cases = [
            ("127.0.0.1", Some(BlockReason::Loopback)),
            ("127.8.9.10", Some(BlockReason::Loopback)),
            ("10.1.2.3", Some(BlockReason::Private)),
            ("172.16.0.1", Some(BlockReason::Private)),
            ("192.168.1.1", Some(BlockReason::Private)),
            ("100.100.100.200", Some(BlockReason::CarrierGradeNat)),
            ("169.254.169.254", Some(BlockReason::LinkLocal)),
            ("0.0.0.0", Some(BlockReason::Unspecified)),
            ("255.255.255.255", Some(BlockReason::Broadcast)),
            ("224.0.0.1", Some(BlockReason::Multicast)),
            ("::1", Some(BlockReason::Loopback)),
            ("::", Some(BlockReason::Unspecified)),
            ("fe80::1", Some(BlockReason::LinkLocal)),
            ("fd00:ec2::254", Some(BlockReason::UniqueLocal)),
            ("::ffff:127.0.0.1", Some(BlockReason::Loopback)),
            ("::ffff:169.254.169.254", Some(BlockReason::LinkLocal)),
            ("64:ff9b::a00:1", Some(BlockReason::Private)),
            ("2002:7f00:1::", Some(BlockReason::Loopback)),
            ("93.184.216.34", None),
            ("1.1.1.1", None),
            ("2606:4700:4700::1111", None),
        ];
        for (addr, want) in cases {
            assert_eq!(blocked_reason(ip(addr)), want, "{addr}");
        }
    }

    #[test]
    fn exceptions_by_name_address_and_network() {
        let policy = HostPolicy::new(
            false,
            &[
                "searx.lan".to_string(),
                "127.0.0.1".to_string(),
                "10.1.0.0/16".to_string(),
            ],
        );
        assert_eq!(policy.check("searx.lan", &[ip("192.168.1.5")]), Ok(()));
        assert_eq!(policy.check("localhost", &[ip("127.0.0.1")]), Ok(()));
        assert_eq!(policy.check("x", &[ip("10.1.9.9")]), Ok(()));
        assert_eq!(
            policy.check("evil.test", &[ip("8.8.8.8"), ip("10.2.0.1")]),
            Err(Blocked {
                host: "evil.test".into(),
                ip: ip("10.2.0.1"),
                reason: BlockReason::Private
            })
        );
        assert_eq!(
            policy
                .check("x", &[ip("::ffff:169.254.169.254")])
                .unwrap_err()
                .to_string(),
            "refused to connect to x: it resolves to 169.254.169.254 (link-local / cloud metadata address)"
        );
        assert_eq!(
            HostPolicy::new(true, &[]).check("x", &[ip("127.0.0.1")]),
            Ok(())
        );
    }
}
