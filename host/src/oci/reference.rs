//! References to OCI artifacts as a policy ConfigMap names them
//! (`REGISTRY/REPOSITORY@sha256:DIGEST`), and the repository prefixes a
//! grant allows them under.
//!
//! The grammar is docker's, made stricter: there is no default registry, so
//! a reference always says which host the operator will contact, and a
//! grant's prefixes compare with it by whole components.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::runtime::Digest;

/// The longest `REGISTRY/REPOSITORY`, as docker's `NameTotalLengthMax`. It
/// bounds the name, not the whole reference, so that a name that parses
/// still parses once [`Reference::with_digest`] pins it.
const NAME_MAX: usize = 255;
/// The longest tag.
const TAG_MAX: usize = 128;
/// The longest DNS label.
const LABEL_MAX: usize = 63;
/// The one digest algorithm a reference may name: the host knows components
/// by their SHA-256 only.
const SHA256: &str = "sha256";

/// Why a reference or a repository prefix does not parse. Each message
/// quotes what was written and says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Nothing was written.
    #[error(
        "the reference is empty: write REGISTRY/REPOSITORY@sha256:DIGEST, such as registry.example.com/team-a/fanout@sha256:…"
    )]
    Empty,
    /// A space, tab or newline: a reference is one word.
    #[error("`{input}` contains whitespace: a reference is one word")]
    Whitespace {
        /// What was written.
        input: String,
    },
    /// A URL rather than a reference (`https://…`).
    #[error(
        "`{input}` starts with a scheme: drop `{scheme}://` and write REGISTRY/REPOSITORY, such as registry.example.com/team-a/fanout"
    )]
    Scheme {
        /// What was written.
        input: String,
        /// The scheme, without `://`.
        scheme: String,
    },
    /// The first component is not a registry host: there is no default
    /// registry (docker's implicit `docker.io`), so `team-a/fanout` is refused.
    #[error(
        "`{input}` names no registry: write REGISTRY/REPOSITORY@sha256:DIGEST, such as registry.example.com/team-a/fanout@sha256:… (the registry is the first component and has a `.` or a port, or is `localhost`)"
    )]
    NoRegistry {
        /// What was written.
        input: String,
    },
    /// A registry without a repository.
    #[error(
        "`{input}` names a registry but no repository: write REGISTRY/REPOSITORY, such as registry.example.com/team-a/fanout"
    )]
    NoRepository {
        /// What was written.
        input: String,
    },
    /// The registry's host is not a DNS name, an IPv4 address or `[IPv6]`.
    #[error(
        "`{input}`: the registry host `{host}` is not a DNS name, an IPv4 address or a bracketed [IPv6] address"
    )]
    Host {
        /// What was written.
        input: String,
        /// The host, without the port.
        host: String,
    },
    /// The registry's port is not a number from 1 to 65535.
    #[error("`{input}`: the registry port `{port}` is not a number from 1 to 65535")]
    Port {
        /// What was written.
        input: String,
        /// The port as written.
        port: String,
    },
    /// A repository component is not lowercase letters and digits joined by
    /// separators (or is empty: `a//b`).
    #[error(
        "`{input}`: the repository component `{component}` is not lowercase letters and digits joined by `.`, `_`, `__` or dashes"
    )]
    Repository {
        /// What was written.
        input: String,
        /// The component.
        component: String,
    },
    /// `REGISTRY/REPOSITORY` is longer than a registry accepts.
    #[error("`{input}`: REGISTRY/REPOSITORY is {length} characters, more than {NAME_MAX}")]
    TooLong {
        /// What was written.
        input: String,
        /// The length of `REGISTRY/REPOSITORY`.
        length: usize,
    },
    /// The tag is not 1 to 128 word characters, dots and dashes.
    #[error(
        "`{input}`: the tag `{tag}` is not 1 to {TAG_MAX} letters, digits, `_`, `.` or `-` starting with a letter, digit or `_`"
    )]
    Tag {
        /// What was written.
        input: String,
        /// The tag.
        tag: String,
    },
    /// A digest algorithm other than SHA-256.
    #[error("`{input}`: the digest algorithm `{algorithm}` is not supported: write @sha256:DIGEST")]
    Algorithm {
        /// What was written.
        input: String,
        /// The algorithm.
        algorithm: String,
    },
    /// A SHA-256 digest that is not 64 lowercase hex digits.
    #[error("`{input}`: the digest is not `sha256:` and 64 lowercase hex digits")]
    Digest {
        /// What was written.
        input: String,
    },
    /// A repository prefix with a tag or a digest: a prefix names
    /// repositories, not artifacts.
    #[error(
        "`{input}` is a repository prefix and names no tag or digest: write REGISTRY, REGISTRY/REPOSITORY or REGISTRY/REPOSITORY/"
    )]
    Versioned {
        /// What was written.
        input: String,
    },
}

