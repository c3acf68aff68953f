//! What a CustomResourceDefinition defines: the resource type it serves, or
//! why it cannot be served.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use super::{Generic, ResourceType, Version, version_priority};
use crate::object::GroupResource;
use crate::schema::Schema as MergeSchema;
use crate::table::{Cell, PrinterColumn, Text};

/// Why a CRD cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A required field is missing or has the wrong type.
    #[error("{field}: Required value")]
    Required {
        /// The JSON path of the field.
        field: &'static str,
    },
    /// The CRD name is not `<plural>.<group>`.
    #[error("metadata.name: Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group")]
    Name {
        /// The given name.
        name: String,
    },
    /// Not exactly one version is marked for storage.
    #[error(
        "spec.versions: Invalid value: must have exactly one version marked as storage version"
    )]
    StorageVersion,
    /// `spec.scope` is neither Namespaced nor Cluster.
    #[error("spec.scope: Unsupported value: {0:?}: supported values: \"Cluster\", \"Namespaced\"")]
    Scope(String),
}

/// Results of CRD interpretation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A CRD version's printer columns, or the Age column kube-apiserver shows
/// for a version that has none.
fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    let columns: Vec<PrinterColumn> = version["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let kind = c["type"].as_str().unwrap_or("string").to_owned();
            let json_path = c["jsonPath"].as_str()?.to_owned();
            Some(PrinterColumn {
                name: c["name"].as_str()?.to_owned().into(),
                declared: kind.clone().into(),
                kind: kind.into(),
                format: c["format"].as_str().unwrap_or_default().to_owned().into(),
                description: column_description(c["description"].as_str(), &json_path),
                priority: c["priority"].as_i64().unwrap_or(0),
                cell: Cell::Path(json_path.into()),
            })
        })
        .collect();
    if !columns.is_empty() {
        return columns;
    }
    vec![PrinterColumn {
        declared: Cow::Borrowed("date"),
        description: column_description(None, ".metadata.creationTimestamp"),
        ..PrinterColumn::AGE
    }]
}

/// A column's description, or kube-apiserver's when the CRD gives none.
fn column_description(given: Option<&str>, json_path: &str) -> Text {
    match given {
        Some(d) if !d.is_empty() => d.to_owned().into(),
        _ => format!("Custom resource definition column (in JSONPath format): {json_path}").into(),
    }
}

/// Reads a CustomResourceDefinition into the resource type it defines.
pub(crate) fn from_crd(crd: &Value) -> Result<ResourceType> {
    let spec = &crd["spec"];
    let req = |v: &Value, field: &'static str| -> Result<String> {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or(Error::Required { field })
    };
    let group = req(&spec["group"], "spec.group")?;
    let plural = req(&spec["names"]["plural"], "spec.names.plural")?;
    let kind = req(&spec["names"]["kind"], "spec.names.kind")?;
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(Error::Name {
            name: name.to_owned(),
        });
    }
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        Some(other) => return Err(Error::Scope(other.to_owned())),
        None => {
            return Err(Error::Required {
                field: "spec.scope",
            });
        }
    };
    let versions_v = spec["versions"]
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or(Error::Required {
            field: "spec.versions",
        })?;
    if versions_v
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count()
        != 1
    {
        return Err(Error::StorageVersion);
    }
    let mut versions: Vec<Version> = Vec::new();
    for v in versions_v {
        if v["served"].as_bool() != Some(true) {
            continue;
        }
        let columns = printer_columns(v);
        let status = v["subresources"]["status"].is_object();
        let schema = v["schema"]["openAPIV3Schema"]
            .as_object()
            .map(|_| v["schema"]["openAPIV3Schema"].clone());
        let merge = schema
            .as_ref()
            .and_then(|s| MergeSchema::from_openapi_v3(s).ok())
            .map(|m| Arc::new(m.with_status_subresource(status)));
        versions.push(Version {
            name: req(&v["name"], "spec.versions[].name")?,
            columns,
            status,
            schema,
            merge,
        });
    }
    // Preferred version first: Kubernetes sorts by version priority (GA > beta > alpha).
    versions.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.name)));
    Ok(ResourceType {
        gr: GroupResource::new(&group, &plural),
        versions,
        singular: spec["names"]["singular"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| kind.to_lowercase()),
        kind,
        namespaced,
        short_names: strings(&spec["names"]["shortNames"]),
        categories: strings(&spec["names"]["categories"]),
        generation: true,
        // Custom resources are answered with a Success Status, as kube-apiserver's
        // custom resource registry does.
        return_deleted: false,
        custom: true,
        stored_as: None,
        strategy: &Generic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Cell;
    use serde_json::json;

    fn crd() -> Value {
        json!({
            "metadata": {"name": "datajobs.policyhost.dev"},
            "spec": {
                "group": "policyhost.dev",
                "scope": "Namespaced",
                "names": {"plural": "datajobs", "kind": "DataJob", "shortNames": ["dj"]},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": true,
                     "subresources": {"status": {}},
                     "additionalPrinterColumns": [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]},
                    {"name": "v1", "served": true, "storage": false}
                ]
            }
        })
    }

    #[test]
    fn crd_defines_a_namespaced_type_with_preferred_version_first() {
        let t = from_crd(&crd()).unwrap();
        assert_eq!(t.gr, GroupResource::new("policyhost.dev", "datajobs"));
        assert_eq!(t.versions[0].name, "v1");
        assert_eq!(t.singular, "datajob");
        assert!(t.has_status());
        let phase = &t.version("v1alpha1").unwrap().columns[0];
        assert!(matches!(&phase.cell, Cell::Path(path) if path == ".status.phase"));
    }

    #[test]
    fn crd_name_must_be_plural_dot_group() {
        let mut c = crd();
        c["metadata"]["name"] = json!("wrong");
        assert_eq!(
            from_crd(&c).unwrap_err(),
            Error::Name {
                name: "wrong".into()
            }
        );
    }
}
