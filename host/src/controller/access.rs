//! Whether a DataJob may call its policy: never from the host's policy
//! namespace, only from a namespace its policy allows, and only while a
//! version of it serves.
//!
//! Both refusals are the tenant boundary of policy delivery. Children land in
//! their DataJob's namespace, so a DataJob in the policy namespace is the one
//! DataJob whose children could be policy ConfigMaps: it is refused before
//! anything is done for it (no finalizer, no call), with a condition and an
//! Event its author can read, rather than silently left out of the watch. A
//! policy's `data.allowedNamespaces` is its publisher's word on who may call it; a
//! DataJob elsewhere is refused the same way, and re-queued by the swap that
//! changes the list.

use std::sync::Arc;

use kube::ResourceExt;

use super::Shared;
use crate::crd::DataJob;
use crate::policies::{Caller, Unavailable};
use crate::runtime::Policy;

/// Why a DataJob may not call its policy now.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Denied {
    /// The DataJob is in the namespace the host loads policies from.
    #[error(
        "DataJobs are not run in namespace {namespace}: it holds this host's policy ConfigMaps, where a DataJob's children could publish or replace a policy; create the DataJob in another namespace"
    )]
    PolicyNamespace {
        /// The policy namespace.
        namespace: String,
    },
    /// The policy has no version in service, or does not allow the
    /// DataJob's namespace ([`Unavailable::NotAllowed`]).
    #[error("{0}")]
    Policy(Unavailable),
}

impl Denied {
    /// The condition and Event reason.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::PolicyNamespace { .. } => "PolicyNamespace",
            Self::Policy(Unavailable::NotAllowed { .. }) => "PolicyNotAllowed",
            Self::Policy(_) => "PolicyUnavailable",
        }
    }

    /// Whether the DataJob itself is refused (its namespace), rather than
    /// its policy missing: then nothing at all is done for it.
    pub(crate) fn refuses_the_job(&self) -> bool {
        matches!(
            self,
            Self::PolicyNamespace { .. } | Self::Policy(Unavailable::NotAllowed { .. })
        )
    }
}

/// The version of `job`'s policy that `job` may call.
pub(crate) fn policy(shared: &Shared, job: &DataJob) -> Result<Arc<Policy>, Denied> {
    let namespace = job.namespace().unwrap_or_default();
    if shared.policy_namespace.as_deref() == Some(namespace.as_str()) {
        return Err(Denied::PolicyNamespace { namespace });
    }
    shared
        .registry
        .get_for(&job.spec.policy, &caller(job, &namespace))
        .map_err(Denied::Policy)
}

/// Whether `job` is pinned to a version of its policy: its calls are not
/// shadowed, even by a pin to the serving digest.
pub(crate) fn pinned(shared: &Shared, job: &DataJob) -> bool {
    let namespace = job.namespace().unwrap_or_default();
    shared
        .registry
        .is_pinned(&job.spec.policy, &caller(job, &namespace))
}

fn caller<'a>(job: &'a DataJob, namespace: &'a str) -> Caller<'a> {
    Caller {
        namespace,
        name: job.metadata.name.as_deref().unwrap_or_default(),
        uid: job.metadata.uid.as_deref().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::access::Access;

    #[test]
    fn each_denial_has_its_reason_and_only_refusals_of_the_job_stop_everything() {
        let namespace = Denied::PolicyNamespace {
            namespace: "policyhost-system".into(),
        };
        assert_eq!(namespace.reason(), "PolicyNamespace");
        assert!(namespace.refuses_the_job());
        assert_eq!(
            namespace.to_string(),
            "DataJobs are not run in namespace policyhost-system: it holds this host's policy ConfigMaps, where a DataJob's children could publish or replace a policy; create the DataJob in another namespace"
        );
        let not_allowed = Denied::Policy(Unavailable::NotAllowed {
            namespace: "team-b".into(),
            allowed: Access::parse("team-a").expect("a list"),
        });
        assert_eq!(not_allowed.reason(), "PolicyNotAllowed");
        assert!(not_allowed.refuses_the_job());
        assert!(not_allowed.to_string().contains("namespace team-b"));
        let unknown = Denied::Policy(Unavailable::Unknown);
        assert_eq!(unknown.reason(), "PolicyUnavailable");
        assert!(!unknown.refuses_the_job(), "a missing policy may come");
        assert_eq!(unknown.to_string(), "no policy of this name is loaded");
    }
}
