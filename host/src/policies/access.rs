//! Which namespaces' DataJobs may use a policy: the `allowedNamespaces` key of its
//! ConfigMap ([`super::configmap::keys::ALLOWED_NAMESPACES`]).
//!
//! A policy is a capability: it runs with whatever its ConfigMap grants it
//! (kinds, limits, a share of the host), so the team that publishes it says
//! who may call it. A DataJob in a namespace its policy does not list gets a
//! `PolicyNotAllowed` condition and is never called.
//!
//! The list is exact namespace names, or `*` for every namespace. A label
//! selector was left out on purpose: it would make the host watch
//! Namespaces (more RBAC, one more cache) and let whoever may label a
//! namespace grant themselves a policy; a list changes only with the
//! ConfigMap, under the publishing team's RBAC.

use std::collections::BTreeSet;
use std::fmt;

use super::configmap;

/// The namespaces whose DataJobs may call a policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Access {
    /// Every namespace: `allowedNamespaces: "*"`, or no `allowedNamespaces` key on a host
    /// that does not require one (`--policy-tenancy single-team`), or a
    /// policy from the operator's own `--policy-dir`.
    #[default]
    Everyone,
    /// Only DataJobs of these namespaces.
    Namespaces(BTreeSet<String>),
}

impl Access {
    /// Reads `*` or a list of namespace names (commas, spaces or newlines
    /// between them). `None` for an empty list, a name that is not a
    /// namespace name (a DNS-1123 label), or `*` beside names.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let items: Vec<&str> = text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|item| !item.is_empty())
            .collect();
        match items.as_slice() {
            [] => None,
            ["*"] => Some(Self::Everyone),
            names => {
                let valid = names.iter().all(|name| configmap::check_name(name).is_ok());
                valid.then(|| Self::Namespaces(names.iter().map(|n| (*n).to_owned()).collect()))
            }
        }
    }

    /// Whether DataJobs of `namespace` may call the policy.
    #[must_use]
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::Everyone => true,
            Self::Namespaces(names) => names.contains(namespace),
        }
    }
}

/// The text [`Access::parse`] reads back: `*`, or `a,b`.
impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Everyone => f.write_str("*"),
            Self::Namespaces(names) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                f.write_str(&names.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only(names: &[&str]) -> Access {
        Access::Namespaces(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn a_list_of_namespaces_or_a_star_parses() {
        assert_eq!(Access::parse("*"), Some(Access::Everyone));
        assert_eq!(Access::parse(" * \n"), Some(Access::Everyone));
        assert_eq!(
            Access::parse("team-a, team-b\nteam-a"),
            Some(only(&["team-a", "team-b"]))
        );
        assert_eq!(Access::parse("team-a"), Some(only(&["team-a"])));
    }

    #[test]
    fn an_empty_list_a_bad_name_or_a_star_among_names_does_not_parse() {
        for text in [
            "", " , ", "Team-A", "team_a", "-a", "a,*", "*,*", "team-a/x",
        ] {
            assert_eq!(Access::parse(text), None, "{text:?}");
        }
        assert_eq!(Access::parse(&"a".repeat(64)), None, "longer than a label");
    }

    #[test]
    fn only_listed_namespaces_are_allowed_and_a_star_allows_every_one() {
        let access = only(&["team-a", "shared"]);
        assert!(access.allows("team-a"));
        assert!(access.allows("shared"));
        assert!(!access.allows("team-b"));
        assert!(!access.allows(""));
        assert!(!access.allows("team-a "), "names match exactly");
        assert!(Access::Everyone.allows("anything"));
    }

    #[test]
    fn access_written_as_text_reads_back_the_same() {
        for access in [Access::Everyone, only(&["b", "a"])] {
            assert_eq!(Access::parse(&access.to_string()), Some(access.clone()));
        }
        assert_eq!(only(&["b", "a"]).to_string(), "a,b");
    }
}
