//! How a child that exists changes when the policy asks for a new form:
//! its update strategy, which the policy declares per child with the
//! annotation [`UPDATE_STRATEGY_ANNOTATION`] (the one `policyhost.dev/*`
//! key a policy may set), as Metacontroller's `updateStrategy` does per
//! child kind.
//!
//! An annotation rather than a field of `desired-child`: a new field would
//! change the WIT world every compiled policy targets, and the annotation
//! stays on the child, where `kubectl` shows how it is updated.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::vocabulary::UPDATE_STRATEGY_ANNOTATION;

/// What the host does with a child that exists and no longer matches the
/// policy's manifest.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpdateStrategy {
    /// Server-side apply to the object as it is; a change the API server
    /// refuses as immutable is the DataJob's `ImmutableChange` condition.
    #[default]
    InPlace,
    /// Apply in place; when the API server refuses the change as immutable,
    /// delete the child and create it anew. A finished Pod (`Succeeded` or
    /// `Failed`) is the record of its run and keeps its old form.
    Recreate,
    /// Delete and create anew on every change, finished Pods included: the
    /// policy asks for it.
    RecreateAlways,
    /// Leave the child in its old form until it is gone (deleted by someone,
    /// or by its own end); the next one is created in the new form.
    OnDelete,
}

impl UpdateStrategy {
    /// Every strategy, as the annotation spells them.
    pub const ALL: [Self; 4] = [
        Self::InPlace,
        Self::Recreate,
        Self::RecreateAlways,
        Self::OnDelete,
    ];

    /// The annotation's value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InPlace => "InPlace",
            Self::Recreate => "Recreate",
            Self::RecreateAlways => "RecreateAlways",
            Self::OnDelete => "OnDelete",
        }
    }

    /// The strategy a manifest declares: `InPlace` when it declares none.
    ///
    /// # Errors
    ///
    /// The rule an `InvalidOutput` states: the value is not a strategy.
    pub fn declared(manifest: &str) -> Result<Self, String> {
        // Nearly every manifest declares none: one substring search, and a
        // parse only for those that name the key somewhere.
        if !manifest.contains(UPDATE_STRATEGY_ANNOTATION) {
            return Ok(Self::InPlace);
        }
        #[derive(Deserialize)]
        struct Manifest {
            #[serde(default)]
            metadata: Option<Metadata>,
        }
        #[derive(Deserialize)]
        struct Metadata {
            #[serde(default)]
            annotations: Option<std::collections::BTreeMap<String, serde_json::Value>>,
        }
        let value = serde_json::from_str::<Manifest>(manifest)
            .ok()
            .and_then(|m| m.metadata?.annotations?.remove(UPDATE_STRATEGY_ANNOTATION));
        match value {
            None => Ok(Self::InPlace),
            Some(serde_json::Value::String(text)) => text.parse(),
            Some(other) => Err(format!(
                "annotation `{UPDATE_STRATEGY_ANNOTATION}` is {other}, not a string"
            )),
        }
    }
}

impl FromStr for UpdateStrategy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "annotation `{UPDATE_STRATEGY_ANNOTATION}` is {text:?}, not one of {}",
                    known.join(", ")
                )
            })
    }
}

impl fmt::Display for UpdateStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(annotations: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","annotations":{annotations}}}}}"#
        )
    }

    #[test]
    fn a_manifest_declares_its_strategy_by_annotation_or_is_in_place() {
        for strategy in UpdateStrategy::ALL {
            let text = manifest(&format!(
                r#"{{"{UPDATE_STRATEGY_ANNOTATION}":"{strategy}"}}"#
            ));
            assert_eq!(UpdateStrategy::declared(&text), Ok(strategy));
        }
        assert_eq!(
            UpdateStrategy::declared(&manifest(r#"{"a":"b"}"#)),
            Ok(UpdateStrategy::InPlace)
        );
        // The key elsewhere than in the annotations declares nothing.
        let elsewhere = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c"}},"data":{{"{UPDATE_STRATEGY_ANNOTATION}":"OnDelete"}}}}"#
        );
        assert_eq!(
            UpdateStrategy::declared(&elsewhere),
            Ok(UpdateStrategy::InPlace)
        );
    }

    #[test]
    fn an_unknown_strategy_is_refused_naming_the_value_and_the_choices() {
        let refused = UpdateStrategy::declared(&manifest(&format!(
            r#"{{"{UPDATE_STRATEGY_ANNOTATION}":"Rolling"}}"#
        )))
        .unwrap_err();
        assert_eq!(
            refused,
            "annotation `policyhost.dev/update-strategy` is \"Rolling\", not one of InPlace, Recreate, RecreateAlways, OnDelete"
        );
        let number = UpdateStrategy::declared(&manifest(&format!(
            r#"{{"{UPDATE_STRATEGY_ANNOTATION}":1}}"#
        )))
        .unwrap_err();
        assert!(number.ends_with("is 1, not a string"), "{number}");
    }
}
