//! What the operator caches: slim child records and DataJobs without their
//! managed fields.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use super::key::{ObjectKey, OwnerKey};
use super::store::Cached;
use crate::crd::DataJob;
use crate::projection::ChildObject;
use crate::runtime::Child;
use crate::vocabulary::{APPLIED_HASH_ANNOTATION, created_by_operator};

/// The DataJob that controls a child (its controller ownerReference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The DataJob's `metadata.uid`.
    pub uid: String,
    /// The DataJob's name (same namespace as the child).
    pub name: String,
}

/// A child as the cache keeps it: identity, controller, applied hash, and
/// the projection a policy sees. A few hundred bytes, whatever the size of
/// the object in the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildRecord {
    /// Namespace and name.
    pub key: ObjectKey,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// The controlling DataJob, if a DataJob controls it.
    pub owner: Option<Owner>,
    /// The value of [`APPLIED_HASH_ANNOTATION`], if set.
    pub applied_hash: Option<String>,
    /// Whether fields of the operator's create are still held apart from
    /// its apply's ([`crate::apply::fields`]).
    pub fields_from_create: bool,
    /// What the policy sees.
    pub child: Child,
}

impl ChildRecord {
    /// Projects a decoded child object.
    #[must_use]
    pub fn from_object(object: &ChildObject) -> Self {
        let meta = &object.metadata;
        let owner =
            controlling_datajob(meta.owner_references.as_deref().unwrap_or_default()).map(|r| {
                Owner {
                    uid: r.uid.clone(),
                    name: r.name.clone(),
                }
            });
        Self {
            key: ObjectKey::of(meta),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            owner,
            applied_hash: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(APPLIED_HASH_ANNOTATION))
                .cloned(),
            fields_from_create: created_by_operator(
                meta.managed_fields.as_deref().unwrap_or_default(),
            ),
            child: object.project(),
        }
    }
}

impl ChildRecord {
    /// The DataJob that controls this child, as the owner index keys it:
    /// in the child's own namespace, by UID.
    #[must_use]
    pub fn owner_key(&self) -> Option<OwnerKey> {
        let owner = self.owner.as_ref()?;
        Some(OwnerKey::new(
            self.key.namespace().unwrap_or_default(),
            owner.uid.as_str(),
        ))
    }
}

/// The controller reference of an object, if it names a DataJob of
/// `policyhost.dev`. Only one reference may be the controller; one of
/// another kind or group (an `example.com` DataJob) makes the object no
/// DataJob's child.
#[must_use]
pub fn controlling_datajob(owners: &[OwnerReference]) -> Option<&OwnerReference> {
    let controller = owners.iter().find(|r| r.controller == Some(true))?;
    let group = controller
        .api_version
        .split_once('/')
        .map_or("", |(group, _)| group);
    (controller.kind == DataJob::kind(&()) && group == DataJob::group(&())).then_some(controller)
}

/// The key DataJob `job`'s children are found under, once it has a UID.
#[must_use]
pub fn owner_key_of(job: &DataJob) -> Option<OwnerKey> {
    Some(OwnerKey::new(
        job.namespace().unwrap_or_default(),
        job.metadata.uid.as_deref()?,
    ))
}

impl Cached for ChildRecord {
    fn key(&self) -> ObjectKey {
        self.key.clone()
    }

    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

impl Cached for DataJob {
    fn key(&self) -> ObjectKey {
        ObjectKey::namespaced(self.namespace().unwrap_or_default(), self.name_any())
    }

    fn resource_version(&self) -> &str {
        self.metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }
}

/// Drops what the operator never reads from a DataJob before caching it:
/// `managedFields` can be larger than the rest of the object.
#[must_use]
pub fn slim_data_job(mut job: DataJob) -> DataJob {
    job.metadata.managed_fields = None;
    job
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_child_record_finds_its_controlling_datajob_and_applied_hash() {
        let object = ChildObject::deserialize(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "uid": "c-uid", "resourceVersion": "7",
                "annotations": {APPLIED_HASH_ANNOTATION: "abc"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Other", "name": "x", "uid": "x-uid"},
                    {"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob", "name": "j", "uid": "j-uid", "controller": true}
                ]}}))
        .unwrap();
        let record = ChildRecord::from_object(&object);
        assert_eq!(record.key, ObjectKey::namespaced("ns", "c"));
        assert_eq!(record.resource_version(), "7");
        assert_eq!(
            record.owner,
            Some(Owner {
                uid: "j-uid".into(),
                name: "j".into()
            })
        );
        assert_eq!(record.applied_hash.as_deref(), Some("abc"));
        assert_eq!(record.owner_key(), Some(OwnerKey::new("ns", "j-uid")));
        assert!(!record.fields_from_create);
    }

    #[test]
    fn a_child_the_operator_created_holds_its_fields_apart_until_handed_over() {
        let object = |operation: &str| {
            ChildObject::deserialize(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "ns", "managedFields": [
                    {"manager": "policyhost", "operation": operation, "apiVersion": "v1",
                        "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]}}))
            .unwrap()
        };
        assert!(ChildRecord::from_object(&object("Update")).fields_from_create);
        assert!(!ChildRecord::from_object(&object("Apply")).fields_from_create);
    }

    #[test]
    fn a_child_without_a_datajob_controller_has_no_owner() {
        let object = ChildObject::deserialize(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob", "name": "j", "uid": "u"}]}}))
        .unwrap();
        assert_eq!(ChildRecord::from_object(&object).owner, None);
    }

    #[test]
    fn slim_data_jobs_drop_managed_fields() {
        let mut job = DataJob::new("a", Default::default());
        job.metadata.managed_fields = Some(vec![Default::default()]);
        assert!(slim_data_job(job).metadata.managed_fields.is_none());
    }
}
