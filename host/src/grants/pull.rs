//! The registries half of a grant: where a policy's artifacts may be
//! pulled from, and with which credentials. Both are the platform team's
//! (the grant ConfigMap and the Secret it names are not the team's to
//! write), so a team can neither point the operator at a registry nobody
//! allowed nor borrow another team's pull secret.
//!
//! ```yaml
//! data:                                   # in grant-<policy>
//!   registries: registry.example.com/team-a/, registry.example.com/shared/fanout
//!   pullSecret: team-a-pull               # type kubernetes.io/dockerconfigjson
//! ```
//!
//! Without `registries`, the policy may not name an artifact at all.

use std::collections::BTreeMap;

use super::keys;
use crate::data_keys::{self, KeyError};
use crate::oci::Prefix;
use crate::oci::reference::ParseError;

/// The Secret type a pull secret must have, as Pods' `imagePullSecrets`.
pub const SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// The key of its credentials.
pub const SECRET_KEY: &str = ".dockerconfigjson";

/// The registries half of a grant, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullTerms {
    /// Repository prefixes.
    pub prefixes: Vec<Prefix>,
    /// The pull secret's name.
    pub secret: Option<String>,
}

/// What is wrong with the registries half of a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PullTermsError {
    /// A key no grant has.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A repository prefix does not parse.
    #[error("`data.registries`: {0}")]
    Prefix(ParseError),
    /// A pull secret without a registry to use it with.
    #[error(
        "`data.{}` names a Secret but `data.{}` allows no registry",
        keys::PULL_SECRET,
        keys::REGISTRIES
    )]
    SecretWithoutRegistries,
}

impl PullTerms {
    /// Reads the registries half of a grant's `data` (and refuses a key no
    /// grant has).
    pub fn parse(data: &BTreeMap<String, String>) -> Result<Self, PullTermsError> {
        let mut terms = Self::default();
        for entry in data_keys::entries(data) {
            match entry.key {
                keys::REGISTRIES => {
                    terms.prefixes = entry
                        .text()
                        .split(|c: char| c == ',' || c.is_whitespace())
                        .filter(|item| !item.is_empty())
                        .map(str::parse)
                        .collect::<Result<_, _>>()
                        .map_err(PullTermsError::Prefix)?;
                }
                keys::PULL_SECRET => {
                    let name = entry.parse(SECRET_EXPECTED, |t| {
                        policyhost_names::dns1123_subdomain(t)
                            .ok()
                            .map(|()| t.to_owned())
                    })?;
                    terms.secret = Some(name);
                }
                key if keys::ALL.contains(&key) => {}
                _ => return Err(entry.unknown(" in the grant", keys::ALL).into()),
            }
        }
        if terms.secret.is_some() && terms.prefixes.is_empty() {
            return Err(PullTermsError::SecretWithoutRegistries);
        }
        Ok(terms)
    }
}

const SECRET_EXPECTED: &str = "the name of a Secret of type kubernetes.io/dockerconfigjson";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data_keys::data_of as data;

    #[test]
    fn registries_and_a_pull_secret_are_read_and_mistakes_named() {
        let terms = PullTerms::parse(&data(&[
            (
                "registries",
                "registry.example.com/team-a/, 127.0.0.1:5000/x",
            ),
            ("pullSecret", "team-a-pull"),
            ("origins", "https://api.example.com"),
        ]))
        .expect("terms");
        assert_eq!(terms.prefixes.len(), 2);
        assert_eq!(terms.secret.as_deref(), Some("team-a-pull"));
        assert_eq!(
            PullTerms::parse(&data(&[])).expect("none"),
            PullTerms::default()
        );
        assert!(matches!(
            PullTerms::parse(&data(&[("pullSecret", "team-a-pull")])),
            Err(PullTermsError::SecretWithoutRegistries)
        ));
        assert!(matches!(
            PullTerms::parse(&data(&[("registries", "team-a/fanout")])),
            Err(PullTermsError::Prefix(_))
        ));
        assert!(matches!(
            PullTerms::parse(&data(&[("registry", "registry.example.com")])),
            Err(PullTermsError::Key(KeyError::Unknown { .. }))
        ));
        assert!(matches!(
            PullTerms::parse(&data(&[
                ("registries", "r.example.com"),
                ("pullSecret", "Not_A_Name")
            ])),
            Err(PullTermsError::Key(KeyError::Invalid { .. }))
        ));
    }
}
