//! The names the host writes onto objects, and reads back: its labels,
//! annotations, finalizer and field managers. They are a contract with the
//! people who read objects with `kubectl` and with the operator's own next
//! start, so each has one home here, on the ground floor, where every module
//! that writes or reads one can reach it without depending on the others.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

/// The prefix of every label and annotation key the host sets: a child may
/// carry none of its own but [`UPDATE_STRATEGY_ANNOTATION`].
pub const RESERVED_PREFIX: &str = "policyhost.dev/";

// Children.

/// The label every child carries, naming the operator instance that manages it.
pub const MANAGED_BY_LABEL: &str = "policyhost.dev/managed-by";
/// The label every child carries, naming its DataJob.
pub const DATAJOB_LABEL: &str = "policyhost.dev/datajob";
/// Label on every child: the shard bucket of its DataJob's uid, so that the
/// shard serving the DataJob selects its children too.
pub const SHARD_LABEL: &str = "policyhost.dev/shard";
/// The annotation holding a hash of the manifest the host last applied to a
/// child: an unchanged desired child is not applied again.
pub const APPLIED_HASH_ANNOTATION: &str = "policyhost.dev/applied-hash";
/// The annotation by which a policy declares how a child of its changes
/// ([`crate::runtime::UpdateStrategy`]): the one key with the host's prefix
/// that a policy sets, and the host reads.
pub const UPDATE_STRATEGY_ANNOTATION: &str = "policyhost.dev/update-strategy";

// DataJobs.

/// The finalizer the host puts on every DataJob it manages.
pub const FINALIZER: &str = "policyhost.dev/cleanup";
/// The annotation by which a person releases a Terminating DataJob without cleanup.
pub const FORCE_RELEASE_ANNOTATION: &str = "policyhost.dev/force-release";

// Policy ConfigMaps, written by the publisher.

/// The label that marks a policy ConfigMap; its value is the policy's name.
pub const POLICY_LABEL: &str = "policyhost.dev/policy";
/// The label that makes a policy ConfigMap its policy's candidate
/// ([`CANDIDATE_ROLE`]) instead of its serving version (no label).
pub const ROLE_LABEL: &str = "policyhost.dev/role";
/// The [`ROLE_LABEL`] value of a candidate version.
pub const CANDIDATE_ROLE: &str = "candidate";
/// The [`ROLE_LABEL`] value of a policy's pins ([`crate::policies::pins`]).
pub const PINS_ROLE: &str = "pins";
/// The [`ROLE_LABEL`] value of a policy's rollout plan
/// ([`crate::policies::rollout`]).
pub const ROLLOUT_ROLE: &str = "rollout";
/// The label that marks a grant ConfigMap; its value is the policy's name.
pub const GRANT_LABEL: &str = "policyhost.dev/grant";

// Policy ConfigMaps, written by the host.

/// The content fingerprint of the version the host last processed, loaded or not.
pub const OBSERVED_ANNOTATION: &str = "policyhost.dev/observed";
/// The digest of the component this ConfigMap has in service.
pub const LOADED_DIGEST_ANNOTATION: &str = "policyhost.dev/loaded-digest";
/// When that component was put in service (RFC 3339).
pub const LOADED_AT_ANNOTATION: &str = "policyhost.dev/loaded-at";
/// Why the last processed version was rejected (`<Reason>: <message>`);
/// absent when it loaded.
pub const ERROR_ANNOTATION: &str = "policyhost.dev/error";
/// The limits lowered to the host's maxima; absent when none.
pub const CLAMPED_ANNOTATION: &str = "policyhost.dev/clamped";
/// The SDK the component in service says it was built with
/// (`rust 0.1.0`, from its `policyhost-sdk` section); absent when it
/// names none.
pub const SDK_ANNOTATION: &str = "policyhost.dev/sdk";
/// The policy this ConfigMap provides (holds the name of, whether its last
/// version loaded or not); absent when it provides none. When two ConfigMaps
/// name one policy, the one recorded as providing it keeps it across a
/// restart, whatever the order the API server lists them in
/// ([`crate::policies::tenancy`] says what that holds against).
pub const PROVIDES_ANNOTATION: &str = "policyhost.dev/provides";
/// On a host that pulls tags (`single-team`), the tag of `data.artifact` as
/// first resolved, `REGISTRY/REPOSITORY:TAG@sha256:…`: later loads of the
/// same tag (a restart, a grant change) pull that digest, not wherever the
/// tag has moved since.
pub const PINNED_ANNOTATION: &str = "policyhost.dev/pinned";
/// The last component of this ConfigMap refused for what compiling it
/// costs, with the limits it was refused under (JSON).
pub const COMPILE_REFUSED_ANNOTATION: &str = "policyhost.dev/compile-refused";
/// A candidate's shadow summary (JSON).
pub const SHADOW_ANNOTATION: &str = "policyhost.dev/shadow";
/// What `policy diff` showed of a candidate's faults, and of which pair of
/// versions, so that `policy promote` refuses only while newer ones of the
/// same pair are unseen.
pub const EXAMINED_ANNOTATION: &str = "policyhost.dev/faults-examined";

