//! The kinds of child the host knows, one row each: what a policy may
//! create unless the operator's `--child-kinds` says otherwise, the rule its
//! name follows, and how its status makes a child's phase. A kind outside
//! the table (a custom resource named with `--child-kinds`) has a DNS-1123
//! subdomain for a name and no lifecycle: it is done once it exists.

use policyhost_names::Verdict;

/// How a kind's status makes the phase a policy sees
/// (`crate::projection::child`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// `status.phase` and the `Ready` condition.
    Pod,
    /// The `Complete` and `Failed` conditions, and `status.active`.
    Job,
    /// `status.phase`: `Pending`, `Bound` (done and ready) or `Lost` (failed).
    Claim,
    /// None: succeeded and ready once it exists.
    Exists,
}

/// One kind of child.
#[derive(Debug)]
pub struct ChildKind {
    /// e.g. `v1`, `batch/v1`.
    pub api_version: &'static str,
    /// e.g. `Pod`.
    pub kind: &'static str,
    /// The rule of its name, and how an error words it.
    pub name_rule: (fn(&str) -> Verdict, &'static str),
    /// How its status makes its phase.
    pub lifecycle: Lifecycle,
}

const SUBDOMAIN: (fn(&str) -> Verdict, &str) =
    (policyhost_names::dns1123_subdomain, "a DNS-1123 subdomain");
const LABEL: (fn(&str) -> Verdict, &str) = (policyhost_names::dns1123_label, "a DNS-1123 label");

/// The kinds a policy may create by default.
pub const CHILD_KINDS: &[ChildKind] = &[
    ChildKind {
        api_version: "v1",
        kind: "Pod",
        name_rule: SUBDOMAIN,
        lifecycle: Lifecycle::Pod,
    },
    ChildKind {
        api_version: "v1",
        kind: "ConfigMap",
        name_rule: SUBDOMAIN,
        lifecycle: Lifecycle::Exists,
    },
    ChildKind {
        api_version: "v1",
        kind: "Service",
        name_rule: LABEL,
        lifecycle: Lifecycle::Exists,
    },
    ChildKind {
        api_version: "v1",
        kind: "Secret",
        name_rule: SUBDOMAIN,
        lifecycle: Lifecycle::Exists,
    },
    ChildKind {
        api_version: "v1",
        kind: "PersistentVolumeClaim",
        name_rule: SUBDOMAIN,
        lifecycle: Lifecycle::Claim,
    },
    ChildKind {
        api_version: "batch/v1",
        kind: "Job",
        name_rule: SUBDOMAIN,
        lifecycle: Lifecycle::Job,
    },
];

impl ChildKind {
    /// The row of `api_version` `kind`, if the host knows the kind.
    #[must_use]
    pub fn of(api_version: &str, kind: &str) -> Option<&'static Self> {
        CHILD_KINDS
            .iter()
            .find(|row| row.api_version == api_version && row.kind == kind)
    }

    /// How a child of `api_version` `kind` makes its phase.
    #[must_use]
    pub fn lifecycle_of(api_version: &str, kind: &str) -> Lifecycle {
        Self::of(api_version, kind).map_or(Lifecycle::Exists, |row| row.lifecycle)
    }

    /// Checks a child's name against the rule of its kind.
    ///
    /// # Errors
    ///
    /// Which rule the name breaks, and how.
    pub fn check_name(api_version: &str, kind: &str, name: &str) -> Result<(), String> {
        let (rule, what) = Self::of(api_version, kind).map_or(SUBDOMAIN, |row| row.name_rule);
        rule(name).map_err(|violation| format!("is not {what}: {violation}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_one_row_and_its_name_rule() {
        for (i, row) in CHILD_KINDS.iter().enumerate() {
            assert!(
                CHILD_KINDS[..i]
                    .iter()
                    .all(|other| (other.api_version, other.kind) != (row.api_version, row.kind)),
                "{} listed twice",
                row.kind
            );
        }
        for bad in ["", "Upper", "-lead", "trail-", "a..b", "under_score"] {
            assert!(
                ChildKind::check_name("v1", "Pod", bad).is_err(),
                "{bad:?} accepted"
            );
        }
        assert!(ChildKind::check_name("v1", "Pod", "a.b-c.d0").is_ok());
        assert!(ChildKind::check_name("v1", "PersistentVolumeClaim", "data.scratch").is_ok());
        assert_eq!(
            ChildKind::check_name("v1", "Service", "a.b").unwrap_err(),
            "is not a DNS-1123 label: must consist of lower-case letters, digits and '-'"
        );
        assert!(ChildKind::check_name("v1", "Pod", &"a".repeat(254)).is_err());
        assert!(ChildKind::check_name("example.com/v1", "Widget", "a.b").is_ok());
        assert_eq!(
            ChildKind::lifecycle_of("v1", "PersistentVolumeClaim"),
            Lifecycle::Claim
        );
        assert_eq!(
            ChildKind::lifecycle_of("example.com/v1", "Widget"),
            Lifecycle::Exists
        );
    }
}
