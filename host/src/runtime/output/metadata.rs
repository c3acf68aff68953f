//! The host owns a child's metadata: which `metadata` fields a desired
//! child may not set, and which label and annotation keys are the host's.
//!
//! A child that sets any of them is refused (invalid output), not silently
//! stripped: the policy's author learns at once that the field has no
//! effect, instead of finding later that the cluster holds something else
//! than the manifest said.
//!
//! Both readers of a manifest fill in [`Metadata`]: the fast scanner
//! ([`super::scan`]) for plain JSON, `serde_json` (the `Deserialize` impl
//! here) for everything else; the scanner's tests hold the two to the same
//! answers.

use std::borrow::Cow;
use std::fmt;

use crate::vocabulary::{RESERVED_PREFIX, UPDATE_STRATEGY_ANNOTATION};
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};

/// A `metadata` field of a child that the host or the API server owns.
///
/// `creationTimestamp`, `generation`, `deletionTimestamp`,
/// `deletionGracePeriodSeconds` and `selfLink` are not listed: the API
/// server ignores them in a write, so setting them changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostField {
    /// `finalizers`: a child the host cannot finalize would stay
    /// Terminating forever.
    Finalizers,
    /// `ownerReferences`: the host sets the DataJob as the only controller;
    /// another owner would let garbage collection of an unrelated object
    /// delete the child, or keep it alive.
    OwnerReferences,
    /// `generateName`: a child's identity is its `metadata.name`, which the
    /// host needs to find, compare and prune it.
    GenerateName,
    /// `uid`: assigned by the API server; in a write it is a precondition on
    /// an object the policy cannot know.
    Uid,
    /// `resourceVersion`: in a write it is an optimistic-lock precondition
    /// that would fail every apply after the first change.
    ResourceVersion,
    /// `managedFields`: the API server's record of who owns which field;
    /// server-side apply refuses it, and it must never be forged.
    ManagedFields,
}

impl HostField {
    /// Every host-owned field, in the order of their bits.
    pub const ALL: [Self; 6] = [
        Self::Finalizers,
        Self::OwnerReferences,
        Self::GenerateName,
        Self::Uid,
        Self::ResourceVersion,
        Self::ManagedFields,
    ];

    /// The field of a `metadata` key, if the host owns it.
    #[must_use]
    pub fn of(key: &str) -> Option<Self> {
        Some(match key {
            "finalizers" => Self::Finalizers,
            "ownerReferences" => Self::OwnerReferences,
            "generateName" => Self::GenerateName,
            "uid" => Self::Uid,
            "resourceVersion" => Self::ResourceVersion,
            "managedFields" => Self::ManagedFields,
            _ => return None,
        })
    }

    /// The `metadata` key.
    #[must_use]
    pub fn key(self) -> &'static str {
        match self {
            Self::Finalizers => "finalizers",
            Self::OwnerReferences => "ownerReferences",
            Self::GenerateName => "generateName",
            Self::Uid => "uid",
            Self::ResourceVersion => "resourceVersion",
            Self::ManagedFields => "managedFields",
        }
    }

    /// Why a child may not set it, for the `InvalidOutput` message.
    #[must_use]
    pub fn why(self) -> &'static str {
        match self {
            Self::Finalizers => "the host owns a child's finalizers",
            Self::OwnerReferences => "the host sets the DataJob as the only owner",
            Self::GenerateName => "a child is known by its metadata.name",
            Self::Uid | Self::ResourceVersion | Self::ManagedFields => "the API server sets it",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The host-owned fields a manifest sets (to anything but `null`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HostFields(u8);

impl HostFields {
    /// Records that `field` is set.
    pub fn insert(&mut self, field: HostField) {
        self.0 |= field.bit();
    }

    /// Whether `field` is set.
    #[must_use]
    pub fn contains(self, field: HostField) -> bool {
        self.0 & field.bit() != 0
    }

    /// The first set field, in [`HostField::ALL`] order.
    #[must_use]
    pub fn first(self) -> Option<HostField> {
        HostField::ALL.into_iter().find(|f| self.contains(*f))
    }
}

/// What the output rules read in a manifest's `metadata`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Metadata<'a> {
    /// `metadata.name`.
    pub name: Option<Cow<'a, str>>,
    /// `metadata.namespace`.
    pub namespace: Option<Cow<'a, str>>,
    /// The host-owned fields it sets.
    pub host_fields: HostFields,
    /// A label key with the [`RESERVED_PREFIX`], if any.
    pub reserved_label: Option<Cow<'a, str>>,
    /// An annotation key with the [`RESERVED_PREFIX`], if any.
    pub reserved_annotation: Option<Cow<'a, str>>,
}

/// Whether a label or annotation key is the host's: all with its prefix
/// but the update strategy a policy declares ([`super::strategy`]).
#[must_use]
pub fn is_reserved(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX) && key != UPDATE_STRATEGY_ANNOTATION
}

