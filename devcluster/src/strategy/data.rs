//! ConfigMaps' `binaryData` and Secrets' `data`: bytes, stored as bytes.

use serde_json::{Map, Value};

use super::Strategy;

/// The strategy of a kind whose field holds base64 bytes.
#[derive(Debug)]
pub(crate) struct BinaryData(pub(crate) &'static str);

impl Strategy for BinaryData {
    /// kube-apiserver decodes `[]byte` fields from base64 (Go's decoder skips line
    /// breaks) and stores the bytes, so they read back without the line breaks kustomize
    /// and YAML tools wrap them in; clients such as k8s-openapi reject those.
    fn canonicalize(&self, obj: &mut Map<String, Value>) {
        let Some(values) = obj.get_mut(self.0).and_then(Value::as_object_mut) else {
            return;
        };
        for value in values.values_mut() {
            if let Value::String(text) = value
                && text.contains(['\n', '\r'])
            {
                text.retain(|c| c != '\n' && c != '\r');
            }
        }
    }
}
