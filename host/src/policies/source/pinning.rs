//! A policy's pins put in force ([`crate::policies::pins`]): each pinned
//! digest is loaded from its revision as any version, with the policy's
//! grant as it is now (the compile cache makes that cheap for a version
//! compiled before, and shares its code with any other version of the same
//! digest); then they all go into force at once. A pin that does not read, or names a
//! version the policy never served, refuses the whole ConfigMap, and the
//! pins in force stay (as a refused version leaves the serving one).
//!
//! A pinned artifact comes from the artifact cache, where it was kept when
//! it served; one evicted since is pulled again within the load, bounded
//! by the pull timeout.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use super::Inner;
use super::record::{Content, Record};
use super::verdict::Refused;
use crate::policies::configmap;
use crate::policies::load;
use crate::policies::pins::Pins;
use crate::policies::registry::{Pinned, Version};
use crate::policies::report::Annotations;
use crate::quantity::format_bytes;
use crate::runtime::Digest;

impl Inner {
    /// Puts the pins `content` holds in force for `record`'s policy, and
    /// reports them (`PinsApplied`), or why not.
    pub(super) async fn pin(&self, record: &Record, content: &Content) {
        let pinned = match self.pinned(record, content).await {
            Ok(pinned) => pinned,
            Err(refused) => return self.rejected(record, refused).await,
        };
        let note = note(&pinned);
        self.count_pinned(&record.policy, Some(&pinned));
        self.registry.pin(&record.policy, Some(pinned));
        let annotations = Annotations {
            observed: record.fingerprint.clone(),
            loaded_at: Some(format!("{:.0}", Timestamp::now())),
            provides: Some(record.policy.clone()),
            ..Annotations::default()
        };
        self.report(record, annotations, false, "PinsApplied", &note)
            .await;
    }

    /// The pinned-code metric of `policy`, from the pins in force to
    /// `pinned` (none: unpinned).
    pub(super) fn count_pinned(&self, policy: &str, pinned: Option<&Pinned>) {
        let digests = |pinned: &Pinned| pinned.versions.keys().map(Digest::to_hex).collect();
        let before: Vec<String> = self
            .registry
            .pinned(policy)
            .map(|pinned| digests(&pinned))
            .unwrap_or_default();
        let now: Vec<(String, usize)> = pinned
            .map(|pinned| {
                pinned
                    .versions
                    .iter()
                    .map(|(digest, version)| (digest.to_hex(), version.policy.code_bytes()))
                    .collect()
            })
            .unwrap_or_default();
        self.metrics.policy_pinned(policy, &before, &now);
    }

    async fn pinned(&self, record: &Record, content: &Content) -> Result<Pinned, Refused> {
        let pins = Pins::parse(&content.data)
            .map_err(|error| Refused::Load(configmap::Error::from(error).into()))?;
        let mut versions = BTreeMap::new();
        for digest in pins.digests() {
            versions.insert(digest, self.load_revision(record, digest).await?);
        }
        Ok(Pinned { pins, versions })
    }

    /// Loads the version of `record`'s policy with `digest` from its
    /// revision, with the policy's grant.
    async fn load_revision(
        &self,
        record: &Record,
        digest: Digest,
    ) -> Result<Arc<Version>, Refused> {
        let load_error = |error: load::Error| Refused::Load(error);
        let kept = self
            .revisions
            .read(&record.policy, digest)
            .await
            .map_err(|error| load_error(error.into()))?;
        let settings = kept
            .settings(digest)
            .map_err(|error| load_error(configmap::Error::from(error).into()))?;
        let (outbound, pull) = self
            .grants
            .resolve(&record.policy)
            .await
            .map_err(Refused::Grant)?;
        let given = load::Given {
            remembered: None,
            outbound,
            pull,
            pinned: None,
        };
        let fetched = load::fetch(&self.config.load, &settings, &kept.binary_data, &given)
            .await
            .map_err(load_error)?;
        let loaded = load::load(
            &self.runtime,
            &self.config.load,
            &record.policy,
            (settings, kept.binary_data),
            fetched,
            given,
        )
        .await
        .map_err(load_error)?;
        Ok(Arc::new(Version::offered(
            loaded.policy,
            loaded.access,
            Some(record.reference()),
        )))
    }
}

/// `namespace team-b → sha256:3f5a0c1d2e3f (code 2.1Mi); …`: each pin and
/// the memory of the version it keeps loaded.
fn note(pinned: &Pinned) -> String {
    if pinned.pins.0.is_empty() {
        return "no DataJob is pinned".to_owned();
    }
    pinned
        .pins
        .0
        .iter()
        .map(|(target, digest)| {
            let code = pinned
                .versions
                .get(digest)
                .map(|version| format_bytes(version.policy.code_bytes() as u64))
                .unwrap_or_default();
            format!("{target} → sha256:{} (code {code})", &digest.to_hex()[..12])
        })
        .collect::<Vec<_>>()
        .join("; ")
}
