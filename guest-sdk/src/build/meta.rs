//! `metadata` and string maps shared by every builder.

use std::borrow::Cow;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use super::Result;
use super::names;

/// Key/value pairs in insertion order, serialized as a JSON object; setting
/// a key again replaces its value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pairs<'a>(pub(crate) Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'a> Pairs<'a> {
    pub(crate) fn set(&mut self, key: Cow<'a, str>, value: Cow<'a, str>) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks every key and value as Kubernetes labels.
    pub(crate) fn check_labels(&self) -> Result<()> {
        self.0.iter().try_for_each(|(key, value)| {
            names::check_key("label key", key)?;
            names::check_label_value(value)
        })
    }
}

impl Serialize for Pairs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// `metadata`: name, labels and annotations (the host sets the namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Meta<'a> {
    pub(crate) name: Cow<'a, str>,
    pub(crate) labels: Pairs<'a>,
    pub(crate) annotations: Pairs<'a>,
}

impl<'a> Meta<'a> {
    pub(crate) fn new(name: Cow<'a, str>) -> Self {
        Self {
            name,
            ..Self::default()
        }
    }

    /// Checks labels and annotation keys; the name is checked by each kind.
    pub(crate) fn check(&self) -> Result<()> {
        self.labels.check_labels()?;
        self.annotations
            .0
            .iter()
            .try_for_each(|(key, _)| names::check_key("annotation key", key))
    }
}

impl Serialize for Meta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields =
            1 + usize::from(!self.labels.is_empty()) + usize::from(!self.annotations.is_empty());
        let mut out = serializer.serialize_struct("ObjectMeta", fields)?;
        if !self.name.is_empty() {
            out.serialize_field("name", &self.name)?;
        }
        if !self.labels.is_empty() {
            out.serialize_field("labels", &self.labels)?;
        }
        if !self.annotations.is_empty() {
            out.serialize_field("annotations", &self.annotations)?;
        }
        out.end()
    }
}

/// The top of every manifest: `apiVersion`, `kind`, `metadata`, then `spec`
/// or `data` under `body_key`.
pub(crate) struct Object<'m, 'a, B> {
    pub(crate) api_version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) metadata: &'m Meta<'a>,
    pub(crate) body_key: &'static str,
    pub(crate) body: B,
}

impl<B: Serialize> Serialize for Object<'_, '_, B> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("Object", 4)?;
        out.serialize_field("apiVersion", self.api_version)?;
        out.serialize_field("kind", self.kind)?;
        out.serialize_field("metadata", self.metadata)?;
        out.serialize_field(self.body_key, &self.body)?;
        out.end()
    }
}
