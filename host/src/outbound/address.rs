//! Which addresses a policy may connect to.
//!
//! An allowed name is no promise about where it leads: DNS may answer with
//! 127.0.0.1, the cloud's metadata service (169.254.169.254) or a pod on the
//! cluster network. So the host checks the address it is about to connect
//! to, after resolution, and refuses every address of the ranges below
//! unless the grant names that very address (`http://10.0.0.7:8080`).
//! Addresses that embed an IPv4 address (IPv4-mapped, NAT64, 6to4) are
//! judged by the address they embed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A range of addresses a policy may not reach unless its grant names the
/// address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Restricted {
    /// 127.0.0.0/8, ::1: the host itself.
    Loopback,
    /// 169.254.0.0/16, fe80::/10: the link, and cloud metadata services.
    LinkLocal,
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16: private networks, the
    /// cluster's among them.
    Private,
    /// 100.64.0.0/10: carrier-grade NAT, used by some cluster networks.
    SharedAddressSpace,
    /// fc00::/7.
    UniqueLocal,
    /// 0.0.0.0/8, ::: "this host" to many stacks.
    Unspecified,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 240.0.0.0/4 and the broadcast address.
    Reserved,
}

impl Restricted {
    /// The range an address is in, if it is restricted.
    #[must_use]
    pub fn of(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(v4) => Self::of_v4(v4),
            IpAddr::V6(v6) => match embedded_v4(v6) {
                Some(v4) => Self::of_v4(v4),
                None => Self::of_v6(v6),
            },
        }
    }

    fn of_v4(ip: Ipv4Addr) -> Option<Self> {
        let [a, b, ..] = ip.octets();
        Some(match (a, b) {
            (127, _) => Self::Loopback,
            (169, 254) => Self::LinkLocal,
            (10, _) | (192, 168) => Self::Private,
            (172, b) if (16..32).contains(&b) => Self::Private,
            (100, b) if (64..128).contains(&b) => Self::SharedAddressSpace,
            (0, _) => Self::Unspecified,
            (224..=239, _) => Self::Multicast,
            (240..=255, _) => Self::Reserved,
            _ => return None,
        })
    }

    fn of_v6(ip: Ipv6Addr) -> Option<Self> {
        let first = ip.segments()[0];
        Some(if ip.is_loopback() {
            Self::Loopback
        } else if ip.is_unspecified() {
            Self::Unspecified
        } else if first & 0xffc0 == 0xfe80 {
            Self::LinkLocal
        } else if first & 0xfe00 == 0xfc00 {
            Self::UniqueLocal
        } else if first & 0xff00 == 0xff00 {
            Self::Multicast
        } else {
            return None;
        })
    }

    /// The range's name, for messages and metric labels.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::LinkLocal => "link-local",
            Self::Private => "private",
            Self::SharedAddressSpace => "shared address space",
            Self::UniqueLocal => "unique-local",
            Self::Unspecified => "unspecified",
            Self::Multicast => "multicast",
            Self::Reserved => "reserved",
        }
    }
}

impl fmt::Display for Restricted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), NAT64
/// (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let from = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s {
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(from(hi, lo)),
        [0x2002, hi, lo, ..] => Some(from(hi, lo)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Option<Restricted> {
        Restricted::of(text.parse().unwrap())
    }

    #[test]
    fn the_host_the_link_and_private_networks_are_restricted() {
        use Restricted::*;
        for (address, range) in [
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("::1", Loopback),
            ("169.254.169.254", LinkLocal),
            ("fe80::1", LinkLocal),
            ("10.1.2.3", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("100.64.0.1", SharedAddressSpace),
            ("fd00::1", UniqueLocal),
            ("fc00::1", UniqueLocal),
            ("0.0.0.0", Unspecified),
            ("::", Unspecified),
            ("224.0.0.1", Multicast),
            ("ff02::1", Multicast),
            ("255.255.255.255", Reserved),
        ] {
            assert_eq!(of(address), Some(range), "{address}");
        }
    }

    #[test]
    fn public_addresses_are_not_restricted() {
        for address in [
            "93.184.216.34",
            "172.32.0.1",
            "172.15.255.255",
            "100.128.0.1",
            "8.8.8.8",
            "2606:2800:220:1::1",
            "fec0::1",
        ] {
            assert_eq!(of(address), None, "{address}");
        }
    }

    #[test]
    fn an_embedded_ipv4_address_is_judged_by_itself() {
        assert_eq!(of("::ffff:127.0.0.1"), Some(Restricted::Loopback));
        assert_eq!(of("::ffff:169.254.169.254"), Some(Restricted::LinkLocal));
        assert_eq!(of("64:ff9b::10.0.0.1"), Some(Restricted::Private));
        assert_eq!(of("2002:7f00:1::"), Some(Restricted::Loopback));
        assert_eq!(of("::ffff:8.8.8.8"), None);
    }
}
