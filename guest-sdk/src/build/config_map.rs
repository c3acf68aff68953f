//! A core `v1` ConfigMap.

use std::borrow::Cow;

use super::json::Json;
use super::kinds::CONFIG_MAP;
use super::meta::{self, Meta, Pairs};
use super::{Result, names};
use crate::DesiredChild;

/// A core `v1` ConfigMap with string data.
///
/// ```
/// use policyhost_sdk::build::ConfigMap;
///
/// let config = ConfigMap::new("demo-config").data("app.properties", "mode=fast\n").build()?;
/// assert_eq!(config.kind, "ConfigMap");
/// # Ok::<(), policyhost_sdk::build::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct ConfigMap<'a> {
    meta: Meta<'a>,
    data: Pairs<'a>,
}

impl<'a> ConfigMap<'a> {
    /// A ConfigMap named `name` (a DNS-1123 subdomain).
    pub fn new(name: impl Into<Cow<'a, str>>) -> Self {
        Self {
            meta: Meta::new(name.into()),
            data: Pairs::default(),
        }
    }

    /// Sets a data entry.
    pub fn data(mut self, key: impl Into<Cow<'a, str>>, value: impl Into<Cow<'a, str>>) -> Self {
        self.data.set(key.into(), value.into());
        self
    }

    /// Checks the ConfigMap and writes its manifest.
    ///
    /// # Errors
    ///
    /// [`super::Error::Invalid`] for a bad name, label or data key.
    pub fn build(self) -> Result<DesiredChild> {
        names::check_name(&CONFIG_MAP, &self.meta.name)?;
        self.meta.check()?;
        self.data
            .0
            .iter()
            .try_for_each(|(key, _)| names::check_config_key(key))?;
        let mut json = Json::with_capacity(
            96 + self.meta.name.len()
                + self.meta.labels.json_len()
                + self.meta.annotations.json_len()
                + self.data.json_len(),
        );
        meta::head(&mut json, &CONFIG_MAP);
        self.meta.write(&mut json);
        json.raw(",\"data\":");
        self.data.write(&mut json);
        json.byte(b'}');
        Ok(DesiredChild::from_json(
            CONFIG_MAP.api_version,
            CONFIG_MAP.kind,
            self.meta.name,
            json.into_string(),
        ))
    }
}

meta::metadata_setters!(ConfigMap {
    label: "Sets a label.",
    annotation: "Sets an annotation.",
});

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_config_map_manifest_carries_its_data() {
        let child = ConfigMap::new("cfg")
            .label("a", "b")
            .data("k", "v")
            .build()
            .unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&child.manifest).unwrap();
        assert_eq!(
            manifest,
            json!({ "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": "cfg", "labels": { "a": "b" } },
                    "data": { "k": "v" } })
        );
    }

    #[test]
    fn an_update_strategy_is_declared_by_its_annotation() {
        use crate::build::UpdateStrategy;
        let child = ConfigMap::new("cfg")
            .update_strategy(UpdateStrategy::OnDelete)
            .build()
            .unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&child.manifest).unwrap();
        assert_eq!(
            manifest["metadata"]["annotations"],
            json!({ "policyhost.dev/update-strategy": "OnDelete" })
        );
    }

    #[test]
    fn a_bad_data_key_is_refused() {
        assert!(ConfigMap::new("cfg").data("a/b", "v").build().is_err());
        assert!(ConfigMap::new("Cfg").build().is_err());
    }
}
