//! Pins: DataJobs that keep a version their policy served, whatever serves
//! for the others (as Crossplane pins a function revision).
//!
//! A policy's pins are the `data` of the ConfigMap `pins-<name>` (labelled
//! `policyhost.dev/policy: <name>` and `policyhost.dev/role: pins`), which
//! only the policy's publishers write (on a strict host no other ConfigMap
//! may hold them; RBAC on its name is RBAC on them):
//!
//! ```yaml
//! data:
//!   team-b: sha256:3f5a…              # every DataJob of namespace team-b
//!   team-c.nightly-etl: sha256:9c41…  # the DataJob team-c/nightly-etl
//! ```
//!
//! A key is a namespace, or `<namespace>.<datajob>` (a namespace has no
//! dot): a DataJob's own pin comes before its namespace's. A value names a
//! version the policy served and still keeps as a revision
//! ([`super::revisions`]); any other is refused (`NeverServed`), the pins
//! in force staying. Every pinned version stays loaded while it is
//! pinned, and its revision is never forgotten.

use std::collections::{BTreeMap, BTreeSet};

use crate::runtime::Digest;

/// What a pin holds: a namespace's DataJobs, or one DataJob.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    /// The namespace.
    pub namespace: String,
    /// The DataJob, or every DataJob of the namespace.
    pub datajob: Option<String>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.datajob {
            Some(datajob) => write!(f, "{}/{datajob}", self.namespace),
            None => write!(f, "namespace {}", self.namespace),
        }
    }
}

/// A key or a value of a pins ConfigMap that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The key is neither a namespace nor `<namespace>.<datajob>`.
    #[error(
        "pin key `{0}` is neither a namespace nor NAMESPACE.DATAJOB (DNS names, such as team-b or team-b.nightly-etl)"
    )]
    Key(String),
    /// The value is not a digest.
    #[error(
        "pin `{key}` is `{value}`, not sha256: and the 64 hexadecimal digits of a version the policy served"
    )]
    Value {
        /// The key.
        key: String,
        /// Its value.
        value: String,
    },
}

/// The pins of one policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins(pub BTreeMap<Target, Digest>);

impl Pins {
    /// Reads a pins ConfigMap's `data`.
    ///
    /// # Errors
    ///
    /// The first key or value that does not read.
    pub fn parse(data: &BTreeMap<String, String>) -> Result<Self, Error> {
        let mut pins = BTreeMap::new();
        for (key, value) in data {
            let (namespace, datajob) = match key.split_once('.') {
                Some((namespace, datajob)) => (namespace, Some(datajob)),
                None => (key.as_str(), None),
            };
            let dns = |name: &str, max: usize| {
                !name.is_empty()
                    && name.len() <= max
                    && name.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                    })
                    && !name.starts_with(['-', '.'])
                    && !name.ends_with(['-', '.'])
            };
            if !dns(namespace, 63)
                || namespace.contains('.')
                || !datajob.is_none_or(|j| dns(j, 253))
            {
                return Err(Error::Key(key.clone()));
            }
            let digest = Digest::parse(value.trim()).ok_or_else(|| Error::Value {
                key: key.clone(),
                value: value.clone(),
            })?;
            let target = Target {
                namespace: namespace.to_owned(),
                datajob: datajob.map(str::to_owned),
            };
            pins.insert(target, digest);
        }
        Ok(Self(pins))
    }

    /// The digest pinned for the DataJob `namespace/datajob`, if any: its
    /// own pin, else its namespace's.
    #[must_use]
    pub fn of(&self, namespace: &str, datajob: &str) -> Option<Digest> {
        let mut target = Target {
            namespace: namespace.to_owned(),
            datajob: Some(datajob.to_owned()),
        };
        if let Some(digest) = self.0.get(&target) {
            return Some(*digest);
        }
        target.datajob = None;
        self.0.get(&target).copied()
    }

    /// Every digest pinned, once.
    #[must_use]
    pub fn digests(&self) -> BTreeSet<Digest> {
        self.0.values().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn a_datajobs_own_pin_comes_before_its_namespaces() {
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        let pins = Pins::parse(&data(&[
            ("team-b", format!("sha256:{}", a.to_hex())),
            ("team-b.nightly.etl", format!("sha256:{}", b.to_hex())),
        ]))
        .expect("pins");
        assert_eq!(pins.of("team-b", "nightly.etl"), Some(b));
        assert_eq!(pins.of("team-b", "other"), Some(a));
        assert_eq!(pins.of("team-c", "nightly.etl"), None);
        assert_eq!(pins.digests().len(), 2);
    }

    #[test]
    fn a_key_or_value_that_does_not_read_is_named() {
        let digest = format!("sha256:{}", Digest::of(b"a").to_hex());
        for key in ["", "Team-B", ".x", "team-b.", "-team", "team_b"] {
            assert_eq!(
                Pins::parse(&data(&[(key, digest.clone())])),
                Err(Error::Key(key.to_owned())),
                "{key:?}"
            );
        }
        let error = Pins::parse(&data(&[("team-b", "3f5a".to_owned())])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pin `team-b` is `3f5a`, not sha256: and the 64 hexadecimal digits of a version the policy served"
        );
    }
}