/// An OCI artifact: `REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`, parsed with
/// [`str::parse`] and written back in the same form by `Display`.
///
/// A reference without a tag or digest means the tag `latest`, as docker's;
/// a reference with a digest is pinned: the registry cannot move it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

impl Reference {
    /// The registry, `host[:port]`, as written.
    #[must_use]
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository within the registry, such as `team-a/fanout`.
    #[must_use]
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, if one was written.
    #[must_use]
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The manifest's digest, if one was written.
    #[must_use]
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// Whether a digest names the artifact, so that the registry cannot
    /// change what it resolves to.
    #[must_use]
    pub fn is_pinned(&self) -> bool {
        self.digest.is_some()
    }

    /// The same repository pinned by `digest`, without the tag: the form a
    /// ConfigMap records, which says exactly what was pulled.
    #[must_use]
    pub fn with_digest(&self, digest: Digest) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest),
        }
    }

    /// Whether the repository is under `prefix`: the same registry (in any
    /// case, as DNS compares), and the prefix's repository components as
    /// the first of its own.
    #[must_use]
    pub fn within(&self, prefix: &Prefix) -> bool {
        if !self.registry.eq_ignore_ascii_case(&prefix.registry) {
            return false;
        }
        if prefix.repository.is_empty() {
            return true;
        }
        match self.repository.strip_prefix(prefix.repository.as_str()) {
            Some("") => !prefix.below,
            Some(rest) => rest.starts_with('/'),
            None => false,
        }
    }
}

impl FromStr for Reference {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, ParseError> {
        check_word(input)?;
        let (rest, digest) = match input.split_once('@') {
            Some((rest, digest)) => (rest, Some(parse_digest(input, digest)?)),
            None => (input, None),
        };
        let (name, tag) = split_tag(rest);
        let Some((registry, repository)) = name.split_once('/') else {
            return Err(if is_registry_like(name) {
                ParseError::NoRepository {
                    input: input.to_owned(),
                }
            } else {
                ParseError::NoRegistry {
                    input: input.to_owned(),
                }
            });
        };
        check_registry(input, registry)?;
        if repository.is_empty() {
            return Err(ParseError::NoRepository {
                input: input.to_owned(),
            });
        }
        check_repository(input, repository)?;
        check_length(input, name)?;
        if let Some(tag) = tag {
            check_tag(input, tag)?;
        }
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{SHA256}:{digest}")?;
        }
        Ok(())
    }
}

/// Where a grant allows artifacts to come from, as a platform team writes
/// it: `REGISTRY` (the whole registry), `REGISTRY/REPOSITORY` (that
/// repository and those below it) or `REGISTRY/REPOSITORY/` (only those
/// below it). See [`Reference::within`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Prefix {
    registry: String,
    /// Empty for the whole registry.
    repository: String,
    /// Written with a trailing `/`: the repository itself is not admitted.
    below: bool,
}

impl Prefix {
    /// The registry, `host[:port]`, as written.
    #[must_use]
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository prefix, without a trailing `/`; empty for the whole
    /// registry.
    #[must_use]
    pub fn repository(&self) -> &str {
        &self.repository
    }
}

impl FromStr for Prefix {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, ParseError> {
        check_word(input)?;
        let name = input.strip_suffix('/');
        let below = name.is_some();
        let name = name.unwrap_or(input);
        let (registry, repository) = name.split_once('/').unwrap_or((name, ""));
        if input.contains('@') || repository.contains(':') {
            return Err(ParseError::Versioned {
                input: input.to_owned(),
            });
        }
        check_registry(input, registry)?;
        if name.len() > registry.len() {
            // `REGISTRY//` leaves an empty component, refused here.
            check_repository(input, repository)?;
        }
        check_length(input, name)?;
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            below,
        })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.registry)?;
        if !self.repository.is_empty() {
            write!(f, "/{}", self.repository)?;
        }
        if self.below {
            f.write_str("/")?;
        }
        Ok(())
    }
}

