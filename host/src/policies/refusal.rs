//! Compile refusals kept on the policy ConfigMap: a component refused for
//! what compiling it costs ([`runtime::Error::CompileLimitExceeded`]) is
//! not compiled again when the operator restarts, so a component that
//! takes a compile to its caps cannot make every start pay for it.
//!
//! The host writes the refusal as JSON under [`COMPILE_REFUSED_ANNOTATION`]
//! and reads it back only for the ConfigMap that carries it: whoever can
//! write the annotation can refuse their own component (or have it
//! compiled once more, under the caps), never another ConfigMap's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

use crate::runtime::{self, Refusal};
use crate::vocabulary::COMPILE_REFUSED_ANNOTATION;

/// The refusal recorded in `annotations`. A value that does not parse is
/// ignored: the component is compiled again, under the caps.
#[must_use]
pub fn read(annotations: Option<&BTreeMap<String, String>>) -> Option<Refusal> {
    let text = annotations?.get(COMPILE_REFUSED_ANNOTATION)?;
    serde_json::from_str(text).ok()
}

/// The refusal to record for a load that failed with `error`: a fresh
/// compile refusal (a recalled one is on the ConfigMap already).
#[must_use]
pub fn to_record(error: &super::load::Error) -> Option<&Refusal> {
    match error {
        super::load::Error::Component(runtime::Error::CompileLimitExceeded(refusal))
            if !refusal.remembered =>
        {
            Some(refusal)
        }
        _ => None,
    }
}

/// Records `refusal` on the ConfigMap `name` with a merge patch (the other
/// annotations, and a ConfigMap deleted meanwhile, are left alone).
pub(crate) async fn write(api: &Api<ConfigMap>, name: &str, refusal: &Refusal) -> kube::Result<()> {
    let value = serde_json::to_string(refusal).unwrap_or_default();
    let patch = serde_json::json!({
        "metadata": { "annotations": { COMPILE_REFUSED_ANNOTATION: value } }
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::CompileLimit;

    fn refusal() -> Refusal {
        Refusal {
            digest: "ab".repeat(32),
            limits: "0123456789abcdef".into(),
            limit: CompileLimit::Time { limit_ms: 10_000 },
            remembered: false,
        }
    }

    #[test]
    fn a_refusal_written_as_json_reads_back_the_same() {
        let written = refusal();
        let annotations = BTreeMap::from([(
            COMPILE_REFUSED_ANNOTATION.to_owned(),
            serde_json::to_string(&written).unwrap(),
        )]);
        assert_eq!(read(Some(&annotations)), Some(written));
    }

    #[test]
    fn a_value_that_does_not_parse_is_ignored() {
        let annotations = BTreeMap::from([(
            COMPILE_REFUSED_ANNOTATION.to_owned(),
            r#"{"digest": 3}"#.to_owned(),
        )]);
        assert_eq!(read(Some(&annotations)), None);
        assert_eq!(read(None), None);
    }

    #[test]
    fn only_a_fresh_compile_refusal_is_recorded() {
        let fresh =
            super::super::load::Error::Component(runtime::Error::CompileLimitExceeded(refusal()));
        assert_eq!(to_record(&fresh), Some(&refusal()));
        let recalled =
            super::super::load::Error::Component(runtime::Error::CompileLimitExceeded(Refusal {
                remembered: true,
                ..refusal()
            }));
        assert_eq!(to_record(&recalled), None);
        let other = super::super::load::Error::Component(runtime::Error::CoreModule);
        assert_eq!(to_record(&other), None);
    }
}
