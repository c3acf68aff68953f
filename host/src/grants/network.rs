//! The network half of a grant ConfigMap: its keys read into the
//! [`Grant`] that [`crate::outbound`] enforces.

use std::collections::BTreeMap;

use http::HeaderName;

use super::keys;
use crate::data_keys::{self, KeyError};
use crate::outbound::origin::{HostPattern, Origin, OriginPattern, PatternError};
use crate::outbound::{self, Credential, Grant};
use crate::quantity::{parse_bytes, parse_integer};

/// Whether a grant ConfigMap's `data` grants the network: it has a key
/// of that half, or nothing of the registries' half.
#[must_use]
pub fn grants_network(data: &BTreeMap<String, String>) -> bool {
    keys::NETWORK.iter().any(|key| data.contains_key(*key))
        || ![keys::REGISTRIES, keys::PULL_SECRET]
            .iter()
            .any(|key| data.contains_key(*key))
}

/// Reads a grant ConfigMap's `data`, naming the key of the first bad value.
pub fn parse(data: &BTreeMap<String, String>) -> Result<Grant, GrantError> {
    let text = data.get(keys::ORIGINS).ok_or(GrantError::NoOrigins)?;
    let origins = list(text)
        .map(OriginPattern::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| GrantError::Origin {
            key: keys::ORIGINS,
            source,
        })?;
    if origins.is_empty() {
        return Err(GrantError::NoOrigins);
    }
    let mut grant = Grant::to(origins);
    for entry in data_keys::entries(data) {
        let positive = |expected| {
            entry.parse(expected, |t| {
                parse_integer(t)
                    .filter(|n| *n > 0)
                    .and_then(|n| u32::try_from(n).ok())
            })
        };
        let bytes = |expected| entry.parse(expected, |t| parse_bytes(t).filter(|n| *n > 0));
        match entry.key {
            keys::ORIGINS | keys::DESCRIPTION | keys::REGISTRIES | keys::PULL_SECRET => {}
            keys::REQUESTS_PER_CALL => grant.requests_per_call = positive(COUNT_EXPECTED)?,
            keys::CONCURRENCY => grant.concurrency = positive(COUNT_EXPECTED)?,
            keys::REQUEST_BODY_BYTES => grant.request_body_bytes = bytes(BYTES_EXPECTED)?,
            keys::RESPONSE_BODY_BYTES => grant.response_body_bytes = bytes(BYTES_EXPECTED)?,
            keys::NETWORK_SHARE => {
                grant.network_percent = entry.parse(SHARE_EXPECTED, parse_percent)?;
            }
            keys::CREDENTIALS => {
                grant.credentials = parse_credentials(entry.text(), &grant.origins)?;
            }
            _ => return Err(entry.unknown(" in the grant", keys::ALL).into()),
        }
    }
    Ok(grant)
}

const COUNT_EXPECTED: &str = "a positive integer, such as 4";
const BYTES_EXPECTED: &str = "a positive byte quantity, such as 64Ki";
const SHARE_EXPECTED: &str = "a percentage from 1% to 100%, such as 50%";

/// Items separated by commas, spaces or newlines.
fn list(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|item| !item.is_empty())
}

/// `50%` or `50`, from 1 to 100.
fn parse_percent(text: &str) -> Option<u8> {
    let number = text.strip_suffix('%').unwrap_or(text).trim_end();
    parse_integer(number)
        .filter(|n| (1..=100).contains(n))
        .and_then(|n| u8::try_from(n).ok())
}

/// `ORIGIN HEADER SECRET/KEY` lines; blank lines and `#` comments skipped.
fn parse_credentials(text: &str, origins: &[OriginPattern]) -> Result<Vec<Credential>, GrantError> {
    let mut credentials: Vec<Credential> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |problem| GrantError::Credential {
            line: line.to_owned(),
            problem,
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [origin, header, reference] = fields[..] else {
            return Err(bad("a credential is ORIGIN HEADER SECRET/KEY"));
        };
        let origin = OriginPattern::parse(origin).map_err(|source| GrantError::Origin {
            key: keys::CREDENTIALS,
            source,
        })?;
        if !origin.is_single_origin() {
            return Err(bad(
                "a credential goes to one origin: no wildcard host or port",
            ));
        }
        if !origins.iter().any(|pattern| covers(pattern, &origin)) {
            return Err(bad("its origin is not one the grant's origins admit"));
        }
        let header = HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| bad("the header is not a valid HTTP header name"))?;
        if outbound::is_forbidden_header(&header) {
            return Err(bad("the host sets this header itself"));
        }
        let (secret, key) = reference
            .split_once('/')
            .ok_or_else(|| bad("the Secret is named as SECRET/KEY"))?;
        policyhost_names::dns1123_subdomain(secret)
            .map_err(|_| bad("the Secret's name is not a valid object name"))?;
        policyhost_names::config_map_key(key)
            .map_err(|_| bad("the key is not a valid Secret key"))?;
        if credentials
            .iter()
            .any(|c| c.origin == origin && c.header == header)
        {
            return Err(bad("a second credential for the same origin and header"));
        }
        credentials.push(Credential {
            origin,
            header,
            secret: secret.to_owned(),
            key: key.to_owned(),
        });
    }
    Ok(credentials)
}