/// The metadata rule a child breaks, if any, as an `InvalidOutput` rule.
pub fn check(metadata: &Metadata<'_>) -> Result<(), String> {
    if let Some(field) = metadata.host_fields.first() {
        return Err(format!(
            "metadata.{} may not be set ({})",
            field.key(),
            field.why()
        ));
    }
    for (what, key) in [
        ("label", &metadata.reserved_label),
        ("annotation", &metadata.reserved_annotation),
    ] {
        if let Some(key) = key {
            return Err(format!(
                "{what} `{key}` may not be set: `{RESERVED_PREFIX}*` keys are the host's"
            ));
        }
    }
    Ok(())
}

impl<'de: 'a, 'a> Deserialize<'de> for Metadata<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MetadataVisitor(std::marker::PhantomData))
    }
}

struct MetadataVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for MetadataVisitor<'a> {
    type Value = Metadata<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object (metadata)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut metadata = Metadata::default();
        // Each field once, as a derived `Deserialize` insists.
        let mut seen = HostFields::default();
        let mut seen_other = [false; 4];
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let slot = match key.as_ref() {
                "name" => Some(0),
                "namespace" => Some(1),
                "labels" => Some(2),
                "annotations" => Some(3),
                _ => None,
            };
            let host = HostField::of(&key);
            let again = match (slot, host) {
                (Some(i), _) => std::mem::replace(&mut seen_other[i], true),
                (None, Some(field)) => {
                    let again = seen.contains(field);
                    seen.insert(field);
                    again
                }
                (None, None) => false,
            };
            if again {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate field `{key}`"
                )));
            }
            match (slot, host) {
                (Some(0), _) => metadata.name = map.next_value::<Option<Str<'de>>>()?.map(|s| s.0),
                (Some(1), _) => {
                    metadata.namespace = map.next_value::<Option<Str<'de>>>()?.map(|s| s.0);
                }
                (Some(2), _) => {
                    metadata.reserved_label =
                        map.next_value::<Option<Reserved<'de>>>()?.and_then(|r| r.0);
                }
                (Some(_), _) => {
                    metadata.reserved_annotation =
                        map.next_value::<Option<Reserved<'de>>>()?.and_then(|r| r.0);
                }
                (None, Some(field)) => {
                    if map.next_value::<Option<IgnoredAny>>()?.is_some() {
                        metadata.host_fields.insert(field);
                    }
                }
                (None, None) => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(metadata)
    }
}

/// A string, borrowed from the input when it has no escapes.
struct Str<'a>(Cow<'a, str>);

/// A map key, read like [`Str`].
struct Key<'a>(Cow<'a, str>);

struct StrVisitor;

impl<'de> Visitor<'de> for StrVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(StrVisitor).map(Str)
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(StrVisitor).map(Key)
    }
}

