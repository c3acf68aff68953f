//! Children: server-side apply of the desired set, then prune the rest.
//!
//! Only objects this DataJob controls are ever written: every desired child
//! is checked first ([`super::ownership`]), and one whose name is taken by
//! anyone else refuses the whole result. Pruning deletes only what the
//! owner index holds for the DataJob's UID (objects whose controller
//! reference is this DataJob), each with a UID precondition, so an object
//! that replaced a child under the same name is never deleted.
//!
//! The host, not the policy, decides where children go: the namespace is the
//! DataJob's, the controller ownerReference and the `policyhost.dev/*`
//! labels are set here whatever the manifest said. A child whose manifest
//! hash matches the one it was last applied with is not sent again, so a
//! steady state costs no writes.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::ApiResource;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tracing::debug;

use super::ownership::{self, Conflict, Verdict};
use crate::cache::{APPLIED_HASH_ANNOTATION, ChildCaches, ChildRecord, ObjectKey};
use crate::crd::DataJob;
use crate::runtime::ValidChild;
use crate::watch::{DATAJOB_LABEL, MANAGED_BY_LABEL};

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "policyhost";

/// The result type of applying children.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the desired children could not all be applied.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The policy may create this kind, but the operator does not watch it,
    /// so it could never see or prune it (add it to `--child-kind`).
    #[error("{kind} {name}: the operator does not watch {api_version} {kind}")]
    UnwatchedKind {
        /// The child's `apiVersion`.
        api_version: String,
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
    },
    /// A manifest could not be read back as a JSON object (never for a
    /// validated child).
    #[error("{kind} {name}: the manifest is not a JSON object")]
    Manifest {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// Desired children name objects this DataJob does not control
    /// ([`super::ownership`]): nothing of the result was applied.
    #[error("{}", describe(conflicts))]
    Conflict {
        /// Every conflicting child, in the result's order (never empty).
        conflicts: Vec<Conflict>,
    },
    /// The API server could not say whether a child's name is taken.
    #[error("{kind} {name}: cannot read the object of that name")]
    Lookup {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server refused the apply.
    #[error("{kind} {name}: server-side apply failed")]
    Apply {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server refused to delete a child no longer desired.
    #[error("{kind} {name}: prune failed")]
    Prune {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// A short UpperCamelCase name for conditions, Events and metrics labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Conflict { .. } => "ChildConflict",
            Self::UnwatchedKind { .. }
            | Self::Manifest { .. }
            | Self::Lookup { .. }
            | Self::Apply { .. }
            | Self::Prune { .. } => "ApplyFailed",
        }
    }
}

/// The first conflict, and how many more there are.
fn describe(conflicts: &[Conflict]) -> String {
    let Some(first) = conflicts.first() else {
        return "a desired child conflicts with an existing object".into();
    };
    match conflicts.len() {
        1 => first.to_string(),
        2 => format!("{first} (and 1 more child conflicts)"),
        n => format!("{first} (and {} more children conflict)", n - 1),
    }
}

/// What one apply pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Children sent to the API server (created or changed).
    pub applied: u32,
    /// Children already as desired.
    pub unchanged: u32,
    /// Children deleted because they are no longer desired.
    pub pruned: u32,
}