/// Whether `pattern` admits the one origin `single` stands for.
fn covers(pattern: &OriginPattern, single: &OriginPattern) -> bool {
    let HostPattern::Exact(host) = &single.host else {
        return false;
    };
    single.port.is_some_and(|port| {
        pattern.admits(&Origin {
            scheme: single.scheme,
            host: host.clone(),
            port,
        })
    })
}

/// What is wrong with a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// No origins: a grant that admits nothing is a mistake.
    #[error(
        "`data.{}` is required: the origins the policy may reach, such as https://api.example.com (a grant of registries alone names `data.{}` and no network key)",
        keys::ORIGINS,
        keys::REGISTRIES
    )]
    NoOrigins,
    /// An origin pattern does not parse.
    #[error("`data.{key}`: {source}")]
    Origin {
        /// The key it is in.
        key: &'static str,
        /// What is wrong with it.
        source: PatternError,
    },
    /// A value does not parse or is out of range, or a key the host does
    /// not read (a typo would otherwise be ignored).
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A credential line is wrong.
    #[error("`data.{}` line `{line}`: {problem}", keys::CREDENTIALS)]
    Credential {
        /// The line.
        line: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::data_keys::data_of as data;

    fn error_of(pairs: &[(&str, &str)]) -> String {
        parse(&data(pairs)).unwrap_err().to_string()
    }

    #[test]
    fn every_key_parses_and_the_rest_keep_their_defaults() {
        let grant = parse(&data(&[
            (
                "origins",
                "https://api.example.com,\n https://*.example.com:8443",
            ),
            ("requestsPerCall", "3"),
            ("requestBodyBytes", "1Ki"),
            ("responseBodyBytes", "2Mi"),
            ("networkShare", "25%"),
            ("concurrency", "2"),
            (
                "credentials",
                "# the storage token\nhttps://api.example.com Authorization token/value\n",
            ),
            ("description", "storage for the ETL team"),
        ]))
        .unwrap();
        assert_eq!(grant.origins.len(), 2);
        assert_eq!(grant.requests_per_call, 3);
        assert_eq!(grant.request_body_bytes, 1 << 10);
        assert_eq!(grant.response_body_bytes, 2 << 20);
        assert_eq!(grant.network_percent, 25);
        assert_eq!(grant.concurrency, 2);
        assert_eq!(grant.credentials.len(), 1);
        assert_eq!(grant.credentials[0].header.as_str(), "authorization");
        assert_eq!(grant.secrets(), ["token"]);
        assert_eq!(
            grant.network_budget(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
        let defaults = parse(&data(&[("origins", "https://api.example.com")])).unwrap();
        assert_eq!(defaults, Grant::to(defaults.origins.clone()));
    }

    #[test]
    fn a_bad_grant_is_an_error_naming_the_key_and_the_problem() {
        assert!(error_of(&[]).contains("`data.origins` is required"));
        assert!(error_of(&[("origins", " , ")]).contains("`data.origins` is required"));
        assert!(
            error_of(&[("origins", "https://api.example.com/v1")])
                .contains("`data.origins`: `https://api.example.com/v1` is not an origin pattern: an origin has no path")
        );
        let origins = ("origins", "https://api.example.com");
        assert_eq!(
            error_of(&[origins, ("networkShare", "0%")]),
            "`data.networkShare` is `0%`; expected a percentage from 1% to 100%, such as 50%"
        );
        assert!(error_of(&[origins, ("concurrency", "0")]).contains("`data.concurrency` is `0`"));
        assert!(error_of(&[origins, ("responseBodyBytes", "1MB")]).contains("responseBodyBytes"));
        assert!(error_of(&[origins, ("origin", "x")]).contains("unknown key `data.origin`"));
    }

    #[test]
    fn a_credential_goes_to_one_granted_origin_from_a_named_secret() {
        let origins = ("origins", "https://api.example.com, https://*.example.com");
        let credential = |line| error_of(&[origins, ("credentials", line)]);
        assert!(
            credential("https://api.example.com authorization")
                .contains("ORIGIN HEADER SECRET/KEY")
        );
        assert!(credential("https://*.example.com authorization s/k").contains("one origin"));
        assert!(
            credential("https://other.net authorization s/k")
                .contains("not one the grant's origins admit")
        );
        assert!(credential("https://api.example.com bad\u{7f}header s/k").contains("header name"));
        assert!(credential("https://api.example.com host s/k").contains("sets this header itself"));
        assert!(credential("https://api.example.com authorization s").contains("SECRET/KEY"));
        assert!(
            credential("https://api.example.com authorization S_ecret/k").contains("Secret's name")
        );
        assert!(credential("https://api.example.com authorization s/k\nhttps://api.example.com Authorization t/k").contains("a second credential"));
        let below = parse(&data(&[
            origins,
            ("credentials", "https://eu.example.com x-token s/k"),
        ]))
        .unwrap();
        assert_eq!(below.credentials[0].secret, "s");
    }
}
