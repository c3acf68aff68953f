//! How far the host trusts the people who publish policies
//! (`--policy-tenancy`).
//!
//! A policy's name is what DataJobs ask for, and its grant is what lets it
//! reach the network: both must belong to the ConfigMap the platform team's
//! naming rule says, because RBAC can only say who writes which ConfigMap
//! *name*. A team allowed to patch its own ConfigMap can put any label on
//! it.
//!
//! # Guarantees
//!
//! Every mode:
//! - only the ConfigMap `grant-<name>` grants the policy `<name>` outbound
//!   HTTP ([`super::grants`]); a ConfigMap of any other name labelled as a
//!   grant is ignored, with a warning and a `GrantIgnored` Event;
//! - of two ConfigMaps naming one policy, the one that provides it keeps it
//!   (the other is refused, `Conflict`), and after a restart the one the
//!   host recorded as providing it ([`PROVIDES_ANNOTATION`](crate::vocabulary::PROVIDES_ANNOTATION))
//!   keeps it, whatever the order the API server lists them in.
//!
//! [`Tenancy::Strict`] (the default) adds: only `policy-<name>` provides
//! `<name>` (`NameMismatch` otherwise), and a ConfigMap must list the
//! namespaces whose DataJobs may use its policy (`allowedNamespaces`).
//!
//! # Caveats
//!
//! In [`Tenancy::SingleTeam`] the record of who provides a name is an
//! annotation on the ConfigMap itself, which whoever may patch that
//! ConfigMap may also write: it keeps a name with its provider against
//! mistakes and list order, not against a publisher who forges the host's
//! annotations. A host shared by teams runs [`Tenancy::Strict`].

use super::configmap::{self, Error};
use crate::vocabulary::{CANDIDATE_ROLE, PINS_ROLE, ROLLOUT_ROLE};

/// How far the host trusts the people who publish policies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tenancy {
    /// A host shared by teams: only `policy-<name>` provides `<name>`, and
    /// every ConfigMap says whose DataJobs may use its policy.
    #[default]
    Strict,
    /// A host whose publishers are one team: any ConfigMap labelled
    /// `policyhost.dev/policy` may provide a name no other one provides,
    /// and one without `allowedNamespaces` serves every namespace.
    SingleTeam,
}

impl Tenancy {
    /// The flag's value for this mode.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::SingleTeam => "single-team",
        }
    }

    /// Whether the ConfigMap `configmap` may provide the policy `policy`.
    ///
    /// # Errors
    ///
    /// [`Error::NameMismatch`] on a strict host when `configmap` is not
    /// `policy-<policy>`.
    pub fn check_provider(self, configmap: &str, policy: &str) -> Result<(), Error> {
        self.check_name(configmap, &configmap::configmap_name(policy), || {
            Error::NameMismatch {
                configmap: configmap.to_owned(),
                policy: policy.to_owned(),
            }
        })
    }

    /// Whether the ConfigMap `configmap` may offer a candidate of `policy`.
    ///
    /// # Errors
    ///
    /// [`Error::RoleNameMismatch`] on a strict host when `configmap` is
    /// not `candidate-<policy>`.
    pub fn check_candidate(self, configmap: &str, policy: &str) -> Result<(), Error> {
        self.check_role(configmap, policy, CANDIDATE_ROLE)
    }

    /// Whether the ConfigMap `configmap` may hold the pins of `policy`.
    ///
    /// # Errors
    ///
    /// [`Error::RoleNameMismatch`] on a strict host when `configmap` is
    /// not `pins-<policy>`.
    pub fn check_pins(self, configmap: &str, policy: &str) -> Result<(), Error> {
        self.check_role(configmap, policy, PINS_ROLE)
    }

    /// Whether the ConfigMap `configmap` may hold the rollout of `policy`.
    ///
    /// # Errors
    ///
    /// [`Error::RoleNameMismatch`] on a strict host when `configmap` is
    /// not `rollout-<policy>`.
    pub fn check_rollout(self, configmap: &str, policy: &str) -> Result<(), Error> {
        self.check_role(configmap, policy, ROLLOUT_ROLE)
    }

    /// On a strict host, `configmap` must be `<role>-<policy>`.
    fn check_role(self, configmap: &str, policy: &str, role: &'static str) -> Result<(), Error> {
        self.check_name(configmap, &format!("{role}-{policy}"), || {
            Error::RoleNameMismatch {
                configmap: configmap.to_owned(),
                policy: policy.to_owned(),
                role,
            }
        })
    }

    /// On a strict host, `configmap` must be `expected`: the name rule.
    fn check_name(
        self,
        configmap: &str,
        expected: &str,
        mismatch: impl FnOnce() -> Error,
    ) -> Result<(), Error> {
        match self {
            Self::Strict if configmap != expected => Err(mismatch()),
            Self::Strict | Self::SingleTeam => Ok(()),
        }
    }

    /// Whether a ConfigMap must set `allowedNamespaces`.
    #[must_use]
    pub fn requires_allowed_namespaces(self) -> bool {
        self == Self::Strict
    }

    /// Whether an artifact must be named by its digest: a tag can be moved
    /// to other code by whoever may push to the repository.
    #[must_use]
    pub fn requires_pinned_artifacts(self) -> bool {
        self == Self::Strict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strict_host_lets_only_policy_name_provide_name() {
        assert!(Tenancy::Strict.check_provider("policy-etl", "etl").is_ok());
        for configmap in ["policy-reports", "etl", "policy-etl-copy", "grant-etl"] {
            let error = Tenancy::Strict
                .check_provider(configmap, "etl")
                .unwrap_err();
            assert_eq!(error.reason(), "NameMismatch");
            assert_eq!(
                error.to_string(),
                format!(
                    "ConfigMap {configmap} names policy `etl`; on this host only the ConfigMap `policy-etl` may provide it"
                )
            );
        }
    }

    #[test]
    fn a_strict_host_lets_only_candidate_name_offer_a_candidate_of_name() {
        assert!(
            Tenancy::Strict
                .check_candidate("candidate-etl", "etl")
                .is_ok()
        );
        for configmap in ["policy-etl", "candidate-reports", "policy-etl-candidate"] {
            let error = Tenancy::Strict
                .check_candidate(configmap, "etl")
                .unwrap_err();
            assert_eq!(error.reason(), "NameMismatch");
            assert_eq!(
                error.to_string(),
                format!(
                    "ConfigMap {configmap} is labelled as the candidate of policy `etl`; on this host only the ConfigMap `candidate-etl` may hold it"
                )
            );
        }
        assert!(
            Tenancy::SingleTeam
                .check_candidate("etl-next", "etl")
                .is_ok()
        );
    }

    #[test]
    fn a_single_team_host_lets_any_configmap_provide_a_name() {
        assert!(
            Tenancy::SingleTeam
                .check_provider("policy-reports", "etl")
                .is_ok()
        );
        assert!(!Tenancy::SingleTeam.requires_allowed_namespaces());
    }

    #[test]
    fn strict_is_the_default_and_requires_allowed_namespaces() {
        assert_eq!(Tenancy::default(), Tenancy::Strict);
        assert!(Tenancy::Strict.requires_allowed_namespaces());
        assert!(Tenancy::Strict.requires_pinned_artifacts());
        assert!(!Tenancy::SingleTeam.requires_pinned_artifacts());
        assert_eq!(Tenancy::Strict.as_str(), "strict");
        assert_eq!(Tenancy::SingleTeam.as_str(), "single-team");
    }
}
