// Generated from guest-sdk/kinds.json by `POLICYHOST_BLESS=1 cargo test -p
// policyhost-sdk --test kinds`: edit that file, not this one.

//! What the builders write for each kind of child: its API version and kind,
//! the rule of its name, the restart policies it accepts, and the values
//! written when the policy sets none.

use policyhost_names::Verdict;

use super::{AccessMode, RestartPolicy};

/// A kind of child, as its builder writes it.
pub(crate) struct Kind {
    pub(crate) api_version: &'static str,
    pub(crate) kind: &'static str,
    /// What an error calls its name, e.g. `Pod name`.
    pub(crate) name_what: &'static str,
    pub(crate) name_rule: fn(&str) -> Verdict,
}

pub(crate) const POD: Kind = Kind {
    api_version: "v1",
    kind: "Pod",
    name_what: "Pod name",
    name_rule: policyhost_names::dns1123_subdomain,
};

pub(crate) const JOB: Kind = Kind {
    api_version: "batch/v1",
    kind: "Job",
    name_what: "Job name",
    name_rule: policyhost_names::dns1123_label,
};
pub(crate) const JOB_RESTART_POLICIES: &[RestartPolicy] =
    &[RestartPolicy::Never, RestartPolicy::OnFailure];
pub(crate) const JOB_RESTART_POLICY_RULE: &str = "must be Never or OnFailure";

pub(crate) const CONFIG_MAP: Kind = Kind {
    api_version: "v1",
    kind: "ConfigMap",
    name_what: "ConfigMap name",
    name_rule: policyhost_names::dns1123_subdomain,
};

pub(crate) const SERVICE: Kind = Kind {
    api_version: "v1",
    kind: "Service",
    name_what: "Service name",
    name_rule: policyhost_names::dns1035_label,
};
pub(crate) const SERVICE_TYPE: &str = "ClusterIP";

pub(crate) const PERSISTENT_VOLUME_CLAIM: Kind = Kind {
    api_version: "v1",
    kind: "PersistentVolumeClaim",
    name_what: "PersistentVolumeClaim name",
    name_rule: policyhost_names::dns1123_subdomain,
};
pub(crate) const PERSISTENT_VOLUME_CLAIM_ACCESS_MODE: AccessMode = AccessMode::ReadWriteOnce;

pub(crate) const DEFAULT_RESTART_POLICY: RestartPolicy = RestartPolicy::Never;
pub(crate) const PORT_PROTOCOL: &str = "TCP";
pub(crate) const PORT_NAME_MAX_LENGTH: usize = 15;
pub(crate) const PORT_NAME_LENGTH_RULE: &str = "must be at most 15 characters";
