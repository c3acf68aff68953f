//! The JSON patches (RFC 6902) that add and remove the finalizer, each with
//! `test` operations as preconditions, as kube-runtime's finalizer helper
//! writes them.
//!
//! Finalizers of several controllers share one list and are addressed by
//! index, so a removal must prove that the entry at that index is still
//! ours, and an addition that the list is still the one it extends
//! (Kubernetes does not deduplicate finalizers: kube-rs/kube#964). Both also
//! test `metadata.uid`: a DataJob deleted and re-created under the same name
//! is another object, whose finalizer no earlier decision may touch. A failed
//! test is a 422 from the API server, and the caller retries from fresh state.

use crate::crd::DataJob;
use crate::vocabulary::FINALIZER;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation};
use kube::ResourceExt;
use serde_json::Value;

/// The patch that adds [`FINALIZER`] to `job` as the cache shows it.
#[must_use]
pub fn add(job: &DataJob) -> Patch {
    // The list exactly as the cache shows it: absent (`null`; the API server
    // lets a `test` of a missing member against `null` pass) or a list.
    let (current, add) = match &job.metadata.finalizers {
        None => (
            Value::Null,
            AddOperation {
                path: pointer(&["metadata", "finalizers"]),
                value: Value::from(vec![FINALIZER]),
            },
        ),
        Some(list) => (
            Value::from(list.clone()),
            AddOperation {
                path: pointer(&["metadata", "finalizers", "-"]),
                value: Value::from(FINALIZER),
            },
        ),
    };
    Patch(vec![
        test_uid(job),
        PatchOperation::Test(TestOperation {
            path: pointer(&["metadata", "finalizers"]),
            value: current,
        }),
        PatchOperation::Add(add),
    ])
}

/// The patch that removes [`FINALIZER`] from `job` as the cache shows it,
/// provided `job` is the DataJob `uid` and holds the finalizer; `None`
/// otherwise (there is nothing of ours to remove).
#[must_use]
pub fn remove(job: &DataJob, uid: &str) -> Option<Patch> {
    if job.uid().as_deref() != Some(uid) {
        return None;
    }
    let index = job.finalizers().iter().position(|f| f == FINALIZER)?;
    let index = index.to_string();
    let entry = pointer(&["metadata", "finalizers", &index]);
    Some(Patch(vec![
        test_uid(job),
        PatchOperation::Test(TestOperation {
            path: entry.clone(),
            value: Value::from(FINALIZER),
        }),
        PatchOperation::Remove(RemoveOperation { path: entry }),
    ]))
}

fn test_uid(job: &DataJob) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path: pointer(&["metadata", "uid"]),
        value: job.uid().map_or(Value::Null, Value::from),
    })
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::crd::DataJobSpec;

    fn job(finalizers: &[&str]) -> DataJob {
        let mut job = DataJob::new("j", DataJobSpec::default());
        job.metadata.uid = Some("u1".into());
        job.metadata.finalizers =
            (!finalizers.is_empty()).then(|| finalizers.iter().map(|f| (*f).to_owned()).collect());
        job
    }

    /// The object as the API server applies patches to it: an absent list
    /// reads as `null` to a `test` (the `json_patch` crate would call the
    /// path missing instead).
    fn document(job: &DataJob) -> Value {
        let mut doc = serde_json::to_value(job).unwrap();
        if doc["metadata"].get("finalizers").is_none() {
            doc["metadata"]["finalizers"] = Value::Null;
        }
        doc
    }

    fn finalizers(doc: &Value) -> Value {
        doc["metadata"]["finalizers"].clone()
    }

    #[test]
    fn adding_to_an_empty_list_tests_that_it_is_still_empty() {
        let patch = add(&job(&[]));
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])
        );
        let mut doc = document(&job(&[]));
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(finalizers(&doc), json!([FINALIZER]));
        // Someone added theirs meanwhile: the test fails, nothing is lost.
        let mut raced = document(&job(&["other"]));
        assert!(json_patch::patch(&mut raced, &patch).is_err());
    }

    #[test]
    fn adding_to_a_list_emptied_by_others_tests_the_empty_list() {
        let mut emptied = job(&[]);
        emptied.metadata.finalizers = Some(Vec::new());
        let patch = add(&emptied);
        let mut doc = document(&emptied);
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(finalizers(&doc), json!([FINALIZER]));
    }

    #[test]
    fn adding_to_someone_elses_list_appends_after_testing_the_whole_list() {
        let patch = add(&job(&["a", "b"]));
        let mut doc = document(&job(&["a", "b"]));
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(finalizers(&doc), json!(["a", "b", FINALIZER]));
        let mut raced = document(&job(&["a"]));
        assert!(json_patch::patch(&mut raced, &patch).is_err());
    }

    #[test]
    fn removal_takes_exactly_our_entry() {
        let cached = job(&["a", FINALIZER, "z"]);
        let patch = remove(&cached, "u1").unwrap();
        let mut doc = document(&cached);
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(finalizers(&doc), json!(["a", "z"]));
    }

    #[test]
    fn removal_from_a_stale_view_fails_instead_of_removing_another_entry() {
        // The cache still shows "a" first; "a" was removed meanwhile, so index 1
        // now holds "z".
        let patch = remove(&job(&["a", FINALIZER, "z"]), "u1").unwrap();
        let mut doc = document(&job(&[FINALIZER, "z"]));
        assert!(json_patch::patch(&mut doc, &patch).is_err());
        assert_eq!(finalizers(&doc), json!([FINALIZER, "z"]), "untouched");
    }

    #[test]
    fn removal_never_touches_a_recreated_datajob() {
        let patch = remove(&job(&[FINALIZER]), "u1").unwrap();
        let mut recreated = job(&[FINALIZER]);
        recreated.metadata.uid = Some("u2".into());
        let mut doc = document(&recreated);
        assert!(json_patch::patch(&mut doc, &patch).is_err());
        assert_eq!(remove(&recreated, "u1"), None);
    }

    #[test]
    fn there_is_nothing_to_remove_without_our_finalizer() {
        assert_eq!(remove(&job(&["a"]), "u1"), None);
        assert_eq!(remove(&job(&[]), "u1"), None);
    }
}
