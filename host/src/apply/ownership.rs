//! Ownership: the operator modifies or deletes only objects it created for
//! that DataJob. Every desired child is judged by the object of its name
//! in the DataJob's namespace:
//!
//! | the object | verdict | what [`super::children`] does |
//! |---|---|---|
//! | in the owner index under this DataJob (its namespace and UID) | ours | server-side apply naming the object's UID |
//! | in the child cache, controlled by another DataJob | conflict | nothing: the result is refused |
//! | absent from the cache, or cached without a DataJob controller | unknown | a create-only `POST`; on 409 one GET of its metadata names the holder |
//!
//! The API server has the last word on every write: a create never
//! overwrites, and an apply naming a UID never creates nor reaches another
//! object, so no timing of someone else's create makes the operator adopt
//! an object. One conflict refuses the result ([`super::children`] says
//! how much of it was written).

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::ApiResource;

use crate::cache::{Children, ObjectKey, controlling_datajob};

/// Who controls an object the operator may not touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// Another DataJob (of this operator instance or another).
    DataJob {
        /// Its name, in the child's namespace.
        name: String,
    },
    /// An object of another kind (a Deployment's ReplicaSet, ...).
    Object {
        /// Its `apiVersion`.
        api_version: String,
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// Nothing: someone created it by hand or with another tool.
    Nobody,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DataJob { name } => write!(f, "controlled by DataJob {name}"),
            Self::Object {
                api_version,
                kind,
                name,
            } => write!(f, "controlled by {api_version} {kind} {name}"),
            Self::Nobody => f.write_str("not controlled by this DataJob (it has no controller)"),
        }
    }
}

/// A desired child whose name is taken by an object this DataJob does not control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The child's kind.
    pub kind: String,
    /// The child's name.
    pub name: String,
    /// Who controls the object of that name.
    pub holder: Holder,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} already exists and is {}",
            self.kind, self.name, self.holder
        )
    }
}

/// Whose an existing object is, for a DataJob that wants its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// This DataJob controls it: the apply updates it.
    Ours,
    /// Someone else holds the name.
    Taken(Holder),
}

/// The verdict on an object with these ownerReferences, for the DataJob
/// with `job_uid`. Only the controller reference counts, and only as a
/// DataJob of `policyhost.dev`: a UID is unique, so it is compared alone.
#[must_use]
pub fn judge(owners: &[OwnerReference], job_uid: &str) -> Verdict {
    let Some(controller) = owners.iter().find(|o| o.controller == Some(true)) else {
        return Verdict::Taken(Holder::Nobody);
    };
    match controlling_datajob(owners) {
        Some(owner) if owner.uid == job_uid && !job_uid.is_empty() => Verdict::Ours,
        Some(owner) => Verdict::Taken(Holder::DataJob {
            name: owner.name.clone(),
        }),
        None => Verdict::Taken(Holder::Object {
            api_version: controller.api_version.clone(),
            kind: controller.kind.clone(),
            name: controller.name.clone(),
        }),
    }
}

