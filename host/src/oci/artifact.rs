//! The layout of a policy artifact: the CNCF wasm OCI artifact (an OCI
//! image manifest whose config is `application/vnd.wasm.config.v0+json`
//! and whose one layer is the component, `application/wasm`), and the
//! checks that a manifest is one before anything else is downloaded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::runtime::Digest;

/// The OCI image manifest media type.
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config media type of a wasm artifact.
pub const CONFIG_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of its one layer: the component.
pub const LAYER_TYPE: &str = "application/wasm";
/// Manifests that list other manifests: never a component.
const INDEX_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// What a pull accepts: the artifact's manifest, and the kinds a registry
/// may answer instead so that the refusal can name them.
pub const ACCEPT: &[&str] = &[
    MANIFEST_TYPE,
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// The largest manifest read: an artifact's is a few hundred bytes.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 10;

/// An OCI image manifest, as much of it as the host reads and writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`MANIFEST_TYPE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A blob a manifest points to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The descriptor of `bytes` as `media_type`.
    #[must_use]
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Self {
            media_type: media_type.to_owned(),
            digest: format!("sha256:{}", Digest::of(bytes)),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        }
    }
}

/// Why a manifest is not a policy artifact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A manifest list or image index: it names other manifests.
    #[error(
        "the reference names a manifest list ({0}), not a component: name the component's own manifest by its digest"
    )]
    Index(String),
    /// Not JSON, or not an image manifest.
    #[error("the manifest does not parse: {0}")]
    Malformed(String),
    /// A manifest of another media type (a container image, say).
    #[error("the manifest is {0}, not an OCI image manifest of a wasm component ({MANIFEST_TYPE})")]
    MediaType(String),
    /// The config says it is not a wasm artifact.
    #[error("the config is {0}, not {CONFIG_TYPE}: an image that is not a component")]
    Config(String),
    /// Not exactly one `application/wasm` layer.
    #[error("the artifact has {0}; a component artifact has exactly one layer, {LAYER_TYPE}")]
    Layers(String),
    /// A layer digest that is not `sha256:` and 64 hex digits.
    #[error("the layer's digest `{0}` is not sha256:<64 hex digits>")]
    Digest(String),
}

