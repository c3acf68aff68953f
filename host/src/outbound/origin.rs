//! Origins: where a request goes (`scheme://host:port`), and the patterns a
//! grant lists (`https://api.example.com`, `https://*.example.com:8443`).
//!
//! A pattern is an origin and nothing more: no path, no user, no query, so
//! a grant says exactly which servers a policy may reach. Its host is a DNS
//! name, `*.` and a DNS name (any name below it, never the name itself), or
//! an IP literal; its port is a number, `*`, or the scheme's default. Names
//! compare without case and without a trailing dot, as DNS compares them.

use std::fmt;
use std::net::IpAddr;

/// `http` or `https`: the schemes a policy may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP: only where a grant names it.
    Http,
    /// HTTP over TLS, the certificate verified.
    Https,
}

impl Scheme {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "http" => Some(Self::Http),
            "https" => Some(Self::Https),
            _ => None,
        }
    }

    /// The port a URL without one means.
    #[must_use]
    pub fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }

    /// `http` or `https`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// The host of an origin: a DNS name (lowercase, no trailing dot) or an
/// IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Host {
    /// Reads a host as a URL writes it: a name, a dotted IPv4 address, or
    /// an IPv6 address in brackets.
    fn parse(text: &str) -> Option<Self> {
        if let Some(inner) = text.strip_prefix('[') {
            let v6 = inner
                .strip_suffix(']')?
                .parse::<std::net::Ipv6Addr>()
                .ok()?;
            return Some(Self::Ip(IpAddr::V6(v6)));
        }
        let name = text.strip_suffix('.').unwrap_or(text);
        if let Ok(v4) = name.parse::<std::net::Ipv4Addr>() {
            return Some(Self::Ip(IpAddr::V4(v4)));
        }
        // A resolver reads `127.1` or `0x7f.0.0.1` as an address: a host
        // whose last label is a number is an IPv4 address or nothing, as
        // the URL standard has it, never a name a wildcard could admit.
        if ends_in_a_number(name) {
            return None;
        }
        let name = name.to_ascii_lowercase();
        is_dns_name(&name).then_some(Self::Name(name))
    }
}

/// Whether the last label is decimal digits or `0x` and hex digits.
fn ends_in_a_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()),
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Self::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

/// A DNS name as a URL may carry it (once lowercased): a DNS-1123
/// subdomain whose labels are at most 63 bytes each. Internationalised
/// names are written in their ASCII form.
fn is_dns_name(name: &str) -> bool {
    policyhost_names::dns1123_subdomain(name).is_ok()
        && name.split('.').all(|label| label.len() <= 63)
}

/// Where one request goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// Its scheme.
    pub scheme: Scheme,
    /// Its host.
    pub host: Host,
    /// Its port (the scheme's default when the URL names none).
    pub port: u16,
}

impl Origin {
    /// The origin of a request's scheme and authority (`host[:port]`, as
    /// `wasi:http` carries it). `None` for anything else: a user part, an
    /// empty host, a port out of range.
    #[must_use]
    pub fn of(scheme: Scheme, authority: &str) -> Option<Self> {
        if authority.contains('@') {
            return None;
        }
        let (host, port) = split_port(authority)?;
        let port = match port {
            None => scheme.default_port(),
            Some(text) => parse_port(text)?,
        };
        Some(Self {
            scheme,
            host: Host::parse(host)?,
            port,
        })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

/// `host` and the text after its `:`, brackets of an IPv6 literal kept.
fn split_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Some((host, None)),
            _ => Some((host, Some(rest.strip_prefix(':')?))),
        };
    }
    Some(match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|port| *port != 0)
}

/// The hosts a pattern admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this host.
    Exact(Host),
    /// Any name below this one (`*.example.com`: `api.example.com`,
    /// `a.b.example.com`; not `example.com`).
    Below(String),
}

