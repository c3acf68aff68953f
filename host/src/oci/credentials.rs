//! Registry credentials from a pull secret (type
//! `kubernetes.io/dockerconfigjson`, key `.dockerconfigjson`) or a Docker
//! `config.json`: the `auths` object, read as the kubelet reads it for Pods'
//! `imagePullSecrets`, so a platform team can give the operator the Secret
//! its Pods already use. No error and no `Debug` output ever carries a
//! secret value.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;

use base64::Engine as _;
use serde_json::{Map, Value};

/// The name Docker Hub's credentials are kept under: `config.json` writes
/// `https://index.docker.io/v1/`, references write `docker.io`.
const DOCKER_HUB: &str = "docker.io";
/// Docker Hub's other names.
const DOCKER_HUB_ALIASES: [&str; 2] = ["index.docker.io", "registry-1.docker.io"];

/// Why registry credentials cannot be read. The messages name the entry
/// (its registry key, as written) and never a secret value; for that
/// reason no variant keeps the underlying error, whose text could quote the
/// secret (base64's names the offending byte).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// The bytes are not JSON.
    #[error("the registry credentials are not JSON (line {line}, column {column})")]
    NotJson {
        /// Where parsing stopped, from 1.
        line: usize,
        /// Where parsing stopped, from 1 (0: at the start of the line).
        column: usize,
    },
    /// No `auths` object at the top.
    #[error(
        "the registry credentials have no `auths` object: write {{\"auths\": {{\"REGISTRY\": {{\"auth\": \"BASE64(USER:PASSWORD)\"}}}}}}"
    )]
    NoAuths,
    /// A key that names no host, such as `https://`.
    #[error("the `auths` key `{registry}` names no registry host")]
    NoHost {
        /// The key as written.
        registry: String,
    },
    /// An entry that is not an object.
    #[error("the `auths` entry `{registry}` is not an object")]
    NotAnObject {
        /// The key as written.
        registry: String,
    },
    /// A field that is not a string.
    #[error("the `{field}` of the `auths` entry `{registry}` is not a string")]
    NotText {
        /// The key as written.
        registry: String,
        /// The field.
        field: &'static str,
    },
    /// `auth` is not standard base64.
    #[error("the `auth` of the `auths` entry `{registry}` is not base64")]
    AuthNotBase64 {
        /// The key as written.
        registry: String,
    },
    /// `auth` decodes to bytes that are not UTF-8.
    #[error("the `auth` of the `auths` entry `{registry}` does not decode to text")]
    AuthNotUtf8 {
        /// The key as written.
        registry: String,
    },
    /// `auth` decodes to text without the `:` of `user:password`.
    #[error(
        "the `auth` of the `auths` entry `{registry}` does not decode to USER:PASSWORD (no `:`)"
    )]
    AuthNoColon {
        /// The key as written.
        registry: String,
    },
    /// Neither `auth` nor `username` and `password`.
    #[error(
        "the `auths` entry `{registry}` has neither `auth` nor `username` and `password` (credential helpers are not read)"
    )]
    NoCredentials {
        /// The key as written.
        registry: String,
    },
    /// An `identitytoken`, which needs an OAuth token exchange this host
    /// does not make.
    #[error(
        "the `auths` entry `{registry}` holds an `identitytoken`, which this host does not support: give `auth` or `username` and `password`"
    )]
    IdentityToken {
        /// The key as written.
        registry: String,
    },
    /// Two keys for one registry with different credentials: which one is
    /// meant is unclear.
    #[error(
        "the `auths` entries `{first}` and `{second}` are both for `{registry}`, with different credentials: keep one"
    )]
    Conflict {
        /// The registry, normalised.
        registry: String,
        /// One key as written.
        first: String,
        /// The other key as written.
        second: String,
    },
}

/// A user name and password for a registry, sent as HTTP Basic
/// authentication (or to a token realm). `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub struct Basic {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl fmt::Debug for Basic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Basic")
            .field("username", &self.username)
            .field("password", &format_args!("[redacted]"))
            .finish()
    }
}

/// Credentials by registry host (`host[:port]`, lowercase); none for a
/// registry means anonymous pulls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    by_registry: BTreeMap<String, (String, Basic)>,
}

impl Credentials {
    /// No credentials: every registry is pulled from anonymously.
    #[must_use]
    pub fn anonymous() -> Self {
        Self::default()
    }

