//! Children: create what is missing, update what this DataJob controls,
//! then prune the rest.
//!
//! Only objects this DataJob controls are ever changed: a missing child is
//! created with a create-only write (`POST`), so the API server itself
//! refuses a name someone else holds, however late that someone came
//! (409 `AlreadyExists` → one GET names the holder: a conflict). A child
//! the DataJob controls is updated by server-side apply naming the child's
//! `metadata.uid`, which the API server checks: the apply never creates an
//! object (a missing one is a 409) and never changes another object that
//! took the name (a 422). Nothing is ever adopted, whatever the timing.
//! Pruning deletes only what the owner index holds for the DataJob (objects
//! in its namespace whose controller reference is this DataJob), each with
//! a UID precondition, so an object that replaced a child under the same
//! name is never deleted.
//!
//! The host, not the policy, decides where children go: the namespace is the
//! DataJob's, the controller ownerReference and the `policyhost.dev/*`
//! labels are set here whatever the manifest said. A child whose manifest
//! hash matches the one it was last applied with is not sent again, so a
//! steady state costs no writes, and a new child costs one.
//!
//! A child that exists and changed is updated as its manifest declares
//! ([`UpdateStrategy`]): applied in place, deleted (UID precondition) to be
//! created anew once it is gone, or left as it is until it is gone.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::ApiResource;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tracing::debug;

use super::ownership::{self, Conflict, Holder, Verdict};
use super::{fields, slow_start};
use crate::cache::{ChildRecord, Children, ObjectKey};
use crate::crd::DataJob;
use crate::runtime::{ChildPhase, UpdateStrategy, ValidChild};
use crate::shard::Bucket;
use crate::vocabulary::{
    APPLIED_HASH_ANNOTATION, DATAJOB_LABEL, FIELD_MANAGER, MANAGED_BY_LABEL, SHARD_LABEL,
    created_by_operator,
};

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
    /// ([`super::ownership`]). Known from the cache: nothing of the result
    /// was written. Found by a create the API server refused: the children
    /// created before it stay (they are this DataJob's), nothing was
    /// updated or pruned.
    #[error("{}", describe(conflicts))]
    Conflict {
        /// Every conflicting child, in the result's order (never empty).
        conflicts: Vec<Conflict>,
    },
    /// The API server refused a create for a taken name, and then could not
    /// say who holds it.
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
    /// The API server refused to create a missing child.
    #[error("{kind} {name}: create failed")]
    Create {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server refused the apply of a child this DataJob controls
    /// (also when the object was deleted or replaced since the cache saw it).
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
    /// The API server refused to delete a child to create it anew
    /// ([`UpdateStrategy::Recreate`]).
    #[error("{kind} {name}: delete to recreate failed")]
    Recreate {
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
            _ if self.is_immutable_change() => "ImmutableChange",
            Self::UnwatchedKind { .. }
            | Self::Manifest { .. }
            | Self::Lookup { .. }
            | Self::Create { .. }
            | Self::Apply { .. }
            | Self::Recreate { .. }
            | Self::Prune { .. } => "ApplyFailed",
        }
    }
}

impl Error {
    /// True when the API server refused the update of a child for changing
    /// what may not change (a Pod's containers, a Job's template, any field
    /// its validation calls immutable): applying the same answer again
    /// cannot help, only a new answer (a new version, a new spec) or the
    /// child's deletion can.
    #[must_use]
    pub fn is_immutable_change(&self) -> bool {
        matches!(self, Self::Apply { source, .. } if refuses_as_immutable(source))
    }
}

/// True when the API server refused a write for changing what may not
/// change (a 422 whose message or causes say so).
#[must_use]
pub fn refuses_as_immutable(error: &kube::Error) -> bool {
    let kube::Error::Api(status) = error else {
        return false;
    };
    let says = |text: &str| {
        text.contains("immutable")
            || text.contains("may not change")
            || text.contains("updates may not")
    };
    status.code == 422
        && (says(&status.message)
            || status
                .details
                .iter()
                .flat_map(|details| &details.causes)
                .any(|cause| says(&cause.message)))
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
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The writes to children, in the order they were made.
    pub writes: Vec<Written>,
    /// Children already as desired.
    pub unchanged: u32,
    /// Desired children that exist but are being deleted (kind and name):
    /// not as the policy asked until they are gone and created again.
    pub terminating: Vec<(String, String)>,
    /// Children that differ from the manifest and keep their earlier form:
    /// `OnDelete`, or a finished Pod a `Recreate` could not change in place.
    pub held: u32,
}

impl Summary {
    /// Whether the pass wrote anything to the children.
    #[must_use]
    pub fn wrote(&self) -> bool {
        !self.writes.is_empty()
    }

