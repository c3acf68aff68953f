//! Objects that name a DataJob of another namespace as their controller.
//!
//! ownerReferences are namespace-local: an object's owner is looked up by
//! UID in the object's own namespace. Anyone who can create objects in some
//! namespace can still copy another team's DataJob UID into a controller
//! reference and add the operator's labels, so such objects reach the
//! child cache. The owner index keys children by namespace *and* UID, so
//! they are never taken for children; this module only makes them
//! visible: each is logged once when it appears, and counted.

use prometheus_client::metrics::counter::Counter;
use tracing::warn;

use super::key::ObjectKey;
use super::records::ChildRecord;
use super::store::{Change, Index, Store};
use crate::crd::DataJob;

/// Spots child records whose controller is a DataJob of another namespace.
#[derive(Clone)]
pub struct Foreign {
    jobs: Store<DataJob>,
    by_uid: Index<DataJob>,
    seen: Counter,
}

impl Foreign {
    /// Looks DataJobs up in `jobs` through `by_uid` (an index by
    /// `metadata.uid`) and counts what it finds in `seen`.
    #[must_use]
    pub fn new(jobs: Store<DataJob>, by_uid: Index<DataJob>, seen: Counter) -> Self {
        Self { jobs, by_uid, seen }
    }

    /// The index function of DataJobs by `metadata.uid`, for [`Foreign::new`].
    #[must_use]
    pub fn uid_index(job: &DataJob) -> Vec<String> {
        job.metadata.uid.clone().into_iter().collect()
    }

    /// Logs and counts a record of `kind` that has just entered the cache,
    /// or changed controller, naming a DataJob of another namespace.
    pub fn observe(&self, kind: &str, change: &Change<ChildRecord>) {
        let record = match change {
            Change::Applied { old: None, new } => new,
            Change::Applied {
                old: Some(old),
                new,
            } if old.owner != new.owner => new,
            Change::Applied { .. } | Change::Deleted(_) => return,
        };
        if let Some(job) = self.claimed_job(record) {
            self.seen.inc();
            warn!(
                kind,
                object = %record.key,
                job = %job,
                "an object names a DataJob of another namespace as its controller; it is not that DataJob's child"
            );
        }
    }

    /// The DataJob of another namespace whose UID `record` names as its
    /// controller, if there is one in the cache.
    fn claimed_job(&self, record: &ChildRecord) -> Option<ObjectKey> {
        let owner = record.owner.as_ref()?;
        let namespace = record.key.namespace();
        self.jobs
            .lookup_keys(self.by_uid, owner.uid.as_str())
            .into_iter()
            .find(|job| job.namespace() != namespace)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::cache::Event;
    use crate::crd::DataJobSpec;
    use crate::projection::ChildObject;

    fn job(namespace: &str, name: &str, uid: &str) -> DataJob {
        let mut job = DataJob::new(name, DataJobSpec::default());
        job.metadata.namespace = Some(namespace.into());
        job.metadata.uid = Some(uid.into());
        job.metadata.resource_version = Some("1".into());
        job
    }

    fn record(namespace: &str, name: &str, owner_uid: &str) -> Arc<ChildRecord> {
        let object = ChildObject::deserialize(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1",
                "ownerReferences": [{"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
                    "name": "etl", "uid": owner_uid, "controller": true}]}}))
        .unwrap();
        Arc::new(ChildRecord::from_object(&object))
    }

    fn foreign() -> (Foreign, Counter) {
        let mut builder = Store::builder();
        let by_uid = builder.index("uid", Foreign::uid_index);
        let jobs = builder.build();
        jobs.apply(Event::Apply(job("team-a", "etl", "uid-a")));
        let seen = Counter::default();
        (Foreign::new(jobs, by_uid, seen.clone()), seen)
    }

    #[test]
    fn an_object_naming_a_datajob_of_another_namespace_is_counted_once() {
        let (foreign, seen) = foreign();
        let impostor = record("team-b", "etl-settings", "uid-a");
        foreign.observe(
            "ConfigMap",
            &Change::Applied {
                old: None,
                new: Arc::clone(&impostor),
            },
        );
        assert_eq!(seen.get(), 1);
        // Later changes of the same object, and its deletion, are not new.
        foreign.observe(
            "ConfigMap",
            &Change::Applied {
                old: Some(Arc::clone(&impostor)),
                new: Arc::clone(&impostor),
            },
        );
        foreign.observe("ConfigMap", &Change::Deleted(impostor));
        assert_eq!(seen.get(), 1);
    }

    #[test]
    fn a_child_in_its_datajobs_namespace_or_naming_no_known_datajob_is_not_foreign() {
        let (foreign, seen) = foreign();
        for new in [
            record("team-a", "etl-settings", "uid-a"),
            record("team-b", "orphan", "uid-gone"),
        ] {
            foreign.observe("ConfigMap", &Change::Applied { old: None, new });
        }
        assert_eq!(seen.get(), 0);
    }
}
