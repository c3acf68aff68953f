//! Apply conflicts: fields another manager owns that an apply would change.

use std::fmt;

use super::fieldset::Path;
use super::managed::Identity;

/// One field another manager owns, with the value the apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The manager that owns the field.
    pub manager: Identity,
    /// The field.
    pub path: Path,
}

/// Every conflict of one apply, sorted by manager then path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

/// One `Status.details.causes` item of a conflict response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `StatusCause.reason`: always `FieldManagerConflict` here.
    pub reason: &'static str,
    /// `StatusCause.message`, e.g. `conflict with "kubectl" using v1`.
    pub message: String,
    /// `StatusCause.field`, e.g. `.spec.replicas`.
    pub field: String,
}

impl Conflicts {
    /// The causes of the 409 response, one per conflicting field.
    #[must_use]
    pub fn causes(&self) -> Vec<Cause> {
        self.0
            .iter()
            .map(|c| Cause {
                reason: "FieldManagerConflict",
                message: format!("conflict with {}", c.manager.describe()),
                field: c.path.to_string(),
            })
            .collect()
    }
}

impl fmt::Display for Conflicts {
    /// The message kube-apiserver answers with:
    /// `Apply failed with 1 conflict: conflict with "mgr" using v1: .spec.x`,
    /// or for several, one `conflicts with "mgr":` line per manager and one
    /// `- .path` line per field.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [one] = self.0.as_slice() {
            return write!(
                f,
                "Apply failed with 1 conflict: conflict with {}: {}",
                one.manager.describe(),
                one.path
            );
        }
        write!(f, "Apply failed with {} conflicts: ", self.0.len())?;
        let mut lines = Vec::new();
        let mut current: Option<String> = None;
        for conflict in &self.0 {
            let manager = conflict.manager.describe();
            if current.as_ref() != Some(&manager) {
                lines.push(format!("conflicts with {manager}:"));
                current = Some(manager);
            }
            lines.push(format!("- {}", conflict.path));
        }
        write!(f, "{}", lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::fieldset::PathElement;
    use crate::apply::managed::Operation;

    fn path(names: &[&str]) -> Path {
        Path(names.iter().map(|n| PathElement::field(n)).collect())
    }

    #[test]
    fn one_conflict_reads_like_kube_apiserver() {
        let conflicts = Conflicts(vec![Conflict {
            manager: Identity::new("mgr", Operation::Update, "", "v1"),
            path: path(&["spec", "x"]),
        }]);
        assert_eq!(
            conflicts.to_string(),
            "Apply failed with 1 conflict: conflict with \"mgr\" using v1: .spec.x"
        );
        assert_eq!(
            conflicts.causes(),
            vec![Cause {
                reason: "FieldManagerConflict",
                message: "conflict with \"mgr\" using v1".into(),
                field: ".spec.x".into(),
            }]
        );
    }

    #[test]
    fn several_conflicts_are_grouped_by_manager() {
        let apply = Identity::new("a", Operation::Apply, "", "v1");
        let update = Identity::new("b", Operation::Update, "", "apps/v1");
        let conflicts = Conflicts(vec![
            Conflict {
                manager: apply.clone(),
                path: path(&["spec", "replicas"]),
            },
            Conflict {
                manager: apply,
                path: path(&["spec", "paused"]),
            },
            Conflict {
                manager: update,
                path: path(&["metadata", "labels", "x"]),
            },
        ]);
        assert_eq!(
            conflicts.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"a\":\n- .spec.replicas\n\
             - .spec.paused\nconflicts with \"b\" using apps/v1:\n- .metadata.labels.x"
        );
    }
}