    fn wrote_to(&mut self, verb: Verb, child: &ValidChild) {
        self.writes.push(Written {
            verb,
            kind: child.kind.clone(),
            name: child.name.clone(),
        });
    }
}

/// One write the API server took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// What was done.
    pub verb: Verb,
    /// The child's kind.
    pub kind: String,
    /// The child's name.
    pub name: String,
}

/// What a write did to a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Created.
    Created,
    /// Changed by server-side apply.
    Applied,
    /// Deleted, to be created in its new form.
    Recreated,
    /// Deleted: no longer desired.
    Pruned,
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.verb {
            Verb::Created => "created",
            Verb::Applied => "applied",
            Verb::Recreated => "deleted to recreate",
            Verb::Pruned => "pruned",
        };
        write!(f, "{verb} {} {}", self.kind, self.name)
    }
}

/// What to do with one desired child.
pub(super) enum Step {
    /// Nothing: it is as desired.
    Unchanged,
    /// It is this DataJob's and is being deleted: its Deleted event brings
    /// the DataJob back to create it again.
    Terminating,
    /// Not this DataJob's (as far as the cache knows): create it.
    Create,
    /// This DataJob's object with this UID: apply the manifest to it.
    Update(Target),
    /// This DataJob's object, changed, declared `RecreateAlways`: delete it
    /// to create it anew.
    Recreate(Target),
    /// This DataJob's object, changed, declared `OnDelete`: leave it be.
    Held,
}

/// The object an update applies to.
pub(super) struct Target {
    /// Its `metadata.uid`.
    pub(super) uid: String,
    /// Whether fields of the operator's create are to be handed to its
    /// apply first ([`super::fields`]).
    fields_from_create: bool,
    /// A Pod that has run to its end: the record of a run, which
    /// `Recreate` never replaces.
    pub(super) finished_pod: bool,
}

/// A desired child as the host places it: its manifest and API resource.
pub(super) struct Planned<'a> {
    pub(super) child: &'a ValidChild,
    pub(super) resource: &'a ApiResource,
    pub(super) manifest: Map<String, Value>,
}

/// Makes the cluster hold exactly `desired` for `job`: creates the missing
/// children, updates those `job` controls that changed, and deletes the
/// controlled children (`current`, from the owner index) that are not
/// desired. A name held by anyone else is a conflict: nothing is written
/// when the cache knows the holder; when only the API server does (a
/// refused create), the creates before it stay and nothing else is written.
/// Creates go in batches of 1, 2, 4, … ([`slow_start`]).
pub async fn reconcile_children(
    client: &Client,
    caches: &dyn Children,
    instance: &str,
    job: &DataJob,
    desired: &[ValidChild],
    current: &[Arc<ChildRecord>],
    summary: &mut Summary,
) -> Result<()> {
    let namespace = job.namespace().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let plan = plan(caches, instance, job, desired, current)?;
    let mut conflicts = Vec::new();
    let mut creates = Vec::new();
    let mut updates = Vec::new();
    let mut recreations = Vec::new();
    let api = |resource| -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &namespace, resource)
    };
    for (planned, step) in plan {
        match step {
            Step::Unchanged => summary.unchanged += 1,
            Step::Held => summary.held += 1,
            Step::Terminating => {
                let child = planned.child;
                summary
                    .terminating
                    .push((child.kind.clone(), child.name.clone()));
            }
            Step::Recreate(target) => recreations.push((planned, target)),
            Step::Create => creates.push(planned),
            Step::Update(target) => updates.push((planned, target)),
        }
    }
    let created = slow_start::in_batches(creates, |planned| {
        let (api, uid) = (api(planned.resource), uid.as_str());
        async move {
            let created = create(&api, &planned, uid).await?;
            Ok::<_, Error>((planned, created))
        }
    })
    .await;
    for (planned, created) in created.done {
        match created {
            Created::New => summary.wrote_to(Verb::Created, planned.child),
            Created::Ours(target) => updates.push((planned, target)),
            Created::Taken(holder) => conflicts.push(Conflict {
                kind: planned.child.kind.clone(),
                name: planned.child.name.clone(),
                holder,
            }),
        }
    }
    if let Some(error) = created.error {
        return Err(error);
    }
    if !conflicts.is_empty() {
        return Err(Error::Conflict { conflicts });
    }
    for (planned, target) in updates {
        let api = api(planned.resource);
        match update(&api, &planned, &target).await {
            Ok(()) => summary.wrote_to(Verb::Applied, planned.child),
            Err(error)
                if planned.child.update == UpdateStrategy::Recreate
                    && error.is_immutable_change() =>
            {
                if target.finished_pod {
                    summary.held += 1;
                } else {
                    recreations.push((planned, target));
                }
            }
            Err(error) => return Err(error),
        }
    }
    for (planned, target) in recreations {
        recreate(&api(planned.resource), &planned, &target).await?;
        let child = planned.child;
        summary.wrote_to(Verb::Recreated, child);
        summary
            .terminating
            .push((child.kind.clone(), child.name.clone()));
    }
    prune(client, caches, &namespace, desired, current, summary).await
}