/// Makes the cluster hold exactly `desired` for `job`: checks that every
/// desired child is absent or controlled by `job` ([`ownership`]), then
/// applies what changed and deletes the controlled children (`current`,
/// from the owner index) that are not desired. One conflict applies and
/// prunes nothing.
pub async fn reconcile_children(
    client: &Client,
    caches: &ChildCaches,
    instance: &str,
    job: &DataJob,
    desired: &[ValidChild],
    current: &[Arc<ChildRecord>],
) -> Result<Summary> {
    let namespace = job.namespace().unwrap_or_default();
    let mut summary = Summary::default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let resources = check_ownership(client, caches, job, desired).await?;
    for (child, resource) in desired.iter().zip(resources) {
        let (manifest, hash) = prepare(child, job, instance)?;
        let existing = current
            .iter()
            .find(|r| r.child.kind == child.kind && r.child.name == child.name);
        if let Some(existing) = existing {
            // Being deleted: its Deleted event brings us back to re-create it.
            if existing.child.deleting || existing.applied_hash.as_deref() == Some(hash.as_str()) {
                summary.unchanged += 1;
                continue;
            }
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, resource);
        api.patch(&child.name, &params, &Patch::Apply(Value::Object(manifest)))
            .await
            .map_err(|source| Error::Apply {
                kind: child.kind.clone(),
                name: child.name.clone(),
                source,
            })?;
        debug!(kind = %child.kind, name = %child.name, %hash, "child applied");
        summary.applied += 1;
    }

    let wanted: HashSet<(&str, &str)> = desired
        .iter()
        .map(|c| (c.kind.as_str(), c.name.as_str()))
        .collect();
    for record in current {
        let child = &record.child;
        if child.deleting || wanted.contains(&(child.kind.as_str(), child.name.as_str())) {
            continue;
        }
        let Some(resource) = caches.resource(&child.api_version, &child.kind) else {
            continue;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, resource);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(record.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&child.name, &params).await {
            Ok(_) => {}
            // Already gone, or replaced by another object of the same name.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(source) => {
                return Err(Error::Prune {
                    kind: child.kind.clone(),
                    name: child.name.clone(),
                    source,
                });
            }
        }
        debug!(kind = %child.kind, name = %child.name, "child pruned");
        summary.pruned += 1;
    }
    Ok(summary)
}

/// The API resource of every desired child, once each is known to be
/// absent or controlled by `job`: the cache answers for the children that
/// exist (the steady state costs no request), one GET of its metadata for
/// each of the others.
async fn check_ownership<'a>(
    client: &Client,
    caches: &'a ChildCaches,
    job: &DataJob,
    desired: &[ValidChild],
) -> Result<Vec<&'a ApiResource>> {
    let namespace = job.namespace().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let mut resources = Vec::with_capacity(desired.len());
    let mut conflicts = Vec::new();
    for child in desired {
        let resource = caches
            .resource(&child.api_version, &child.kind)
            .ok_or_else(|| Error::UnwatchedKind {
                api_version: child.api_version.clone(),
                kind: child.kind.clone(),
                name: child.name.clone(),
            })?;
        let key = ObjectKey::namespaced(namespace.as_str(), child.name.as_str());
        let verdict = match ownership::from_cache(caches, resource, &key, &uid) {
            Some(verdict) => verdict,
            None => ownership::from_server(client, resource, &namespace, &child.name, &uid)
                .await
                .map_err(|source| Error::Lookup {
                    kind: child.kind.clone(),
                    name: child.name.clone(),
                    source,
                })?,
        };
        if let Verdict::Taken(holder) = verdict {
            conflicts.push(Conflict {
                kind: child.kind.clone(),
                name: child.name.clone(),
                holder,
            });
        }
        resources.push(resource);
    }
    if conflicts.is_empty() {
        Ok(resources)
    } else {
        Err(Error::Conflict { conflicts })
    }
}

/// The manifest to apply, with the host's placement, and its hash.
///
/// The hash covers everything the host sends except the hash annotation
/// itself, so any change of the policy's manifest or of the placement
/// changes it.
pub fn prepare(
    child: &ValidChild,
    job: &DataJob,
    instance: &str,
) -> Result<(Map<String, Value>, String)> {
    let namespace = job.namespace().unwrap_or_default();
    let mut manifest = child
        .manifest_in(&namespace)
        .map_err(|source| Error::Manifest {
            kind: child.kind.clone(),
            name: child.name.clone(),
            source,
        })?;
    let metadata = manifest
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    if let Value::Object(metadata) = metadata {
        metadata.insert("namespace".into(), Value::String(namespace));
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if !labels.is_object() {
            *labels = Value::Object(Map::new());
        }
        if let Value::Object(labels) = labels {
            labels.insert(MANAGED_BY_LABEL.into(), Value::String(instance.to_owned()));
            labels.insert(DATAJOB_LABEL.into(), Value::String(job.name_any()));
        }
        let owner = controller_reference(job);
        metadata.insert(
            "ownerReferences".into(),
            serde_json::to_value([owner]).unwrap_or(Value::Null),
        );
    }
    let hash = manifest_hash(&manifest);
    if let Some(Value::Object(metadata)) = manifest.get_mut("metadata") {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !annotations.is_object() {
            *annotations = Value::Object(Map::new());
        }
        if let Value::Object(annotations) = annotations {
            annotations.insert(APPLIED_HASH_ANNOTATION.into(), Value::String(hash.clone()));
        }
    }
    Ok((manifest, hash))
}

