//! The publisher's side of a policy: what `policyhost policy push`, `diff`,
//! `promote` and `dev` do to a cluster. The operator never runs this code:
//! it serves what is published here, through the same ConfigMaps, and this
//! room sits above `policies/` and `oci/`, whose formats it writes.

pub mod candidate;
#[cfg(feature = "dev")]
pub mod dev_registry;
pub mod publish;
pub mod rollout;