/// One origin pattern of a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginPattern {
    /// The scheme it admits.
    pub scheme: Scheme,
    /// The hosts it admits.
    pub host: HostPattern,
    /// The port it admits; `None` for any (`:*`).
    pub port: Option<u16>,
    /// The pattern as written, for messages.
    text: String,
}

/// Why an origin pattern does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an origin pattern: {problem}")]
pub struct PatternError {
    /// The pattern as written.
    pub text: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl OriginPattern {
    /// Reads `SCHEME://HOST[:PORT]`: scheme `http` or `https`; host a DNS
    /// name, `*.` and a DNS name, or an IP literal; port a number or `*`.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let error = |problem| PatternError {
            text: text.to_owned(),
            problem,
        };
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| error("it needs a scheme, such as https://"))?;
        let scheme =
            Scheme::parse(scheme).ok_or_else(|| error("the scheme is not http or https"))?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(error("an origin has no path, query or fragment"));
        }
        if authority.contains('@') {
            return Err(error("an origin has no user part"));
        }
        let (host, port) = split_port(authority).ok_or_else(|| error("the host is malformed"))?;
        let port = match port {
            None => Some(scheme.default_port()),
            Some("*") => None,
            Some(text) => {
                Some(parse_port(text).ok_or_else(|| error("the port is not 1-65535 or *"))?)
            }
        };
        let host = match host.strip_prefix("*.") {
            Some(suffix) => match Host::parse(suffix) {
                Some(Host::Name(name)) if name.contains('.') => HostPattern::Below(name),
                Some(Host::Name(_)) => {
                    return Err(error(
                        "a wildcard needs a name with a dot below it, such as *.example.com",
                    ));
                }
                _ => return Err(error("a wildcard stands for DNS names, not addresses")),
            },
            None if host.contains('*') => {
                return Err(error("`*` may only stand first, as `*.` before a name"));
            }
            None => HostPattern::Exact(
                Host::parse(host)
                    .ok_or_else(|| error("the host is not a DNS name or an IP address"))?,
            ),
        };
        Ok(Self {
            scheme,
            host,
            port,
            text: text.to_owned(),
        })
    }

    /// Whether `origin` is one this pattern admits.
    #[must_use]
    pub fn admits(&self, origin: &Origin) -> bool {
        self.scheme == origin.scheme
            && self.port.is_none_or(|port| port == origin.port)
            && match (&self.host, &origin.host) {
                (HostPattern::Exact(host), other) => host == other,
                (HostPattern::Below(suffix), Host::Name(name)) => name
                    .strip_suffix(suffix.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                (HostPattern::Below(_), Host::Ip(_)) => false,
            }
    }

    /// Whether this pattern names `ip` itself: the only way a grant lets a
    /// policy reach a loopback, link-local or private address.
    #[must_use]
    pub fn names_address(&self, ip: IpAddr) -> bool {
        self.host == HostPattern::Exact(Host::Ip(ip))
    }

    /// Whether the pattern stands for one origin (no wildcard host or port).
    #[must_use]
    pub fn is_single_origin(&self) -> bool {
        matches!(self.host, HostPattern::Exact(_)) && self.port.is_some()
    }

    /// The pattern as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for OriginPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(scheme: Scheme, authority: &str) -> Origin {
        Origin::of(scheme, authority).unwrap()
    }

    fn admits(pattern: &str, scheme: Scheme, authority: &str) -> bool {
        OriginPattern::parse(pattern)
            .unwrap()
            .admits(&origin(scheme, authority))
    }

    #[test]
    fn an_exact_pattern_admits_its_origin_only() {
        use Scheme::{Http, Https};
        assert!(admits("https://api.example.com", Https, "api.example.com"));
        assert!(admits("https://api.example.com", Https, "API.Example.com."));
        assert!(admits(
            "https://api.example.com",
            Https,
            "api.example.com:443"
        ));
        assert!(!admits(
            "https://api.example.com",
            Https,
            "api.example.com:8443"
        ));
        assert!(!admits("https://api.example.com", Http, "api.example.com"));
        assert!(!admits(
            "https://api.example.com",
            Https,
            "api.example.com.evil.net"
        ));
        assert!(!admits(
            "https://api.example.com",
            Https,
            "evilapi.example.com"
        ));
        assert!(admits(
            "http://api.example.com:8080/",
            Http,
            "api.example.com:8080"
        ));
    }

    #[test]
    fn a_wildcard_admits_names_below_it_and_not_the_name_itself() {
        use Scheme::Https;
        let pattern = "https://*.example.com:8443";
        assert!(admits(pattern, Https, "a.example.com:8443"));
        assert!(admits(pattern, Https, "a.b.example.com:8443"));
        assert!(!admits(pattern, Https, "example.com:8443"));
        assert!(!admits(pattern, Https, "aexample.com:8443"));
        assert!(!admits(pattern, Https, "a.example.com"));
        assert!(admits("https://*.example.com:*", Https, "a.example.com:1"));
    }

    #[test]
    fn addresses_are_admitted_only_by_patterns_that_name_them() {
        use Scheme::Http;
        let pattern = OriginPattern::parse("http://127.0.0.1:8080").unwrap();
        assert!(pattern.admits(&origin(Http, "127.0.0.1:8080")));
        assert!(pattern.names_address("127.0.0.1".parse().unwrap()));
        assert!(!pattern.names_address("127.0.0.2".parse().unwrap()));
        assert!(admits("http://[::1]:80", Http, "[::1]"));
        assert!(!admits("http://localhost:8080", Http, "127.0.0.1:8080"));
        let name = OriginPattern::parse("http://localhost:8080").unwrap();
        assert!(!name.names_address("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn malformed_patterns_are_refused_with_their_problem() {
        for (text, problem) in [
            ("api.example.com", "it needs a scheme"),
            ("ftp://api.example.com", "not http or https"),
            ("https://api.example.com/v1", "no path"),
            ("https://user@api.example.com", "no user part"),
            ("https://api.example.com:0", "the port"),
            ("https://api.example.com:99999", "the port"),
            ("https://*.com", "a dot below it"),
            ("https://*.10.0.0.1", "not addresses"),
            ("https://api.*.com", "may only stand first"),
            ("https://*", "may only stand first"),
            ("https://exa_mple.com", "not a DNS name"),
            ("https://[::1", "malformed"),
        ] {
            let error = OriginPattern::parse(text).unwrap_err();
            assert!(error.to_string().contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn a_host_ending_in_a_number_is_an_address_or_nothing() {
        use Scheme::Https;
        // Found by the fuzz target: with its trailing dot, an address was
        // read as a name, which a wildcard such as `*.0.0.1` admitted.
        assert_eq!(
            origin(Https, "7.0.0.0.").host,
            origin(Https, "7.0.0.0").host
        );
        assert!(!admits("https://*.example.com", Https, "127.0.0.1."));
        for host in [
            "127.1",
            "0x7f.0.0.1",
            "10.0.0.0x1",
            "api.example.1",
            "1.2.3.4.5",
        ] {
            assert_eq!(Origin::of(Https, host), None, "{host}");
        }
        let error = OriginPattern::parse("https://*.0.0.1").unwrap_err();
        assert!(error.to_string().contains("not addresses"), "{error}");
        assert!(origin(Https, "api.example.com1").host == Host::Name("api.example.com1".into()));
        assert!(origin(Https, "0x.example.com").host == Host::Name("0x.example.com".into()));
    }

    #[test]
    fn a_request_authority_with_a_user_part_or_a_bad_port_has_no_origin() {
        assert_eq!(Origin::of(Scheme::Https, "user@api.example.com"), None);
        assert_eq!(Origin::of(Scheme::Https, "api.example.com:x"), None);
        assert_eq!(Origin::of(Scheme::Https, ""), None);
        assert_eq!(
            origin(Scheme::Https, "[::1]:8443").to_string(),
            "https://[::1]:8443"
        );
    }
}
