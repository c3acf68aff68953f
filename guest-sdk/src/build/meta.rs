//! `metadata` and string maps shared by every builder.

use std::borrow::Cow;

use super::Result;
use super::json::Json;
use super::kinds::Kind;
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

impl Pairs<'_> {
    /// Writes the pairs as a JSON object.
    pub(crate) fn write(&self, json: &mut Json) {
        json.object_of_strings(self.0.iter().map(|(k, v)| (k, v)));
    }

    /// Writes each non-empty map as an object member (`"key":{...}`, the
    /// key given quoted with its colon); `first` says no member precedes
    /// them, so no comma leads.
    pub(crate) fn write_members(json: &mut Json, mut first: bool, maps: [(&str, &Pairs<'_>); 2]) {
        for (key, pairs) in maps {
            if pairs.is_empty() {
                continue;
            }
            if !first {
                json.byte(b',');
            }
            first = false;
            json.raw(key);
            pairs.write(json);
        }
    }

    /// Whether `key` is set.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    /// Bytes the pairs take as JSON without escapes.
    pub(crate) fn json_len(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len() + 6).sum()
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

/// Gives a builder with a `meta: Meta` field its `label` and `annotation`
/// setters, with the doc line of each, so every builder shares one
/// definition of them.
///
/// A macro writing inherent methods rather than a trait with provided
/// methods: a trait's methods need the trait in scope, and policies import
/// the builders by name (`use policyhost_sdk::build::{Container, Pod}`), so
/// `Pod::new(..).label(..)` would stop compiling for them.
macro_rules! metadata_setters {
    ($builder:ident { label: $label:literal, annotation: $annotation:literal $(,)? }) => {
        impl<'a> $builder<'a> {
            #[doc = $label]
            pub fn label(
                mut self,
                key: impl Into<::std::borrow::Cow<'a, str>>,
                value: impl Into<::std::borrow::Cow<'a, str>>,
            ) -> Self {
                self.meta.labels.set(key.into(), value.into());
                self
            }

            #[doc = $annotation]
            pub fn annotation(
                mut self,
                key: impl Into<::std::borrow::Cow<'a, str>>,
                value: impl Into<::std::borrow::Cow<'a, str>>,
            ) -> Self {
                self.meta.annotations.set(key.into(), value.into());
                self
            }

            /// Declares how the host changes this child once it exists
            /// (the annotation [`UPDATE_STRATEGY_ANNOTATION`](crate::build::UPDATE_STRATEGY_ANNOTATION)).
            pub fn update_strategy(self, strategy: crate::build::UpdateStrategy) -> Self {
                self.annotation(crate::build::UPDATE_STRATEGY_ANNOTATION, strategy.as_str())
            }
        }
    };
}

pub(crate) use metadata_setters;

/// Where per-object labels go in a pre-written manifest (see
/// [`super::PodTemplate`]): before the closing `}` of `labels`, or, when the
/// template has none, as a new `labels` field right after the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insert {
    /// Byte offset in the template text.
    pub(crate) at: usize,
    /// The template already has entries there (so a comma comes first).
    pub(crate) after_entries: bool,
}

impl Meta<'_> {
    /// Writes `{"name":..,"labels":..,"annotations":..}`, leaving out what is
    /// empty.
    pub(crate) fn write(&self, json: &mut Json) {
        json.byte(b'{');
        let mut first = true;
        if !self.name.is_empty() {
            json.raw("\"name\":");
            json.string(&self.name);
            first = false;
        }
        self.write_rest(json, first);
    }

    /// Writes `{"labels":..}` (`{}` without labels): the metadata of a Job's
    /// Pod template, which carries the Job's labels and nothing else.
    pub(crate) fn write_labels(&self, json: &mut Json) {
        json.byte(b'{');
        if !self.labels.is_empty() {
            json.raw("\"labels\":");
            self.labels.write(json);
        }
        json.byte(b'}');
    }

    /// Writes the metadata of a template without its name: returns where
    /// the name goes and where per-object labels go.
    pub(crate) fn write_template(&self, json: &mut Json) -> (usize, Insert) {
        json.raw("{\"name\":");
        let name_at = json.len();
        let labels = if self.labels.is_empty() {
            Insert {
                at: json.len(),
                after_entries: false,
            }
        } else {
            json.raw(",\"labels\":{");
            json.entries(self.labels.0.iter().map(|(k, v)| (k, v)), true);
            let at = json.len();
            json.byte(b'}');
            Insert {
                at,
                after_entries: true,
            }
        };
        if !self.annotations.is_empty() {
            json.raw(",\"annotations\":");
            self.annotations.write(json);
        }
        json.byte(b'}');
        (name_at, labels)
    }

    fn write_rest(&self, json: &mut Json, first: bool) {
        Pairs::write_members(
            json,
            first,
            [
                ("\"labels\":", &self.labels),
                ("\"annotations\":", &self.annotations),
            ],
        );
        json.byte(b'}');
    }
}

/// Writes the top of every manifest, `{"apiVersion":..,"kind":..,"metadata":`.
pub(crate) fn head(json: &mut Json, kind: &Kind) {
    json.raw("{\"apiVersion\":");
    json.string(kind.api_version);
    json.raw(",\"kind\":");
    json.string(kind.kind);
    json.raw(",\"metadata\":");
}
