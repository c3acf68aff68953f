//! How the host changes a child that exists when the policy asks for a new
//! form of it, declared per child with [`UPDATE_STRATEGY_ANNOTATION`]
//! (every builder's `update_strategy`).

/// The annotation that declares a child's update strategy: the one
/// `policyhost.dev/*` key a policy sets.
pub const UPDATE_STRATEGY_ANNOTATION: &str = "policyhost.dev/update-strategy";

/// What the host does with a child that exists and no longer matches the
/// policy's manifest.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UpdateStrategy {
    /// Apply the change to the object as it is (the default). A change the
    /// API server refuses as immutable (a Pod's containers, a Job's
    /// template) is the DataJob's `ImmutableChange` condition.
    #[default]
    InPlace,
    /// Apply in place; when the API server refuses the change as immutable,
    /// delete the child and create it anew. A finished Pod keeps its old
    /// form: it is the record of its run.
    Recreate,
    /// Delete and create anew on every change, finished Pods included.
    RecreateAlways,
    /// Leave the child as it is until it is gone; the next one is created
    /// in the new form.
    OnDelete,
}

impl UpdateStrategy {
    /// The annotation's value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InPlace => "InPlace",
            Self::Recreate => "Recreate",
            Self::RecreateAlways => "RecreateAlways",
            Self::OnDelete => "OnDelete",
        }
    }
}