/// The serving versions of a policy, newest first (JSON, on its serving
/// ConfigMap): what `policy history` shows and `policy rollback` picks from.
pub const HISTORY_ANNOTATION: &str = "policyhost.dev/history";
/// Where a rollout is (JSON, on its rollout ConfigMap): written by the
/// leader, read by every replica ([`crate::policies::rollout::Status`]).
pub const ROLLOUT_STATUS_ANNOTATION: &str = "policyhost.dev/rollout-status";

// Revision ConfigMaps, written by the host only.

/// The label that marks a revision: a version a policy served, kept for
/// `policy rollback`; its value is the policy's name.
pub const REVISION_OF_LABEL: &str = "policyhost.dev/revision-of";
/// The digest of a revision's component (64 hex digits).
pub const REVISION_DIGEST_ANNOTATION: &str = "policyhost.dev/digest";
/// When a revision last went into service (RFC 3339, milliseconds).
pub const SERVED_AT_ANNOTATION: &str = "policyhost.dev/served-at";
/// The field manager that last wrote the content that served it.
pub const PUBLISHED_BY_ANNOTATION: &str = "policyhost.dev/published-by";

// Field managers.

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "policyhost";
/// The field manager of `policy push` and `policyhost dev`: it owns the
/// label, `data` and `binaryData` of a policy ConfigMap; the host's
/// annotations are the host's.
pub const PUBLISH_FIELD_MANAGER: &str = "policyhost-push";

/// Whether `entries` hold fields of the operator's create (an `Update`
/// entry of its field manager on the main resource).
#[must_use]
pub fn created_by_operator(entries: &[ManagedFieldsEntry]) -> bool {
    entries.iter().any(|e| is_operators(e, "Update"))
}

/// Whether `entry` is the operator's, of `operation` (`Apply` or
/// `Update`), on the main resource.
#[must_use]
pub fn is_operators(entry: &ManagedFieldsEntry, operation: &str) -> bool {
    entry.manager.as_deref() == Some(FIELD_MANAGER)
        && entry.operation.as_deref() == Some(operation)
        && entry.subresource.as_deref().unwrap_or_default().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_the_host_sets_is_under_the_reserved_prefix() {
        let keys = [
            MANAGED_BY_LABEL,
            DATAJOB_LABEL,
            APPLIED_HASH_ANNOTATION,
            UPDATE_STRATEGY_ANNOTATION,
            FINALIZER,
            FORCE_RELEASE_ANNOTATION,
            POLICY_LABEL,
            ROLE_LABEL,
            GRANT_LABEL,
            OBSERVED_ANNOTATION,
            LOADED_DIGEST_ANNOTATION,
            LOADED_AT_ANNOTATION,
            ERROR_ANNOTATION,
            CLAMPED_ANNOTATION,
            PROVIDES_ANNOTATION,
            PINNED_ANNOTATION,
            COMPILE_REFUSED_ANNOTATION,
            SHADOW_ANNOTATION,
            EXAMINED_ANNOTATION,
            HISTORY_ANNOTATION,
            ROLLOUT_STATUS_ANNOTATION,
            REVISION_OF_LABEL,
            REVISION_DIGEST_ANNOTATION,
            SERVED_AT_ANNOTATION,
            PUBLISHED_BY_ANNOTATION,
        ];
        for key in keys {
            assert!(key.starts_with(RESERVED_PREFIX), "{key}");
        }
        let mut unique = keys.to_vec();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "two names share a key");
    }

    fn entry(manager: &str, operation: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(Into::into),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn only_the_operators_create_on_the_main_resource_counts_as_its_create() {
        assert!(created_by_operator(&[entry(FIELD_MANAGER, "Update", None)]));
        assert!(!created_by_operator(&[entry(FIELD_MANAGER, "Apply", None)]));
        assert!(!created_by_operator(&[entry(
            FIELD_MANAGER,
            "Update",
            Some("status")
        )]));
        assert!(!created_by_operator(&[entry("kubectl", "Update", None)]));
    }
}
