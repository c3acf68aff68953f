//! The children the host found for a DataJob, through its owner index.
//!
//! ```
//! use policyhost_sdk::testing::ChildFixture;
//! use policyhost_sdk::ChildPhase;
//!
//! let child = ChildFixture::pod("demo-0").phase(ChildPhase::Running).label("app", "demo").to_child();
//! assert!(child.is_pod() && child.phase.is_active());
//! assert_eq!(child.label("app"), Some("demo"));
//! ```

use crate::KeyValue;

/// The lifecycle phase of a child, as the host reads it from the child's status.
///
/// Pods map `status.phase`; Jobs map `Complete`/`Failed` to
/// [`Succeeded`](Self::Succeeded)/[`Failed`](Self::Failed); kinds without a
/// lifecycle (ConfigMap, Service) are [`Succeeded`](Self::Succeeded) once they exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChildPhase {
    /// Accepted but not started.
    Pending,
    /// Started and not finished.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully.
    Failed,
    /// The host cannot tell (e.g. the node stopped reporting).
    Unknown,
}

impl ChildPhase {
    /// True for [`Pending`](Self::Pending) and [`Running`](Self::Running): the
    /// child has not finished.
    #[must_use]
    pub fn is_active(self) -> bool {
        matches!(self, Self::Pending | Self::Running)
    }

    /// True for [`Succeeded`](Self::Succeeded) and [`Failed`](Self::Failed).
    #[must_use]
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// A child the host owns for this DataJob: a slim projection of the object
/// from the host's cache, not the full manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Child {
    /// e.g. `v1`, `batch/v1`.
    pub api_version: String,
    /// e.g. `Pod`, `Job`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// Lifecycle phase.
    pub phase: ChildPhase,
    /// Pod: its `Ready` condition is true.
    pub ready: bool,
    /// Deletion of the child has been requested.
    pub deleting: bool,
    /// `metadata.labels`, sorted by key.
    pub labels: Vec<KeyValue>,
}

impl Child {
    /// True if this child is of the given `apiVersion` and `kind`.
    #[must_use]
    pub fn is(&self, api_version: &str, kind: &str) -> bool {
        self.api_version == api_version && self.kind == kind
    }

    /// True for a core `v1` Pod.
    #[must_use]
    pub fn is_pod(&self) -> bool {
        self.is("v1", "Pod")
    }

    /// True for what runs and stops: a Pod or a batch Job. A claim, a
    /// ConfigMap or a Service only exists (an unbound claim stays
    /// `Pending` on a cluster that provisions none).
    #[must_use]
    pub fn runs(&self) -> bool {
        self.is_pod() || self.is("batch/v1", "Job")
    }

    /// The value of a label.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        crate::job::find(&self.labels, key)
    }
}
