//! ConfigMaps' `binaryData` and Secrets' `data`: bytes, stored as bytes; and
//! Secrets' write-only `stringData`.

use base64::Engine as _;
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

/// Secrets: `data` as bytes, and `stringData` merged into it on every write
/// and never stored, as kube-apiserver's Secret strategy does (a key in both
/// takes the `stringData` value).
#[derive(Debug)]
pub(crate) struct Secrets;

impl Strategy for Secrets {
    fn canonicalize(&self, obj: &mut Map<String, Value>) {
        if let Some(Value::Object(strings)) = obj.remove("stringData") {
            let data = obj
                .entry("data")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(data) = data {
                for (key, value) in strings {
                    if let Value::String(text) = value {
                        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                        data.insert(key, Value::String(encoded));
                    }
                }
            }
        }
        BinaryData("data").canonicalize(obj);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_secrets_string_data_is_merged_into_its_data_and_not_kept() {
        let mut obj = json!({
            "data": { "kept": "a2VwdA==", "both": "b2xk" },
            "stringData": { "token": "Bearer x", "both": "new" }
        });
        let map = obj.as_object_mut().unwrap();
        Secrets.canonicalize(map);
        assert_eq!(
            obj,
            json!({ "data": { "kept": "a2VwdA==", "both": "bmV3", "token": "QmVhcmVyIHg=" } })
        );
    }
}