    /// Reads a `.dockerconfigjson` (or a Docker `config.json`). Every entry
    /// must hold usable credentials, not only the ones a pull will need, so
    /// that a broken Secret is reported when it is read.
    ///
    /// # Errors
    ///
    /// Where the bytes stop being JSON, or the first entry (by key) without
    /// usable credentials.
    pub fn parse(bytes: &[u8]) -> Result<Self, CredentialsError> {
        let root: Value =
            serde_json::from_slice(bytes).map_err(|error| CredentialsError::NotJson {
                line: error.line(),
                column: error.column(),
            })?;
        let auths = root
            .get("auths")
            .and_then(Value::as_object)
            .ok_or(CredentialsError::NoAuths)?;
        let mut credentials = Self::default();
        for (key, value) in auths {
            let registry = normalise(key);
            if registry.is_empty() {
                return Err(CredentialsError::NoHost {
                    registry: key.clone(),
                });
            }
            let basic = entry(key, value)?;
            match credentials.by_registry.entry(registry) {
                Entry::Vacant(vacant) => {
                    vacant.insert((key.clone(), basic));
                }
                Entry::Occupied(occupied) if occupied.get().1 == basic => {}
                Entry::Occupied(occupied) => {
                    return Err(CredentialsError::Conflict {
                        registry: occupied.key().clone(),
                        first: occupied.get().0.clone(),
                        second: key.clone(),
                    });
                }
            }
        }
        Ok(credentials)
    }

    /// The credentials for `registry` (`host[:port]`, as a reference names
    /// it; the host in any case), if any.
    #[must_use]
    pub fn for_registry(&self, registry: &str) -> Option<&Basic> {
        self.by_registry
            .get(&normalise(registry))
            .map(|(_, basic)| basic)
    }
}

/// `host[:port]` of an `auths` key, lowercase: without a scheme or a path
/// (`https://index.docker.io/v1/`), and Docker Hub under one name.
fn normalise(key: &str) -> String {
    let rest = key.split_once("://").map_or(key, |(_, rest)| rest);
    let host = rest.split_once('/').map_or(rest, |(host, _)| host);
    let host = host.to_ascii_lowercase();
    if DOCKER_HUB_ALIASES.contains(&host.as_str()) {
        DOCKER_HUB.to_owned()
    } else {
        host
    }
}

/// One entry's credentials: `auth` if it is set (as the kubelet, which
/// lets it override `username` and `password`), else `username` and
/// `password`.
fn entry(key: &str, value: &Value) -> Result<Basic, CredentialsError> {
    let registry = || key.to_owned();
    let fields = value
        .as_object()
        .ok_or_else(|| CredentialsError::NotAnObject {
            registry: registry(),
        })?;
    let set = |field| text(key, fields, field).map(|t| t.filter(|t| !t.is_empty()));
    if set("identitytoken")?.is_some() {
        return Err(CredentialsError::IdentityToken {
            registry: registry(),
        });
    }
    if let Some(auth) = set("auth")? {
        return decode(key, auth);
    }
    match (set("username")?, text(key, fields, "password")?) {
        (Some(username), Some(password)) => Ok(Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        }),
        _ => Err(CredentialsError::NoCredentials {
            registry: registry(),
        }),
    }
}

/// A string field; absent and `null` are none.
fn text<'a>(
    key: &str,
    fields: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<&'a str>, CredentialsError> {
    match fields.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(CredentialsError::NotText {
            registry: key.to_owned(),
            field,
        }),
    }
}

