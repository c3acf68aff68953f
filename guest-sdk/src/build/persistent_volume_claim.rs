//! A core `v1` PersistentVolumeClaim.

use std::borrow::Cow;

use super::json::Json;
use super::kinds::{self, PERSISTENT_VOLUME_CLAIM};
use super::meta::{self, Meta};
use super::{Error, Result, names};
use crate::DesiredChild;

/// How the nodes may mount a claimed volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessMode {
    /// Read-write by the Pods of one node (the builder's default).
    ReadWriteOnce,
    /// Read-only by the Pods of many nodes.
    ReadOnlyMany,
    /// Read-write by the Pods of many nodes: what Pods spread over nodes
    /// need to share one volume (the storage class must support it).
    ReadWriteMany,
    /// Read-write by one Pod only; Kubernetes allows it with no other mode.
    ReadWriteOncePod,
}

impl Default for AccessMode {
    fn default() -> Self {
        kinds::PERSISTENT_VOLUME_CLAIM_ACCESS_MODE
    }
}

impl AccessMode {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::ReadWriteOnce => "ReadWriteOnce",
            Self::ReadOnlyMany => "ReadOnlyMany",
            Self::ReadWriteMany => "ReadWriteMany",
            Self::ReadWriteOncePod => "ReadWriteOncePod",
        }
    }
}

/// A core `v1` PersistentVolumeClaim: storage a Pod mounts with
/// [`Pod::volume_claim`](super::Pod::volume_claim) and
/// [`Container::mount`](super::Container::mount).
///
/// ```
/// use policyhost_sdk::build::{AccessMode, PersistentVolumeClaim};
///
/// let claim = PersistentVolumeClaim::new("demo-scratch")
///     .storage("10Gi")
///     .access_mode(AccessMode::ReadWriteMany)
///     .storage_class("shared")
///     .build()?;
/// assert_eq!(claim.kind, "PersistentVolumeClaim");
/// # Ok::<(), policyhost_sdk::build::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct PersistentVolumeClaim<'a> {
    meta: Meta<'a>,
    storage: Option<Cow<'a, str>>,
    access_modes: Vec<AccessMode>,
    storage_class: Option<Cow<'a, str>>,
}

impl<'a> PersistentVolumeClaim<'a> {
    /// A claim named `name` (a DNS-1123 subdomain).
    pub fn new(name: impl Into<Cow<'a, str>>) -> Self {
        Self {
            meta: Meta::new(name.into()),
            storage: None,
            access_modes: Vec::new(),
            storage_class: None,
        }
    }

    /// The storage requested (`spec.resources.requests.storage`), e.g.
    /// `"10Gi"`; required.
    pub fn storage(mut self, quantity: impl Into<Cow<'a, str>>) -> Self {
        self.storage = Some(quantity.into());
        self
    }

    /// Adds an access mode (a mode added twice is written once); without
    /// one, [`AccessMode::ReadWriteOnce`].
    pub fn access_mode(mut self, mode: AccessMode) -> Self {
        if !self.access_modes.contains(&mode) {
            self.access_modes.push(mode);
        }
        self
    }

    /// The storage class (a DNS-1123 subdomain); without one, the cluster's
    /// default class.
    pub fn storage_class(mut self, name: impl Into<Cow<'a, str>>) -> Self {
        self.storage_class = Some(name.into());
        self
    }

    /// Checks the claim and writes its manifest.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad name, label or storage class, a missing
    /// or malformed storage request, or `ReadWriteOncePod` with another mode.
    pub fn build(self) -> Result<DesiredChild> {
        names::check_name(&PERSISTENT_VOLUME_CLAIM, &self.meta.name)?;
        self.meta.check()?;
        let Some(storage) = &self.storage else {
            return Err(Error::Invalid {
                what: PERSISTENT_VOLUME_CLAIM.kind,
                value: self.meta.name.clone().into_owned(),
                reason: "needs a storage request",
            });
        };
        names::check_quantity(storage)?;
        if self.access_modes.len() > 1 && self.access_modes.contains(&AccessMode::ReadWriteOncePod)
        {
            return Err(Error::Invalid {
                what: "access mode",
                value: AccessMode::ReadWriteOncePod.as_str().to_owned(),
                reason: "may not be combined with other access modes",
            });
        }
        if let Some(class) = &self.storage_class {
            names::check_subdomain("storage class name", class)?;
        }
        let default_mode = [AccessMode::default()];
        let modes = if self.access_modes.is_empty() {
            &default_mode[..]
        } else {
            &self.access_modes
        };
        let mut json = Json::with_capacity(
            192 + self.meta.name.len()
                + self.meta.labels.json_len()
                + self.meta.annotations.json_len()
                + storage.len()
                + modes.len() * 20
                + self.storage_class.as_ref().map_or(0, |c| c.len() + 24),
        );
        meta::head(&mut json, &PERSISTENT_VOLUME_CLAIM);
        self.meta.write(&mut json);
        json.raw(",\"spec\":{\"accessModes\":[");
        for (i, mode) in modes.iter().enumerate() {
            if i > 0 {
                json.byte(b',');
            }
            json.string(mode.as_str());
        }
        json.raw("],\"resources\":{\"requests\":{\"storage\":");
        json.string(storage);
        json.raw("}}");
        if let Some(class) = &self.storage_class {
            json.raw(",\"storageClassName\":");
            json.string(class);
        }
        json.raw("}}");
        Ok(DesiredChild::from_json(
            PERSISTENT_VOLUME_CLAIM.api_version,
            PERSISTENT_VOLUME_CLAIM.kind,
            self.meta.name,
            json.into_string(),
        ))
    }
}

meta::metadata_setters!(PersistentVolumeClaim {
    label: "Sets a label.",
    annotation: "Sets an annotation.",
});

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn manifest(child: &DesiredChild) -> serde_json::Value {
        serde_json::from_str(&child.manifest).unwrap()
    }

    #[test]
    fn a_claim_without_access_modes_gets_the_default_one() {
        let child = PersistentVolumeClaim::new("data")
            .storage("1Gi")
            .build()
            .unwrap();
        assert_eq!(
            manifest(&child),
            json!({ "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": { "name": "data" },
                    "spec": { "accessModes": ["ReadWriteOnce"],
                              "resources": { "requests": { "storage": "1Gi" } } } })
        );
    }

    #[test]
    fn a_mode_added_twice_is_written_once() {
        let child = PersistentVolumeClaim::new("data")
            .storage("1Gi")
            .access_mode(AccessMode::ReadWriteMany)
            .access_mode(AccessMode::ReadOnlyMany)
            .access_mode(AccessMode::ReadWriteMany)
            .build()
            .unwrap();
        assert_eq!(
            manifest(&child)["spec"]["accessModes"],
            json!(["ReadWriteMany", "ReadOnlyMany"])
        );
    }

    #[test]
    fn invalid_claims_are_refused() {
        let error = PersistentVolumeClaim::new("data").build().unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"PersistentVolumeClaim "data" is invalid: needs a storage request"#
        );
        assert!(
            PersistentVolumeClaim::new("data")
                .storage("lots")
                .build()
                .is_err()
        );
        assert!(
            PersistentVolumeClaim::new("data")
                .storage("1Gi")
                .storage_class("Fast")
                .build()
                .is_err()
        );
        let error = PersistentVolumeClaim::new("data")
            .storage("1Gi")
            .access_mode(AccessMode::ReadWriteOncePod)
            .access_mode(AccessMode::ReadOnlyMany)
            .build()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"access mode "ReadWriteOncePod" is invalid: may not be combined with other access modes"#
        );
    }
}