/// Decides each desired child's step from the cache alone, and refuses the
/// result if the cache shows a name held by another DataJob.
pub(super) fn plan<'a>(
    caches: &'a dyn Children,
    instance: &str,
    job: &DataJob,
    desired: &'a [ValidChild],
    current: &[Arc<ChildRecord>],
) -> Result<Vec<(Planned<'a>, Step)>> {
    let namespace = job.namespace().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let mut planned = Vec::with_capacity(desired.len());
    let mut conflicts = Vec::new();
    for child in desired {
        let resource = caches
            .resource(&child.api_version, &child.kind)
            .ok_or_else(|| Error::UnwatchedKind {
                api_version: child.api_version.clone(),
                kind: child.kind.clone(),
                name: child.name.clone(),
            })?;
        let (manifest, hash) = prepare(child, job, instance)?;
        let ours = current
            .iter()
            .find(|r| r.child.kind == child.kind && r.child.name == child.name)
            .cloned()
            .or_else(|| {
                // The owner index and the store are read at different
                // moments: a child created since `current` was read is ours too.
                let key = ObjectKey::namespaced(namespace.as_str(), child.name.as_str());
                (ownership::from_cache(caches, resource, &key, &uid) == Some(Verdict::Ours))
                    .then(|| caches.get(&resource.api_version, &resource.kind, &key))
                    .flatten()
            });
        let step = match ours {
            Some(record) if record.child.deleting => Step::Terminating,
            Some(record) if record.applied_hash.as_deref() == Some(hash.as_str()) => {
                Step::Unchanged
            }
            Some(record) => {
                let target = Target {
                    uid: record.uid.clone(),
                    fields_from_create: record.fields_from_create,
                    finished_pod: is_finished_pod(&record),
                };
                match child.update {
                    UpdateStrategy::OnDelete => Step::Held,
                    UpdateStrategy::RecreateAlways => Step::Recreate(target),
                    UpdateStrategy::InPlace | UpdateStrategy::Recreate => Step::Update(target),
                }
            }
            None => {
                let key = ObjectKey::namespaced(namespace.as_str(), child.name.as_str());
                if let Some(Verdict::Taken(holder)) =
                    ownership::from_cache(caches, resource, &key, &uid)
                {
                    conflicts.push(Conflict {
                        kind: child.kind.clone(),
                        name: child.name.clone(),
                        holder,
                    });
                }
                Step::Create
            }
        };
        planned.push((
            Planned {
                child,
                resource,
                manifest,
            },
            step,
        ));
    }
    if conflicts.is_empty() {
        Ok(planned)
    } else {
        Err(Error::Conflict { conflicts })
    }
}

/// What a create found.
enum Created {
    /// The object is new.
    New,
    /// The name was taken by this DataJob's own object (a create of an
    /// earlier reconcile the cache has not seen yet).
    Ours(Target),
    /// The name was taken by someone else.
    Taken(Holder),
}

/// Creates a missing child; on 409 `AlreadyExists`, one GET of the object's
/// metadata says whose it is.
async fn create(api: &Api<DynamicObject>, planned: &Planned<'_>, job_uid: &str) -> Result<Created> {
    let child = planned.child;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match api.create(&params, &created(planned)?).await {
        Ok(_) => {
            debug!(kind = %child.kind, name = %child.name, "child created");
            Ok(Created::New)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let found =
                api.get_metadata_opt(&child.name)
                    .await
                    .map_err(|source| Error::Lookup {
                        kind: child.kind.clone(),
                        name: child.name.clone(),
                        source,
                    })?;
            let Some(found) = found else {
                // Deleted since: the retry creates it.
                return Err(Error::Create {
                    kind: child.kind.clone(),
                    name: child.name.clone(),
                    source: kube::Error::Api(status),
                });
            };
            let owners = found
                .metadata
                .owner_references
                .as_deref()
                .unwrap_or_default();
            Ok(match ownership::judge(owners, job_uid) {
                Verdict::Ours => Created::Ours(Target {
                    uid: found.metadata.uid.clone().unwrap_or_default(),
                    fields_from_create: created_by_operator(
                        found.metadata.managed_fields.as_deref().unwrap_or_default(),
                    ),
                    // Created an instant ago by this DataJob's earlier pass.
                    finished_pod: false,
                }),
                Verdict::Taken(holder) => Created::Taken(holder),
            })
        }
        Err(source) => Err(Error::Create {
            kind: child.kind.clone(),
            name: child.name.clone(),
            source,
        }),
    }
}