/// The ownerReference that makes `job` a child's controller: garbage
/// collection deletes the child with its DataJob, and foreground deletion
/// waits for it.
#[must_use]
pub fn controller_reference(job: &DataJob) -> OwnerReference {
    OwnerReference {
        api_version: DataJob::api_version(&()).into_owned(),
        kind: DataJob::kind(&()).into_owned(),
        name: job.name_any(),
        uid: job.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn manifest_hash(manifest: &Map<String, Value>) -> String {
    // serde_json maps are ordered by key, so the encoding is canonical.
    let bytes = serde_json::to_vec(manifest).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    hex::encode(&digest[..12])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::crd::DataJobSpec;

    fn job() -> DataJob {
        let mut job = DataJob::new("etl", DataJobSpec::default());
        job.metadata.namespace = Some("team".into());
        job.metadata.uid = Some("job-uid".into());
        job
    }

    fn child(manifest: Value) -> ValidChild {
        ValidChild {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "c".into(),
            manifest: manifest.to_string(),
        }
    }

    #[test]
    fn the_host_sets_namespace_labels_owner_and_hash() {
        let (manifest, hash) = prepare(
            &child(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "labels": {"app": "x"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o"}]},
                "data": {"k": "v"}})),
            &job(),
            "prod",
        )
        .unwrap();
        let meta = &manifest["metadata"];
        assert_eq!(meta["namespace"], "team");
        assert_eq!(meta["labels"]["app"], "x");
        assert_eq!(meta["labels"][MANAGED_BY_LABEL], "prod");
        assert_eq!(meta["labels"][DATAJOB_LABEL], "etl");
        let owners = meta["ownerReferences"].as_array().unwrap();
        assert_eq!(
            owners.len(),
            1,
            "the policy's own owner references are replaced"
        );
        assert_eq!(owners[0]["uid"], "job-uid");
        assert_eq!(owners[0]["controller"], true);
        assert_eq!(meta["annotations"][APPLIED_HASH_ANNOTATION], hash.as_str());
        assert_eq!(hash.len(), 24);
    }

    #[test]
    fn a_conflict_names_the_first_object_its_holder_and_how_many_more() {
        use super::super::ownership::Holder;
        let conflict = |name: &str| Conflict {
            kind: "ConfigMap".into(),
            name: name.into(),
            holder: Holder::DataJob {
                name: "first".into(),
            },
        };
        let error = |n: usize| Error::Conflict {
            conflicts: (0..n).map(|i| conflict(&format!("c{i}"))).collect(),
        };
        assert_eq!(
            error(1).to_string(),
            "ConfigMap c0 already exists and is controlled by DataJob first"
        );
        assert_eq!(
            error(2).to_string(),
            "ConfigMap c0 already exists and is controlled by DataJob first (and 1 more child conflicts)"
        );
        assert!(
            error(3)
                .to_string()
                .ends_with("(and 2 more children conflict)")
        );
        assert_eq!(error(1).reason(), "ChildConflict");
        assert_eq!(
            Error::UnwatchedKind {
                api_version: "v1".into(),
                kind: "Secret".into(),
                name: "s".into()
            }
            .reason(),
            "ApplyFailed"
        );
    }

    #[test]
    fn the_hash_changes_with_the_manifest_and_only_with_it() {
        let manifest = |v: &str| {
            child(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": v}}),
            )
        };
        let (_, a) = prepare(&manifest("1"), &job(), "prod").unwrap();
        let (_, again) = prepare(&manifest("1"), &job(), "prod").unwrap();
        let (_, b) = prepare(&manifest("2"), &job(), "prod").unwrap();
        let (_, other_instance) = prepare(&manifest("1"), &job(), "staging").unwrap();
        assert_eq!(a, again);
        assert_ne!(a, b);
        assert_ne!(a, other_instance);
    }
}