/// A `labels` or `annotations` object: its first reserved key, if any.
/// The values are skipped (the API server checks they are strings).
struct Reserved<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for Reserved<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ReservedVisitor;
        impl<'de> Visitor<'de> for ReservedVisitor {
            type Value = Reserved<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of string keys")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut reserved = None;
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    map.next_value::<IgnoredAny>()?;
                    if reserved.is_none() && is_reserved(&key) {
                        reserved = Some(key);
                    }
                }
                Ok(Reserved(reserved))
            }
        }
        deserializer.deserialize_map(ReservedVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Metadata<'_> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn each_host_field_is_read_when_set_and_not_when_null() {
        for field in HostField::ALL {
            assert_eq!(HostField::of(field.key()), Some(field));
            let set = format!(r#"{{"{}": ["x"]}}"#, field.key());
            assert_eq!(read(&set).host_fields.first(), Some(field), "{set}");
            let null = format!(r#"{{"{}": null}}"#, field.key());
            assert_eq!(read(&null).host_fields.first(), None, "{null}");
        }
        assert_eq!(HostField::of("labels"), None);
    }

    #[test]
    fn reserved_keys_are_found_among_labels_and_annotations() {
        let m = read(
            r#"{"name":"a","labels":{"app":"x","policyhost.dev/policy":"p"},"annotations":{"policyhost.dev\/x":"1"}}"#,
        );
        assert_eq!(m.name.as_deref(), Some("a"));
        assert_eq!(m.reserved_label.as_deref(), Some("policyhost.dev/policy"));
        assert_eq!(m.reserved_annotation.as_deref(), Some("policyhost.dev/x"));
        let clean = read(r#"{"labels":{"policyhost.dev":"x","app.policyhost.dev/y":"z"}}"#);
        assert_eq!(clean.reserved_label, None);
    }

    #[test]
    fn duplicates_and_wrong_types_are_errors() {
        for text in [
            r#"{"labels":{},"labels":{}}"#,
            r#"{"uid":null,"uid":null}"#,
            r#"{"name":"a","name":"b"}"#,
            r#"{"labels":"x"}"#,
            r#"{"name":1}"#,
            r#"[]"#,
        ] {
            assert!(
                serde_json::from_str::<Metadata<'_>>(text).is_err(),
                "{text}"
            );
        }
    }

    /// A ConfigMap result with this `metadata`, validated as the runtime does.
    fn validate_with(metadata: &str) -> crate::runtime::Result<super::super::Reconciled> {
        use crate::runtime::bindings::{DesiredChild, ReconcileResult, Status};
        let result = ReconcileResult {
            children: vec![DesiredChild {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "c".into(),
                manifest: format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{metadata}}}"#
                ),
            }],
            status: Status {
                phase: "Running".into(),
                message: String::new(),
                conditions: Vec::new(),
                outputs: String::new(),
            },
            requeue_after_ms: None,
            events: Vec::new(),
        };
        super::super::validate(
            result,
            "ns",
            &super::super::AllowedKind::defaults(),
            &crate::runtime::Limits::default(),
            &crate::outbound::Redactor::none(),
        )
    }

    #[test]
    fn a_child_setting_host_metadata_is_invalid_output_on_the_fast_and_the_slow_path() {
        let cases = [
            (
                r#"{"name":"c","finalizers":["x/y"]}"#,
                "metadata.finalizers",
            ),
            (r#"{"name":"c","finalizers":[]}"#, "metadata.finalizers"),
            (
                r#"{"name":"c","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u"}]}"#,
                "metadata.ownerReferences",
            ),
            (
                r#"{"name":"c","generateName":"c-"}"#,
                "metadata.generateName",
            ),
            (r#"{"name":"c","uid":"u"}"#, "metadata.uid"),
            (
                r#"{"name":"c","resourceVersion":"1"}"#,
                "metadata.resourceVersion",
            ),
            (
                r#"{"name":"c","managedFields":[]}"#,
                "metadata.managedFields",
            ),
            (
                r#"{"name":"c","labels":{"policyhost.dev/policy":"p"}}"#,
                "label `policyhost.dev/policy`",
            ),
            (
                r#"{"name":"c","annotations":{"policyhost.dev/applied-hash":"h"}}"#,
                "annotation `policyhost.dev/applied-hash`",
            ),
        ];
        for (metadata, named) in cases {
            // `\u0063` is `c`: the escape sends the manifest down the slow path.
            let slow = metadata.replacen(r#""name":"c""#, r#""name":"\u0063""#, 1);
            for metadata in [metadata, slow.as_str()] {
                match validate_with(metadata) {
                    Err(crate::runtime::Error::InvalidOutput { location, rule }) => {
                        assert_eq!(location, "children[0] (ConfigMap c)");
                        assert!(rule.contains(named), "{metadata}: {rule}");
                    }
                    other => panic!("{metadata}: {other:?}"),
                }
            }
        }
        for fine in [
            r#"{"name":"c","finalizers":null,"uid":null,"labels":{"app":"x"},"annotations":{"example.com/policyhost.dev/x":"y"}}"#,
            r#"{"name":"\u0063","labels":null,"annotations":{"policyhost.dev":"x"}}"#,
        ] {
            assert!(validate_with(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn the_rule_names_the_field_or_key() {
        let mut m = Metadata::default();
        assert_eq!(check(&m), Ok(()));
        m.reserved_annotation = Some("policyhost.dev/applied-hash".into());
        assert_eq!(
            check(&m).unwrap_err(),
            "annotation `policyhost.dev/applied-hash` may not be set: `policyhost.dev/*` keys are the host's"
        );
        m.host_fields.insert(HostField::OwnerReferences);
        assert_eq!(
            check(&m).unwrap_err(),
            "metadata.ownerReferences may not be set (the host sets the DataJob as the only owner)"
        );
        m.host_fields.insert(HostField::Finalizers);
        assert_eq!(
            check(&m).unwrap_err(),
            "metadata.finalizers may not be set (the host owns a child's finalizers)"
        );
    }
}