/// The object a create of `planned` sends.
pub(super) fn created(planned: &Planned<'_>) -> Result<DynamicObject> {
    serde_json::from_value(Value::Object(planned.manifest.clone())).map_err(|source| {
        Error::Manifest {
            kind: planned.child.kind.clone(),
            name: planned.child.name.clone(),
            source,
        }
    })
}

/// Applies the manifest to the object `target`: the API server refuses
/// the apply if the name now holds another object, or none.
async fn update(api: &Api<DynamicObject>, planned: &Planned<'_>, target: &Target) -> Result<()> {
    let child = planned.child;
    let refused = |source| Error::Apply {
        kind: child.kind.clone(),
        name: child.name.clone(),
        source,
    };
    if target.fields_from_create {
        fields::hand_over(api, &child.name, &target.uid)
            .await
            .map_err(refused)?;
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(
        &child.name,
        &params,
        &applied(planned.manifest.clone(), target),
    )
    .await
    .map_err(refused)?;
    debug!(kind = %child.kind, name = %child.name, "child applied");
    Ok(())
}

/// The server-side apply of `manifest` to the object `target`, naming its
/// UID so that the API server refuses it if the name now holds another
/// object, or none.
pub(super) fn applied(mut manifest: Map<String, Value>, target: &Target) -> Patch<Value> {
    if let Some(Value::Object(metadata)) = manifest.get_mut("metadata") {
        metadata.insert("uid".into(), Value::String(target.uid.clone()));
    }
    Patch::Apply(Value::Object(manifest))
}

/// Deletes the object `target` to create it anew: its Deleted event brings
/// the DataJob back, to a pass that creates it in its new form.
async fn recreate(api: &Api<DynamicObject>, planned: &Planned<'_>, target: &Target) -> Result<()> {
    let child = planned.child;
    delete(api, &child.name, &target.uid)
        .await
        .map_err(|source| Error::Recreate {
            kind: child.kind.clone(),
            name: child.name.clone(),
            source,
        })?;
    debug!(kind = %child.kind, name = %child.name, "child deleted to be recreated");
    Ok(())
}

/// Deletes the object `uid` named `name`, if it still is there: never an
/// object that replaced it under the same name.
async fn delete(api: &Api<DynamicObject>, name: &str, uid: &str) -> kube::Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        // Already gone, or replaced by another object of the same name.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        other => other.map(drop),
    }
}

/// A Pod that ran to its end.
fn is_finished_pod(record: &ChildRecord) -> bool {
    let child = &record.child;
    child.api_version == "v1"
        && child.kind == "Pod"
        && matches!(child.phase, ChildPhase::Succeeded | ChildPhase::Failed)
}

/// Deletes the controlled children that are not desired, each with a UID
/// precondition.
async fn prune(
    client: &Client,
    caches: &dyn Children,
    namespace: &str,
    desired: &[ValidChild],
    current: &[Arc<ChildRecord>],
    summary: &mut Summary,
) -> Result<()> {
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
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        delete(&api, &child.name, &record.uid)
            .await
            .map_err(|source| Error::Prune {
                kind: child.kind.clone(),
                name: child.name.clone(),
                source,
            })?;
        debug!(kind = %child.kind, name = %child.name, "child pruned");
        summary.writes.push(Written {
            verb: Verb::Pruned,
            kind: child.kind.clone(),
            name: child.name.clone(),
        });
    }
    Ok(())
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
            let bucket = Bucket::of_uid(&job.uid().unwrap_or_default());
            labels.insert(
                SHARD_LABEL.into(),
                Value::String(bucket.index().to_string()),
            );
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
            update: UpdateStrategy::InPlace,
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
        let apply = |code: u16, message: &str| Error::Apply {
            kind: "Pod".into(),
            name: "w".into(),
            source: kube::Error::Api(
                kube::core::Status::failure(message, "Invalid")
                    .with_code(code)
                    .boxed(),
            ),
        };
        let immutable = apply(
            422,
            "Pod \"w\" is invalid: spec: Forbidden: pod updates may not change fields",
        );
        assert!(immutable.is_immutable_change());
        assert_eq!(immutable.reason(), "ImmutableChange");
        assert_eq!(
            apply(
                422,
                "Job \"j\" is invalid: spec.template: Invalid value: field is immutable"
            )
            .reason(),
            "ImmutableChange"
        );
        assert_eq!(
            apply(
                422,
                "spec.containers: Forbidden: pod updates may not add or remove containers"
            )
            .reason(),
            "ImmutableChange"
        );
        assert_eq!(
            apply(422, "spec.replicas: Invalid value: -1").reason(),
            "ApplyFailed"
        );
        assert_eq!(apply(500, "field is immutable").reason(), "ApplyFailed");
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