/// The verdict on the child `kind` `name` from the child cache alone:
/// `None` when only the API server can tell (not cached, or cached without
/// a DataJob controller).
#[must_use]
pub fn from_cache(
    caches: &dyn Children,
    resource: &ApiResource,
    key: &ObjectKey,
    job_uid: &str,
) -> Option<Verdict> {
    let record = caches.get(&resource.api_version, &resource.kind, key)?;
    let owner = record.owner.as_ref()?;
    Some(if owner.uid == job_uid && !job_uid.is_empty() {
        Verdict::Ours
    } else {
        Verdict::Taken(Holder::DataJob {
            name: owner.name.clone(),
        })
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::cache::{ChildCache, ChildCaches, ChildRecord, Event, Scope};
    use crate::projection::ChildObject;

    fn owner(
        api_version: &str,
        kind: &str,
        name: &str,
        uid: &str,
        controller: bool,
    ) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn only_the_controller_reference_with_our_uid_makes_an_object_ours() {
        let ours = owner("policyhost.dev/v1alpha1", "DataJob", "etl", "u1", true);
        assert_eq!(judge(std::slice::from_ref(&ours), "u1"), Verdict::Ours);
        assert_eq!(
            judge(std::slice::from_ref(&ours), "u2"),
            Verdict::Taken(Holder::DataJob { name: "etl".into() })
        );
        let not_controller = owner("policyhost.dev/v1alpha1", "DataJob", "etl", "u1", false);
        assert_eq!(
            judge(&[not_controller], "u1"),
            Verdict::Taken(Holder::Nobody)
        );
        assert_eq!(judge(&[], "u1"), Verdict::Taken(Holder::Nobody));
        assert_eq!(judge(&[], ""), Verdict::Taken(Holder::Nobody));
        let replica_set = owner("apps/v1", "ReplicaSet", "web-1", "rs", true);
        assert_eq!(
            judge(&[replica_set], "u1"),
            Verdict::Taken(Holder::Object {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web-1".into()
            })
        );
        let impostor = owner("example.com/v1", "DataJob", "x", "e", true);
        assert!(matches!(
            judge(&[impostor], "u1"),
            Verdict::Taken(Holder::Object { .. })
        ));
    }

    #[test]
    fn conflicts_read_as_sentences_naming_the_object_and_its_holder() {
        let conflict = |holder| Conflict {
            kind: "ConfigMap".into(),
            name: "settings".into(),
            holder,
        };
        assert_eq!(
            conflict(Holder::DataJob {
                name: "other".into()
            })
            .to_string(),
            "ConfigMap settings already exists and is controlled by DataJob other"
        );
        assert_eq!(
            conflict(Holder::Object {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web".into()
            })
            .to_string(),
            "ConfigMap settings already exists and is controlled by apps/v1 ReplicaSet web"
        );
        assert_eq!(
            conflict(Holder::Nobody).to_string(),
            "ConfigMap settings already exists and is not controlled by this DataJob (it has no controller)"
        );
    }

    fn config_maps() -> (ChildCaches, ApiResource) {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let cache = ChildCache::new(resource.clone(), vec![Scope::Cluster]);
        for (name, owners) in [
            (
                "mine",
                json!([{"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob", "name": "a", "uid": "u1", "controller": true}]),
            ),
            (
                "theirs",
                json!([{"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob", "name": "b", "uid": "u2", "controller": true}]),
            ),
            ("orphan", json!([])),
        ] {
            let object = ChildObject::deserialize(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1", "ownerReferences": owners}}))
            .unwrap();
            cache
                .store
                .apply(Event::Apply(ChildRecord::from_object(&object)));
        }
        (ChildCaches::new(vec![cache]), resource)
    }

    #[test]
    fn the_cache_answers_for_datajob_children_and_defers_the_rest_to_the_server() {
        let (caches, resource) = config_maps();
        let key = |name| ObjectKey::namespaced("ns", name);
        assert_eq!(
            from_cache(&caches, &resource, &key("mine"), "u1"),
            Some(Verdict::Ours)
        );
        assert_eq!(
            from_cache(&caches, &resource, &key("theirs"), "u1"),
            Some(Verdict::Taken(Holder::DataJob { name: "b".into() }))
        );
        assert_eq!(from_cache(&caches, &resource, &key("orphan"), "u1"), None);
        assert_eq!(from_cache(&caches, &resource, &key("absent"), "u1"), None);
        assert_eq!(
            from_cache(
                &caches,
                &resource,
                &ObjectKey::namespaced("other", "mine"),
                "u1"
            ),
            None,
            "a name in another namespace is another object"
        );
    }

    /// What the check costs per desired child when the cache answers (the
    /// steady state: every child already exists). Run with `--nocapture`
    /// to see the figure; the bound only catches an accidental scan or
    /// request.
    #[test]
    fn the_cache_verdict_costs_a_hash_lookup_per_child() {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let cache = ChildCache::new(resource.clone(), vec![Scope::Cluster]);
        for i in 0..10_000 {
            let object = ChildObject::deserialize(&json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("w-{i}"), "namespace": "ns", "resourceVersion": "1",
                    "ownerReferences": [{"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
                        "name": format!("j-{}", i / 10), "uid": format!("u-{}", i / 10), "controller": true}]}}))
            .unwrap();
            cache
                .store
                .apply(Event::Apply(ChildRecord::from_object(&object)));
        }
        let caches = ChildCaches::new(vec![cache]);
        let keys: Vec<ObjectKey> = (0..10)
            .map(|i| ObjectKey::namespaced("ns", format!("w-{}", 420 + i)))
            .collect();
        let rounds = 20_000;
        let started = std::time::Instant::now();
        for _ in 0..rounds {
            for key in &keys {
                let verdict = from_cache(&caches, &resource, std::hint::black_box(key), "u-42");
                assert_eq!(verdict, Some(Verdict::Ours));
            }
        }
        let per_child = started.elapsed() / (rounds * 10);
        eprintln!(
            "ownership check from the cache: {per_child:?} per child (10,000 cached, this build)"
        );
        assert!(
            per_child < std::time::Duration::from_micros(20),
            "{per_child:?}"
        );
    }
}
