//! ConfigMaps and Secrets: maps of data, their `binaryData` and `data`
//! bytes stored as bytes, Secrets' write-only `stringData`, and the columns
//! `kubectl get` prints for them.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::resource::Strategy;
use crate::schema::build::{Obj, map, root};
use crate::table::PrinterColumn;

/// The strategy of a kind whose field holds base64 bytes.
#[derive(Debug)]
pub(super) struct BinaryData(&'static str);

/// ConfigMaps: their `binaryData` holds bytes.
pub(super) const CONFIG_MAPS: BinaryData = BinaryData("binaryData");

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
pub(super) struct Secrets;

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

/// What `kubectl get configmaps` prints after the name.
pub(super) const CONFIG_MAP_COLUMNS: &[PrinterColumn] = &[DATA, PrinterColumn::AGE];

/// What `kubectl get secrets` prints after the name.
pub(super) const SECRET_COLUMNS: &[PrinterColumn] = &[
    PrinterColumn::path("Type", "The type of the secret", ".type"),
    DATA,
    PrinterColumn::AGE,
];

const DATA: PrinterColumn = PrinterColumn::computed("Data", "Number of data items.", data_items);

/// How many keys `data` and `binaryData` hold.
fn data_items(v: &Value) -> Value {
    json!(
        v["data"].as_object().map_or(0, Map::len) + v["binaryData"].as_object().map_or(0, Map::len)
    )
}

/// A ConfigMap's merge schema.
pub(super) fn config_map() -> Obj {
    root().field("data", map()).field("binaryData", map())
}

/// A Secret's merge schema.
pub(super) fn secret() -> Obj {
    root().field("data", map()).field("stringData", map())
}

#[cfg(test)]
mod tests {
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