/// Refuses what cannot be a reference at all: nothing, whitespace, a URL.
fn check_word(input: &str) -> Result<(), ParseError> {
    if input.is_empty() {
        return Err(ParseError::Empty);
    }
    if input.chars().any(char::is_whitespace) {
        return Err(ParseError::Whitespace {
            input: input.to_owned(),
        });
    }
    if let Some((scheme, _)) = input.split_once("://") {
        return Err(ParseError::Scheme {
            input: input.to_owned(),
            scheme: scheme.to_owned(),
        });
    }
    Ok(())
}

/// `NAME[:TAG]` split as docker splits it: a `:` after the last `/` starts
/// the tag (one before it is the registry's port).
fn split_tag(rest: &str) -> (&str, Option<&str>) {
    match rest.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, Some(tag)),
        _ => (rest, None),
    }
}

/// Whether the first component is meant as a registry, by docker's rule
/// without its default: it has a `.` or a `:`, or is `localhost`.
fn is_registry_like(component: &str) -> bool {
    component.contains(['.', ':']) || component.eq_ignore_ascii_case("localhost")
}

/// Checks `host[:port]`, where the host is a DNS name, IPv4 or `[IPv6]`.
fn check_registry(input: &str, registry: &str) -> Result<(), ParseError> {
    if !is_registry_like(registry) {
        return Err(ParseError::NoRegistry {
            input: input.to_owned(),
        });
    }
    let bad_host = |host: &str| ParseError::Host {
        input: input.to_owned(),
        host: host.to_owned(),
    };
    let port = if let Some(bracketed) = registry.strip_prefix('[') {
        let Some((address, after)) = bracketed.split_once(']') else {
            return Err(bad_host(registry));
        };
        if address.parse::<Ipv6Addr>().is_err() {
            return Err(bad_host(&format!("[{address}]")));
        }
        match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(|| bad_host(registry))?),
        }
    } else {
        let (host, port) = match registry.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (registry, None),
        };
        if !is_host(host) {
            return Err(bad_host(host));
        }
        port
    };
    match port {
        Some(port) if !is_port(port) => Err(ParseError::Port {
            input: input.to_owned(),
            port: port.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// A DNS name or an IPv4 address. All digits and dots must be an IPv4
/// address: `999.1.1.1` is a mistake, not a name.
fn is_host(host: &str) -> bool {
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return host.parse::<Ipv4Addr>().is_ok();
    }
    host.split('.').all(|label| {
        let bytes = label.as_bytes();
        matches!(
            (bytes.first(), bytes.last()),
            (Some(first), Some(last)) if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric()
        ) && bytes.len() <= LABEL_MAX
            && bytes.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    })
}

/// Digits only (Rust's parser would take `+5`), 1 to 65535.
fn is_port(port: &str) -> bool {
    !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|port| port != 0)
}

/// Checks every `/`-separated component of a repository.
fn check_repository(input: &str, repository: &str) -> Result<(), ParseError> {
    match repository.split('/').find(|c| !is_component(c)) {
        Some(component) => Err(ParseError::Repository {
            input: input.to_owned(),
            component: component.to_owned(),
        }),
        None => Ok(()),
    }
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn is_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alphanumeric = |i: usize| {
        bytes
            .get(i)
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let mut i = 0;
    loop {
        let start = i;
        while alphanumeric(i) {
            i += 1;
        }
        if i == start {
            return false;
        }
        match bytes.get(i) {
            None => return true,
            Some(b'.') => i += 1,
            Some(b'_') => {
                i += if bytes.get(i + 1) == Some(&b'_') {
                    2
                } else {
                    1
                }
            }
            Some(b'-') => {
                while bytes.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            Some(_) => return false,
        }
    }
}

fn check_length(input: &str, name: &str) -> Result<(), ParseError> {
    if name.len() > NAME_MAX {
        return Err(ParseError::TooLong {
            input: input.to_owned(),
            length: name.len(),
        });
    }
    Ok(())
}

/// `[\w][\w.-]{0,127}`.
fn check_tag(input: &str, tag: &str) -> Result<(), ParseError> {
    let word = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let bytes = tag.as_bytes();
    let ok = bytes.len() <= TAG_MAX
        && bytes.first().is_some_and(word)
        && bytes.iter().all(|b| word(b) || *b == b'.' || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ParseError::Tag {
            input: input.to_owned(),
            tag: tag.to_owned(),
        })
    }
}

/// `sha256:` and 64 lowercase hex digits (uppercase is refused, as the OCI
/// spec's encoded form of sha256 is lowercase).
fn parse_digest(input: &str, text: &str) -> Result<Digest, ParseError> {
    let malformed = || ParseError::Digest {
        input: input.to_owned(),
    };
    let (algorithm, encoded) = text.split_once(':').ok_or_else(malformed)?;
    if algorithm != SHA256 {
        return Err(ParseError::Algorithm {
            input: input.to_owned(),
            algorithm: algorithm.to_owned(),
        });
    }
    if encoded.len() != 64
        || !encoded
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(malformed());
    }
    let mut bytes = [0; 32];
    hex::decode_to_slice(encoded, &mut bytes).map_err(|_| malformed())?;
    Ok(Digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn digest() -> Digest {
        let mut bytes = [0; 32];
        hex::decode_to_slice(HEX, &mut bytes).expect("hex");
        Digest(bytes)
    }

    fn reference(text: &str) -> Reference {
        text.parse()
            .unwrap_or_else(|e| panic!("{text} should parse: {e}"))
    }

    #[test]
    fn good_references_parse_into_their_parts_and_print_back() {
        let long_tag = "t".repeat(TAG_MAX);
        // REGISTRY/REPOSITORY of exactly NAME_MAX characters.
        let longest = format!("r.example.com/{}", "a".repeat(NAME_MAX - 14));
        let cases: &[(String, &str, &str, Option<&str>, bool)] = &[
            (
                format!("registry.example.com/team-a/fanout@sha256:{HEX}"),
                "registry.example.com",
                "team-a/fanout",
                None,
                true,
            ),
            (
                "registry.example.com:5000/team-a/fanout:1.2.3".into(),
                "registry.example.com:5000",
                "team-a/fanout",
                Some("1.2.3"),
                false,
            ),
            (
                format!("registry.example.com/fanout:v1@sha256:{HEX}"),
                "registry.example.com",
                "fanout",
                Some("v1"),
                true,
            ),
            (
                "localhost/fanout:latest".into(),
                "localhost",
                "fanout",
                Some("latest"),
                false,
            ),
            (
                "localhost:5000/a/b/c".into(),
                "localhost:5000",
                "a/b/c",
                None,
                false,
            ),
            (
                format!("127.0.0.1:5000/x@sha256:{HEX}"),
                "127.0.0.1:5000",
                "x",
                None,
                true,
            ),
            (
                "[::1]:5000/x:v1".into(),
                "[::1]:5000",
                "x",
                Some("v1"),
                false,
            ),
            ("[fe80::1]/x".into(), "[fe80::1]", "x", None, false),
            (
                "Registry.Example.COM/x".into(),
                "Registry.Example.COM",
                "x",
                None,
                false,
            ),
            (
                "r-1.example.com/a.b/c__d/e---f/g_h:_T-1.x".into(),
                "r-1.example.com",
                "a.b/c__d/e---f/g_h",
                Some("_T-1.x"),
                false,
            ),
            (
                "r.example.com:65535/x".into(),
                "r.example.com:65535",
                "x",
                None,
                false,
            ),
            (
                format!("r.example.com/x:{long_tag}"),
                "r.example.com",
                "x",
                Some(long_tag.as_str()),
                false,
            ),
            (
                longest.clone(),
                "r.example.com",
                &longest[14..],
                None,
                false,
            ),
        ];
        for (text, registry, repository, tag, pinned) in cases {
            let parsed = reference(text);
            assert_eq!(parsed.registry(), *registry, "{text}");
            assert_eq!(parsed.repository(), *repository, "{text}");
            assert_eq!(parsed.tag(), *tag, "{text}");
            assert_eq!(parsed.is_pinned(), *pinned, "{text}");
            assert_eq!(parsed.digest().copied(), pinned.then(digest), "{text}");
            assert_eq!(parsed.to_string(), *text, "Display writes the input back");
            assert_eq!(reference(&parsed.to_string()), parsed, "{text}");
        }
    }

    #[test]
    fn bad_references_are_refused_with_the_problem_and_the_input_named() {
        type Check = fn(&ParseError) -> bool;
        let long = format!("r.example.com/{}", "a".repeat(NAME_MAX - 13));
        let long_tag = format!("r.example.com/x:{}", "t".repeat(TAG_MAX + 1));
        let cases: &[(&str, Check)] = &[
            ("", |e| matches!(e, ParseError::Empty)),
            ("registry.example.com/team a/x", |e| {
                matches!(e, ParseError::Whitespace { .. })
            }),
            ("registry.example.com/x\n", |e| {
                matches!(e, ParseError::Whitespace { .. })
            }),
            (
                "https://registry.example.com/team-a/fanout",
                |e| matches!(e, ParseError::Scheme { scheme, .. } if scheme == "https"),
            ),
            (
                "oci://registry.example.com/x",
                |e| matches!(e, ParseError::Scheme { scheme, .. } if scheme == "oci"),
            ),
            ("team-a/fanout:1", |e| {
                matches!(e, ParseError::NoRegistry { .. })
            }),
            ("team-a/fanout", |e| {
                matches!(e, ParseError::NoRegistry { .. })
            }),
            ("foo", |e| matches!(e, ParseError::NoRegistry { .. })),
            ("fanout:1", |e| matches!(e, ParseError::NoRegistry { .. })),
            ("Team-A/fanout", |e| {
                matches!(e, ParseError::NoRegistry { .. })
            }),
            ("registry.example.com", |e| {
                matches!(e, ParseError::NoRepository { .. })
            }),
            ("registry.example.com/", |e| {
                matches!(e, ParseError::NoRepository { .. })
            }),
            ("localhost:5000", |e| {
                matches!(e, ParseError::NoRepository { .. })
            }),
            (
                "-bad.example.com/x",
                |e| matches!(e, ParseError::Host { host, .. } if host == "-bad.example.com"),
            ),
            ("bad-.example.com/x", |e| {
                matches!(e, ParseError::Host { .. })
            }),
            ("bad_host.example.com/x", |e| {
                matches!(e, ParseError::Host { .. })
            }),
            ("r..example.com/x", |e| matches!(e, ParseError::Host { .. })),
            (
                "999.1.1.1/x",
                |e| matches!(e, ParseError::Host { host, .. } if host == "999.1.1.1"),
            ),
            (
                "[::zz]:5000/x",
                |e| matches!(e, ParseError::Host { host, .. } if host == "[::zz]"),
            ),
            ("[::1/x", |e| matches!(e, ParseError::Host { .. })),
            ("[::1]5000/x", |e| matches!(e, ParseError::Host { .. })),
            (
                "r.example.com:0/x",
                |e| matches!(e, ParseError::Port { port, .. } if port == "0"),
            ),
            ("r.example.com:65536/x", |e| {
                matches!(e, ParseError::Port { .. })
            }),
            ("r.example.com:+5/x", |e| {
                matches!(e, ParseError::Port { .. })
            }),
            (
                "r.example.com:/x",
                |e| matches!(e, ParseError::Port { port, .. } if port.is_empty()),
            ),
            ("r.example.com:http/x", |e| {
                matches!(e, ParseError::Port { .. })
            }),
            (
                "r.example.com/Team-A/x",
                |e| matches!(e, ParseError::Repository { component, .. } if component == "Team-A"),
            ),
            (
                "r.example.com/a//b",
                |e| matches!(e, ParseError::Repository { component, .. } if component.is_empty()),
            ),
            ("r.example.com/a/", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("r.example.com/a-/b", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("r.example.com/-a", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("r.example.com/a___b", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("r.example.com/a..b", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("r.example.com/a.-b", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("r.example.com/é", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            (
                &long,
                |e| matches!(e, ParseError::TooLong { length, .. } if *length == NAME_MAX + 1),
            ),
            (
                "r.example.com/x:",
                |e| matches!(e, ParseError::Tag { tag, .. } if tag.is_empty()),
            ),
            ("r.example.com/x:.v1", |e| {
                matches!(e, ParseError::Tag { .. })
            }),
            ("r.example.com/x:v+1", |e| {
                matches!(e, ParseError::Tag { .. })
            }),
            (&long_tag, |e| matches!(e, ParseError::Tag { .. })),
            (
                "r.example.com/x@sha512:abcd",
                |e| matches!(e, ParseError::Algorithm { algorithm, .. } if algorithm == "sha512"),
            ),
            ("r.example.com/x@SHA256:abcd", |e| {
                matches!(e, ParseError::Algorithm { .. })
            }),
            ("r.example.com/x@sha256:0123", |e| {
                matches!(e, ParseError::Digest { .. })
            }),
            ("r.example.com/x@0123", |e| {
                matches!(e, ParseError::Digest { .. })
            }),
            (
                "r.example.com/x@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
                |e| matches!(e, ParseError::Digest { .. }),
            ),
            (
                "r.example.com/x@sha256:0123456789abcdeg0123456789abcdef0123456789abcdef0123456789abcdef",
                |e| matches!(e, ParseError::Digest { .. }),
            ),
        ];
        for (text, check) in cases {
            let error = text
                .parse::<Reference>()
                .expect_err(&format!("{text:?} should be refused"));
            assert!(check(&error), "{text:?}: {error:?}");
            let message = error.to_string();
            if !text.is_empty() {
                assert!(
                    message.contains(&format!("`{text}`")),
                    "{message} names {text:?}"
                );
            }
        }
    }

    #[test]
    fn error_messages_say_what_to_write() {
        let error = "foo".parse::<Reference>().expect_err("no registry");
        assert_eq!(
            error.to_string(),
            "`foo` names no registry: write REGISTRY/REPOSITORY@sha256:DIGEST, such as registry.example.com/team-a/fanout@sha256:… (the registry is the first component and has a `.` or a port, or is `localhost`)"
        );
        let error = "https://r.example.com/x"
            .parse::<Reference>()
            .expect_err("a URL");
        assert_eq!(
            error.to_string(),
            "`https://r.example.com/x` starts with a scheme: drop `https://` and write REGISTRY/REPOSITORY, such as registry.example.com/team-a/fanout"
        );
        let error = "r.example.com/x@sha512:ab"
            .parse::<Reference>()
            .expect_err("sha512");
        assert_eq!(
            error.to_string(),
            "`r.example.com/x@sha512:ab`: the digest algorithm `sha512` is not supported: write @sha256:DIGEST"
        );
        assert_eq!(
            "".parse::<Reference>().expect_err("empty").to_string(),
            "the reference is empty: write REGISTRY/REPOSITORY@sha256:DIGEST, such as registry.example.com/team-a/fanout@sha256:…"
        );
    }

    #[test]
    fn with_digest_pins_the_reference_and_drops_the_tag() {
        let tagged = reference("registry.example.com:5000/team-a/fanout:1.0");
        assert!(!tagged.is_pinned());
        let pinned = tagged.with_digest(digest());
        assert!(pinned.is_pinned());
        assert_eq!(pinned.tag(), None);
        assert_eq!(pinned.digest(), Some(&digest()));
        assert_eq!(
            pinned.to_string(),
            format!("registry.example.com:5000/team-a/fanout@sha256:{HEX}")
        );
        assert_eq!(reference(&pinned.to_string()), pinned);
    }

    #[test]
    fn a_longest_name_still_parses_once_pinned() {
        let longest = reference(&format!("r.example.com/{}:v1", "a".repeat(NAME_MAX - 14)));
        let pinned = longest.with_digest(digest());
        assert_eq!(reference(&pinned.to_string()), pinned);
    }

    #[test]
    fn prefixes_admit_references_by_whole_components_and_registry_in_any_case() {
        let cases: &[(&str, &str, bool)] = &[
            // The whole registry.
            (
                "registry.example.com",
                "registry.example.com/team-a/fanout",
                true,
            ),
            ("registry.example.com/", "registry.example.com/x", true),
            ("registry.example.com", "registry.example.com:5000/x", false),
            ("registry.example.com", "other.example.com/x", false),
            ("registry.example.com", "registry.example.co/x", false),
            // Everything under team-a, not team-a itself.
            (
                "registry.example.com/team-a/",
                "registry.example.com/team-a/fanout",
                true,
            ),
            (
                "registry.example.com/team-a/",
                "registry.example.com/team-a/x/y",
                true,
            ),
            (
                "registry.example.com/team-a/",
                "registry.example.com/team-a",
                false,
            ),
            (
                "registry.example.com/team-a/",
                "registry.example.com/team-ab/fanout",
                false,
            ),
            (
                "registry.example.com/team-a/",
                "registry.example.com/team/a",
                false,
            ),
            // A repository, and those below it.
            (
                "registry.example.com/team-a",
                "registry.example.com/team-a",
                true,
            ),
            (
                "registry.example.com/team-a",
                "registry.example.com/team-a/fanout",
                true,
            ),
            (
                "registry.example.com/team-a",
                "registry.example.com/team-ab",
                false,
            ),
            (
                "registry.example.com/team-a/fanout",
                "registry.example.com/team-a/fanout",
                true,
            ),
            (
                "registry.example.com/team-a/fanout",
                "registry.example.com/team-a/fanout/v2",
                true,
            ),
            (
                "registry.example.com/team-a/fanout",
                "registry.example.com/team-a/fanout2",
                false,
            ),
            (
                "registry.example.com/team-a/fanout",
                "registry.example.com/team-a/fan",
                false,
            ),
            (
                "registry.example.com/team-a/fanout",
                "registry.example.com/team-a",
                false,
            ),
            // The registry compares in any case, the repository exactly.
            (
                "Registry.Example.COM/team-a/",
                "registry.example.com/team-a/fanout",
                true,
            ),
            (
                "registry.example.com/team-a/",
                "REGISTRY.example.com/team-a/fanout",
                true,
            ),
            ("[FE80::1]:5000/x", "[fe80::1]:5000/x", true),
            ("localhost:5000/x/", "localhost:5000/x/y", true),
            ("127.0.0.1:5000", "127.0.0.1:5001/x", false),
        ];
        for (prefix, name, expected) in cases {
            let parsed: Prefix = prefix
                .parse()
                .unwrap_or_else(|e| panic!("{prefix} should parse: {e}"));
            assert_eq!(
                parsed.to_string(),
                *prefix,
                "Display writes the prefix back"
            );
            for text in [
                (*name).to_owned(),
                format!("{name}:v1"),
                format!("{name}@sha256:{HEX}"),
            ] {
                assert_eq!(
                    reference(&text).within(&parsed),
                    *expected,
                    "{text} within {prefix}"
                );
            }
        }
    }

    #[test]
    fn prefixes_split_into_registry_and_repository() {
        let cases = [
            ("registry.example.com", "registry.example.com", ""),
            (
                "registry.example.com:5000/",
                "registry.example.com:5000",
                "",
            ),
            (
                "registry.example.com/team-a/",
                "registry.example.com",
                "team-a",
            ),
            ("localhost/team-a/fanout", "localhost", "team-a/fanout"),
        ];
        for (text, registry, repository) in cases {
            let prefix: Prefix = text.parse().expect("a prefix");
            assert_eq!(
                (prefix.registry(), prefix.repository()),
                (registry, repository),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_prefixes_are_refused_with_the_problem_and_the_input_named() {
        type Check = fn(&ParseError) -> bool;
        let cases: &[(&str, Check)] = &[
            ("", |e| matches!(e, ParseError::Empty)),
            ("team-a/fanout", |e| {
                matches!(e, ParseError::NoRegistry { .. })
            }),
            ("team-a", |e| matches!(e, ParseError::NoRegistry { .. })),
            ("https://registry.example.com/team-a/", |e| {
                matches!(e, ParseError::Scheme { .. })
            }),
            ("registry.example.com/team a", |e| {
                matches!(e, ParseError::Whitespace { .. })
            }),
            ("registry.example.com/team-a:1", |e| {
                matches!(e, ParseError::Versioned { .. })
            }),
            (&format!("registry.example.com/x@sha256:{HEX}"), |e| {
                matches!(e, ParseError::Versioned { .. })
            }),
            ("registry.example.com//", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("registry.example.com/a//b", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("registry.example.com/Team-A/", |e| {
                matches!(e, ParseError::Repository { .. })
            }),
            ("registry.example.com:99999/", |e| {
                matches!(e, ParseError::Port { .. })
            }),
            ("bad_host.example.com/a", |e| {
                matches!(e, ParseError::Host { .. })
            }),
        ];
        for (text, check) in cases {
            let error = text
                .parse::<Prefix>()
                .expect_err(&format!("{text:?} should be refused"));
            assert!(check(&error), "{text:?}: {error:?}");
            assert!(
                error.to_string().contains(&format!("`{text}`")) || text.is_empty(),
                "{error} names {text:?}"
            );
        }
    }
}