/// `base64(user:password)`; the password may itself hold `:`.
fn decode(key: &str, auth: &str) -> Result<Basic, CredentialsError> {
    let registry = || key.to_owned();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(auth)
        .map_err(|_| CredentialsError::AuthNotBase64 {
            registry: registry(),
        })?;
    let text = String::from_utf8(bytes).map_err(|_| CredentialsError::AuthNotUtf8 {
        registry: registry(),
    })?;
    let (username, password) =
        text.split_once(':')
            .ok_or_else(|| CredentialsError::AuthNoColon {
                registry: registry(),
            })?;
    Ok(Basic {
        username: username.to_owned(),
        password: password.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWORD: &str = "s3cr3t:with-colon";

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn parse(json: &serde_json::Value) -> Result<Credentials, CredentialsError> {
        Credentials::parse(json.to_string().as_bytes())
    }

    fn basic(username: &str, password: &str) -> Basic {
        Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        }
    }

    #[test]
    fn each_entry_format_gives_a_user_and_password() {
        let json = serde_json::json!({"auths": {
            "a.example.com": {"auth": b64(&format!("alice:{PASSWORD}"))},
            "b.example.com": {"username": "bob", "password": PASSWORD, "email": "bob@example.com"},
            "c.example.com": {"username": "carol", "password": ""},
            // `auth` wins over `username` and `password`, as in the kubelet.
            "d.example.com": {"auth": b64("dave:right"), "username": "dave", "password": "wrong"},
            // An empty `auth` is no `auth`.
            "e.example.com": {"auth": "", "username": "erin", "password": PASSWORD},
        }});
        let credentials = parse(&json).expect("credentials");
        let cases = [
            ("a.example.com", basic("alice", PASSWORD)),
            ("b.example.com", basic("bob", PASSWORD)),
            ("c.example.com", basic("carol", "")),
            ("d.example.com", basic("dave", "right")),
            ("e.example.com", basic("erin", PASSWORD)),
        ];
        for (registry, expected) in cases {
            assert_eq!(
                credentials.for_registry(registry),
                Some(&expected),
                "{registry}"
            );
        }
        assert_eq!(credentials.for_registry("f.example.com"), None);
    }

    #[test]
    fn registry_keys_are_normalised_to_host_and_port() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "registry.example.com",
                &["registry.example.com", "Registry.Example.COM"],
                &["registry.example.com:5000", "example.com"],
            ),
            (
                "registry.example.com:5000",
                &["registry.example.com:5000"],
                &["registry.example.com", "registry.example.com:5001"],
            ),
            (
                "https://registry.example.com",
                &["registry.example.com"],
                &["https://other.example.com"],
            ),
            (
                "http://Registry.Example.com:5000/v2/",
                &["registry.example.com:5000"],
                &["registry.example.com"],
            ),
            (
                "https://index.docker.io/v1/",
                &["docker.io", "index.docker.io", "registry-1.docker.io"],
                &["quay.io"],
            ),
            ("[::1]:5000", &["[::1]:5000"], &["[::1]"]),
        ];
        for (key, found, not_found) in cases {
            let json = serde_json::json!({"auths": {*key: {"auth": b64("u:p")}}});
            let credentials = parse(&json).expect("credentials");
            for registry in *found {
                assert_eq!(
                    credentials.for_registry(registry),
                    Some(&basic("u", "p")),
                    "{key} for {registry}"
                );
            }
            for registry in *not_found {
                assert_eq!(
                    credentials.for_registry(registry),
                    None,
                    "{key} not for {registry}"
                );
            }
        }
    }

    #[test]
    fn anonymous_credentials_have_none_for_any_registry() {
        let anonymous = Credentials::anonymous();
        assert_eq!(anonymous.for_registry("registry.example.com"), None);
        let empty = parse(&serde_json::json!({"auths": {}})).expect("no entries");
        assert_eq!(empty, anonymous);
    }

    #[test]
    fn debug_output_never_shows_a_password() {
        let json = serde_json::json!({"auths": {"registry.example.com": {"auth": b64(&format!("alice:{PASSWORD}"))}}});
        let credentials = parse(&json).expect("credentials");
        let basic = credentials
            .for_registry("registry.example.com")
            .expect("an entry");
        for printed in [
            format!("{basic:?}"),
            format!("{basic:#?}"),
            format!("{credentials:?}"),
        ] {
            assert!(!printed.contains(PASSWORD), "{printed}");
            assert!(!printed.contains("s3cr3t"), "{printed}");
            assert!(printed.contains("alice"), "{printed}");
            assert!(printed.contains("[redacted]"), "{printed}");
        }
    }

    #[test]
    fn the_same_credentials_under_two_keys_are_one_entry() {
        let json = serde_json::json!({"auths": {
            "https://registry.example.com/": {"auth": b64("u:p")},
            "registry.example.com": {"username": "u", "password": "p"},
        }});
        assert_eq!(
            parse(&json)
                .expect("credentials")
                .for_registry("registry.example.com"),
            Some(&basic("u", "p"))
        );
    }

    #[test]
    fn bad_credentials_are_refused_naming_the_entry_and_no_secret() {
        type Check = fn(&CredentialsError) -> bool;
        let no_colon = b64("alices3cr3t");
        let not_utf8 = base64::engine::general_purpose::STANDARD.encode(b"alice:\xff\xfes3cr3t");
        let cases: Vec<(serde_json::Value, Check, &str)> = vec![
            (
                serde_json::json!({"credsStore": "desktop"}),
                |e| matches!(e, CredentialsError::NoAuths),
                "`auths`",
            ),
            (
                serde_json::json!({"auths": []}),
                |e| matches!(e, CredentialsError::NoAuths),
                "`auths`",
            ),
            (
                serde_json::json!([]),
                |e| matches!(e, CredentialsError::NoAuths),
                "`auths`",
            ),
            (
                serde_json::json!({"auths": {"https://": {"auth": b64("u:s3cr3t")}}}),
                |e| matches!(e, CredentialsError::NoHost { .. }),
                "`https://`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": "s3cr3t"}}),
                |e| matches!(e, CredentialsError::NotAnObject { .. }),
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": {"auth": 5}}}),
                |e| matches!(e, CredentialsError::NotText { field: "auth", .. }),
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": {"username": "u", "password": ["s3cr3t"]}}}),
                |e| {
                    matches!(
                        e,
                        CredentialsError::NotText {
                            field: "password",
                            ..
                        }
                    )
                },
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": {"auth": "!!s3cr3t!!"}}}),
                |e| matches!(e, CredentialsError::AuthNotBase64 { .. }),
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": {"auth": not_utf8}}}),
                |e| matches!(e, CredentialsError::AuthNotUtf8 { .. }),
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {"https://r.example.com/v1/": {"auth": no_colon}}}),
                |e| matches!(e, CredentialsError::AuthNoColon { .. }),
                "`https://r.example.com/v1/`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": {}}}),
                |e| matches!(e, CredentialsError::NoCredentials { .. }),
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": {"username": "u"}}}),
                |e| matches!(e, CredentialsError::NoCredentials { .. }),
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": {"password": "s3cr3t"}}}),
                |e| matches!(e, CredentialsError::NoCredentials { .. }),
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {"r.example.com": {"auth": b64("00000000-0000-0000-0000-000000000000:"), "identitytoken": "s3cr3t"}}}),
                |e| matches!(e, CredentialsError::IdentityToken { .. }),
                "`r.example.com`",
            ),
            (
                serde_json::json!({"auths": {
                    "https://r.example.com": {"auth": b64("u:s3cr3t")},
                    "r.example.com": {"auth": b64("u:other-s3cr3t")},
                }}),
                |e| matches!(e, CredentialsError::Conflict { registry, .. } if registry == "r.example.com"),
                "`https://r.example.com` and `r.example.com`",
            ),
        ];
        for (json, check, named) in cases {
            let error = parse(&json).expect_err(&format!("{json} should be refused"));
            assert!(check(&error), "{json}: {error:?}");
            let message = error.to_string();
            assert!(message.contains(named), "{message} names {named}");
            assert!(!message.contains("s3cr3t"), "{message}");
            assert!(!format!("{error:?}").contains("s3cr3t"), "{error:?}");
        }
    }

    #[test]
    fn bytes_that_are_not_json_are_refused_where_they_stop() {
        let cases: &[(&[u8], usize, usize)] = &[
            (b"{\"auths\": {\"r\": {\"auth\": \"s3cr3t\"}", 1, 34),
            (b"{\n  \"auths\": s3cr3t\n}", 2, 12),
            (b"\xff", 1, 1),
            (b"", 1, 0),
        ];
        for (bytes, line, column) in cases {
            let error = Credentials::parse(bytes).expect_err("not JSON");
            assert_eq!(
                error,
                CredentialsError::NotJson {
                    line: *line,
                    column: *column
                },
                "{bytes:?}"
            );
            assert!(!error.to_string().contains("s3cr3t"));
        }
        assert_eq!(
            CredentialsError::NotJson {
                line: 2,
                column: 12
            }
            .to_string(),
            "the registry credentials are not JSON (line 2, column 12)"
        );
    }

    #[test]
    fn messages_say_what_is_wrong_and_what_to_write() {
        let cases = [
            (
                CredentialsError::NoAuths,
                r#"the registry credentials have no `auths` object: write {"auths": {"REGISTRY": {"auth": "BASE64(USER:PASSWORD)"}}}"#,
            ),
            (
                CredentialsError::IdentityToken {
                    registry: "r.example.com".into(),
                },
                "the `auths` entry `r.example.com` holds an `identitytoken`, which this host does not support: give `auth` or `username` and `password`",
            ),
            (
                CredentialsError::AuthNoColon {
                    registry: "r.example.com".into(),
                },
                "the `auth` of the `auths` entry `r.example.com` does not decode to USER:PASSWORD (no `:`)",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }
}