impl Manifest {
    /// Reads a manifest the registry answered with `content_type`, and
    /// checks that it is a component artifact: the component's descriptor.
    ///
    /// # Errors
    ///
    /// [`LayoutError`].
    pub fn component(body: &[u8], content_type: &str) -> Result<(Self, Digest), LayoutError> {
        if INDEX_TYPES.contains(&content_type) {
            return Err(LayoutError::Index(super::shown(content_type)));
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Kind {
            media_type: Option<String>,
            manifests: Option<serde_json::Value>,
        }
        let kind: Kind = serde_json::from_slice(body)
            .map_err(|e| LayoutError::Malformed(super::shown(&e.to_string())))?;
        if let Some(media_type) = kind.media_type.as_deref() {
            if INDEX_TYPES.contains(&media_type) {
                return Err(LayoutError::Index(super::shown(media_type)));
            }
            if media_type != MANIFEST_TYPE {
                return Err(LayoutError::MediaType(super::shown(media_type)));
            }
        }
        if kind.manifests.is_some() {
            return Err(LayoutError::Index("an image index".to_owned()));
        }
        let manifest: Self = serde_json::from_slice(body)
            .map_err(|e| LayoutError::Malformed(super::shown(&e.to_string())))?;
        if manifest.schema_version != 2 {
            return Err(LayoutError::Malformed(format!(
                "schemaVersion {}, not 2",
                manifest.schema_version
            )));
        }
        if manifest.config.media_type != CONFIG_TYPE {
            return Err(LayoutError::Config(super::shown(
                &manifest.config.media_type,
            )));
        }
        let layer = match manifest.layers.as_slice() {
            [layer] if layer.media_type == LAYER_TYPE => layer,
            [layer] => {
                return Err(LayoutError::Layers(format!(
                    "a {} layer",
                    super::shown(&layer.media_type)
                )));
            }
            layers => return Err(LayoutError::Layers(format!("{} layers", layers.len()))),
        };
        let digest = Digest::parse(&layer.digest)
            .ok_or_else(|| LayoutError::Digest(super::shown(&layer.digest)))?;
        Ok((manifest, digest))
    }

    /// The manifest of a component artifact: `config` and the component.
    #[must_use]
    pub fn of_component(config: &[u8], component: &[u8]) -> Self {
        Self {
            schema_version: 2,
            media_type: Some(MANIFEST_TYPE.to_owned()),
            config: Descriptor::of(CONFIG_TYPE, config),
            layers: vec![Descriptor::of(LAYER_TYPE, component)],
            annotations: BTreeMap::new(),
        }
    }

    /// The component layer's size, as the manifest declares it.
    #[must_use]
    pub fn component_size(&self) -> u64 {
        self.layers.first().map_or(0, |layer| layer.size)
    }
}

/// The config blob `policy push --oci` writes: what the component is.
#[must_use]
pub fn config_for(component: &[u8]) -> Vec<u8> {
    serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [format!("sha256:{}", Digest::of(component))],
    })
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_json(config: &str, layers: &[(&str, &str)]) -> Vec<u8> {
        let layers: Vec<serde_json::Value> = layers
            .iter()
            .map(|(media_type, digest)| {
                serde_json::json!({"mediaType": media_type, "digest": digest, "size": 10})
            })
            .collect();
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": config, "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
            "layers": layers,
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_component_artifact_gives_its_layer_digest() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let body = manifest_json(CONFIG_TYPE, &[(LAYER_TYPE, &digest)]);
        let (manifest, layer) = Manifest::component(&body, MANIFEST_TYPE).expect("a component");
        assert_eq!(layer.to_hex(), "ab".repeat(32));
        assert_eq!(manifest.component_size(), 10);
    }

    #[test]
    fn every_other_layout_is_refused_naming_what_it_is() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let image = manifest_json(
            "application/vnd.oci.image.config.v1+json",
            &[("application/vnd.oci.image.layer.v1.tar+gzip", &digest)],
        );
        let two = manifest_json(CONFIG_TYPE, &[(LAYER_TYPE, &digest), (LAYER_TYPE, &digest)]);
        let tar = manifest_json(CONFIG_TYPE, &[("application/x-tar", &digest)]);
        let short = manifest_json(CONFIG_TYPE, &[(LAYER_TYPE, "sha256:abc")]);
        let index = serde_json::json!({"schemaVersion": 2, "manifests": []}).to_string();
        let docker = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        })
        .to_string();
        type Expected = fn(&LayoutError) -> bool;
        let cases: [(&[u8], &str, Expected); 7] = [
            (&image, MANIFEST_TYPE, |e| {
                matches!(e, LayoutError::Config(_))
            }),
            (&two, MANIFEST_TYPE, |e| matches!(e, LayoutError::Layers(_))),
            (&tar, MANIFEST_TYPE, |e| matches!(e, LayoutError::Layers(_))),
            (&short, MANIFEST_TYPE, |e| {
                matches!(e, LayoutError::Digest(_))
            }),
            (index.as_bytes(), "application/json", |e| {
                matches!(e, LayoutError::Index(_))
            }),
            (b"{}", INDEX_TYPES[0], |e| {
                matches!(e, LayoutError::Index(_))
            }),
            (docker.as_bytes(), MANIFEST_TYPE, |e| {
                matches!(e, LayoutError::MediaType(_))
            }),
        ];
        for (body, content_type, expected) in cases {
            let error = Manifest::component(body, content_type).expect_err("refused");
            assert!(expected(&error), "{error}");
        }
        assert!(matches!(
            Manifest::component(b"not json", MANIFEST_TYPE),
            Err(LayoutError::Malformed(_))
        ));
        // A registry's text is cut before it reaches an error.
        let long = "x".repeat(10_000);
        let flood = manifest_json(&long, &[(LAYER_TYPE, &digest)]);
        let error = Manifest::component(&flood, MANIFEST_TYPE).expect_err("not a wasm config");
        assert!(
            error.to_string().len() < 300,
            "{} bytes",
            error.to_string().len()
        );
    }
}
