//! One desired child per object: two children of one result that name the
//! same object would be applied in turn, each undoing the other, on every
//! reconcile.
//!
//! An object is its API group, kind and name (the namespace is the
//! DataJob's for all): `apps/v1` and `apps/v1beta1` Deployments of one name
//! are one object, so the version is left out.

use std::collections::HashSet;

use super::ValidChild;
use crate::runtime::error::{Error, Result};

/// Below this many children a pairwise comparison is cheaper than hashing.
const PAIRWISE: usize = 32;

/// The first child that names the same object as an earlier one, as
/// `InvalidOutput`.
pub(super) fn check(children: &[ValidChild]) -> Result<()> {
    match first_duplicate(children) {
        None => Ok(()),
        Some((first, again)) => {
            let child = &children[again];
            Err(Error::invalid_output(
                format!("children[{again}] ({} {})", child.kind, child.name),
                format!(
                    "duplicates children[{first}]: one result may name each object (kind and name) once"
                ),
            ))
        }
    }
}

/// The object a child names.
fn identity(child: &ValidChild) -> (&str, &str, &str) {
    let group = child
        .api_version
        .rsplit_once('/')
        .map_or("", |(group, _)| group);
    (group, child.kind.as_str(), child.name.as_str())
}

/// The indices of the first pair that name one object.
fn first_duplicate(children: &[ValidChild]) -> Option<(usize, usize)> {
    if children.len() <= PAIRWISE {
        for (again, child) in children.iter().enumerate() {
            let id = identity(child);
            if let Some(first) = children[..again].iter().position(|c| identity(c) == id) {
                return Some((first, again));
            }
        }
        return None;
    }
    let mut seen = HashSet::with_capacity(children.len());
    let again = children.iter().position(|c| !seen.insert(identity(c)))?;
    let id = identity(&children[again]);
    let first = children.iter().position(|c| identity(c) == id)?;
    Some((first, again))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(api_version: &str, kind: &str, name: &str) -> ValidChild {
        ValidChild {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            manifest: String::new(),
            update: super::super::UpdateStrategy::InPlace,
        }
    }

    #[test]
    fn the_same_kind_and_name_twice_is_a_duplicate_whatever_the_version() {
        let children = [
            child("v1", "ConfigMap", "a"),
            child("apps/v1", "Deployment", "a"),
            child("apps/v1beta1", "Deployment", "a"),
        ];
        assert_eq!(first_duplicate(&children), Some((1, 2)));
        let error = check(&children).unwrap_err();
        assert_eq!(
            error.to_string(),
            "policy returned an invalid result: children[2] (Deployment a): duplicates children[1]: one result may name each object (kind and name) once"
        );
    }

    #[test]
    fn different_kinds_groups_or_names_are_distinct() {
        let children = [
            child("v1", "ConfigMap", "a"),
            child("v1", "Secret", "a"),
            child("v1", "ConfigMap", "b"),
            child("example.com/v1", "ConfigMap", "a"),
        ];
        assert_eq!(first_duplicate(&children), None);
        assert!(check(&children).is_ok());
    }

    #[test]
    fn many_children_are_checked_by_hashing_with_the_same_answer() {
        let mut children: Vec<ValidChild> = (0..100)
            .map(|i| child("v1", "Pod", &format!("w-{i}")))
            .collect();
        assert_eq!(first_duplicate(&children), None);
        children.push(child("v1", "Pod", "w-40"));
        children.push(child("v1", "Pod", "w-7"));
        assert_eq!(first_duplicate(&children), Some((40, 100)));
        assert_eq!(first_duplicate(&children[..20]), None);
    }
}
