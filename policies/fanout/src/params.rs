//! `spec.params` of a fanout DataJob.

use std::collections::BTreeMap;

use policyhost_sdk::PolicyError;
use serde::Deserialize;

/// The largest `replicas` accepted.
pub const MAX_REPLICAS: u32 = 1000;
/// The largest `backoffLimit` accepted.
pub const MAX_BACKOFF_LIMIT: u32 = 1000;

/// `spec.params`, camelCase in JSON:
/// `{"replicas": 3, "image": "busybox:1.36", "command": ["sh", "-c", "work"], "backoffLimit": 2}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Params {
    /// How many workers run, 1..=1000; default 1.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// The workers' image; required.
    pub image: String,
    /// The workers' command; default: the image's entrypoint.
    #[serde(default)]
    pub command: Vec<String>,
    /// How many worker failures are tolerated (each replaced) before the
    /// DataJob fails, 0..=1000; default 3.
    #[serde(default = "default_backoff_limit")]
    pub backoff_limit: u32,
    /// Annotations of every worker Pod (e.g. for a scheduler or a mesh); default none.
    #[serde(default)]
    pub pod_annotations: BTreeMap<String, String>,
    /// A volume shared by every worker; default none.
    #[serde(default)]
    pub scratch: Option<Scratch>,
}

/// `params.scratch`: `{"size": "10Gi", "storageClass": "shared"}`, the
/// PersistentVolumeClaim every worker mounts at [`crate::SCRATCH_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scratch {
    /// The storage requested, a quantity such as `10Gi`; required.
    pub size: String,
    /// The storage class, which must offer `ReadWriteMany`; default: the
    /// cluster's default class.
    #[serde(default)]
    pub storage_class: Option<String>,
}

fn default_replicas() -> u32 {
    1
}

fn default_backoff_limit() -> u32 {
    3
}

impl Params {
    /// Checks the ranges serde cannot express.
    ///
    /// # Errors
    ///
    /// [`PolicyError::InvalidParams`] naming the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(PolicyError::invalid_params(format!(
                "params.replicas: {} is out of range 1..={MAX_REPLICAS}",
                self.replicas
            )));
        }
        if self.backoff_limit > MAX_BACKOFF_LIMIT {
            return Err(PolicyError::invalid_params(format!(
                "params.backoffLimit: {} is out of range 0..={MAX_BACKOFF_LIMIT}",
                self.backoff_limit
            )));
        }
        if self.image.is_empty() || self.image.contains(char::is_whitespace) {
            return Err(PolicyError::invalid_params(format!(
                "params.image: {:?} is not an image reference",
                self.image
            )));
        }
        Ok(())
    }
}
