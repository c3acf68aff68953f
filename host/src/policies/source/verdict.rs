//! The verdict on one version a ConfigMap offers: whether the ConfigMap may
//! offer it at all ([`admit`], pure), then the load, and the version put in
//! service ([`Inner::serve`]) or refused with its reason ([`Refused`],
//! [`Inner::rejected`]); either way reported on the ConfigMap.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use tracing::{debug, info, warn};

use super::super::configmap::{self, Settings};
use super::super::load;
use super::super::provenance::Foreign;
use super::super::refusal;
use super::super::registry::{Role, Version};
use super::super::report::{self, Annotations};
use super::super::revisions;
use super::super::tenancy::Tenancy;
use super::record::{Asked, Claim, Content, Record};
use super::{After, Inner, Pending, Reported};
use crate::apply::events;
use crate::cache::ObjectKey;
use crate::chain::{Chain, display_chain};
use crate::grants;
use crate::runtime::MadeWith;
use crate::vocabulary::{CANDIDATE_ROLE, PINS_ROLE, POLICY_LABEL, ROLE_LABEL, ROLLOUT_ROLE};

/// What a ConfigMap offered to serve, for its revision and its report.
pub(super) struct Offered {
    /// Its settings and component, when its revision is to be kept.
    keep: Option<(
        Settings,
        std::collections::BTreeMap<String, k8s_openapi::ByteString>,
    )>,
    /// The field manager that wrote it.
    by: String,
    /// It asked for a version served before (`data.revision`).
    again: bool,
}

/// Why a version was not put in service.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The `policyhost.dev/policy` label is there but empty.
    #[error("the `{POLICY_LABEL}` label is empty: it names the policy")]
    Unnamed,
    /// The `policyhost.dev/role` label names no role the host knows.
    #[error(
        "the `{label}` label is `{0}`; the roles are `{candidate}`, `{pins}` and `{rollout}` (no label: the serving version)",
        label = ROLE_LABEL,
        candidate = CANDIDATE_ROLE,
        pins = PINS_ROLE,
        rollout = ROLLOUT_ROLE
    )]
    UnknownRole(String),
    /// The host's tenancy does not let this ConfigMap offer the version.
    #[error(transparent)]
    Tenancy(configmap::Error),
    /// Another ConfigMap holds the claim.
    #[error("the {} of policy `{}` is already ConfigMap {holder}; delete one of them", .claim.role, .claim.policy)]
    Conflict {
        /// What both claim.
        claim: Claim,
        /// The one that holds it.
        holder: ObjectKey,
    },
    /// The policy's grant cannot serve it.
    #[error(transparent)]
    Grant(grants::Refused),
    /// The version does not load.
    #[error(transparent)]
    Load(load::Error),
}

impl Refused {
    /// A short UpperCamelCase name for Events, annotations and metric labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unnamed => "InvalidName",
            Self::UnknownRole(_) => "InvalidConfig",
            Self::Tenancy(error) => error.reason(),
            Self::Conflict { .. } => "Conflict",
            Self::Grant(error) => error.reason(),
            Self::Load(error) => error.reason(),
        }
    }

    /// Whether the ConfigMap held its claim when refused: then the refusal
    /// is the policy's (the registry reports it to its DataJobs), otherwise
    /// only the ConfigMap's.
    #[must_use]
    pub fn of_the_holder(&self) -> bool {
        matches!(self, Self::Grant(_) | Self::Load(_))
    }
}

/// What an admitted ConfigMap holds for its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A version, in this role.
    Version(Role),
    /// Its pins.
    Pins,
    /// Its rollout plan.
    Rollout,
}

/// Who else holds what a ConfigMap claims, as the source sees it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holders {
    /// Another ConfigMap that holds the claim now and still exists.
    pub current: Option<ObjectKey>,
    /// Another ConfigMap the host recorded as holding it (on a start, or
    /// once the holder is gone, that one takes it whatever the list order).
    pub recorded: Option<ObjectKey>,
}

/// What `record` may hold for its policy under `tenancy`, given the
/// [`Holders`] of the claim. A ConfigMap the host recorded as the holder
/// takes it back from another one recorded too only if none holds it now.
///
/// # Errors
///
/// The [`Refused`] reason, first of: an empty policy name, an unknown role,
/// a name the tenancy does not allow, another holder.
pub fn admit(record: &Record, tenancy: Tenancy, holders: &Holders) -> Result<Held, Refused> {
    let (name, policy) = (record.key.name(), record.policy.as_str());
    if policy.is_empty() {
        return Err(Refused::Unnamed);
    }
    let (held, allowed) = match &record.role {
        Asked::Role(Role::Serving) => (
            Held::Version(Role::Serving),
            tenancy.check_provider(name, policy),
        ),
        Asked::Role(Role::Candidate) => (
            Held::Version(Role::Candidate),
            tenancy.check_candidate(name, policy),
        ),
        Asked::Pins => (Held::Pins, tenancy.check_pins(name, policy)),
        Asked::Rollout => (Held::Rollout, tenancy.check_rollout(name, policy)),
        Asked::Unknown(role) => return Err(Refused::UnknownRole(role.clone())),
    };
    allowed.map_err(Refused::Tenancy)?;
    let conflict = |holder: &ObjectKey| Refused::Conflict {
        claim: record.claim(),
        holder: holder.clone(),
    };
    if let Some(holder) = &holders.current {
        return Err(conflict(holder));
    }
    if !record.is_recorded_provider()
        && let Some(holder) = &holders.recorded
    {
        return Err(conflict(holder));
    }
    Ok(held)
}

impl Inner {
    /// Loads one version and puts it in service, or records its
    /// rejection; a version named as an artifact is pulled first, apart
    /// ([`Inner::pull`]). Says whether to load it again after a backoff
    /// (its registry was down or slow; the version in service keeps
    /// serving meanwhile).
    pub(super) async fn present(
        self: &Arc<Self>,
        record: &Arc<Record>,
        mut content: Content,
    ) -> After {
        if let Some(foreign) = &record.foreign {
            self.ignored(record, foreign).await;
            return After::Done;
        }
        let previous = self
            .state()
            .reported
            .get(&record.key)
            .map(|r| r.claim.clone());
        if let Some(previous) = previous.filter(|claim| *claim != record.claim()) {
            // The labels now claim something else: this ConfigMap no longer
            // holds what it held.
            self.release(&record.key, &previous);
        }
        let role = match self.claim(record) {
            Ok(Held::Version(role)) => role,
            Ok(Held::Pins) => {
                self.pin(record, &content).await;
                return After::Done;
            }
            Ok(Held::Rollout) => {
                self.roll_out(record, &content).await;
                return After::Done;
            }
            Err(refused) => {
                self.rejected(record, refused).await;
                return After::Done;
            }
        };
        let (outbound, pull) = match self.grants.resolve(&record.policy).await {
            Ok(resolved) => resolved,
            Err(refused) => {
                self.rejected(record, Refused::Grant(refused)).await;
                return After::Done;
            }
        };
        let given = load::Given {
            remembered: content.refused.clone(),
            outbound,
            pull,
            pinned: content.pinned.clone(),
        };
        if let Err(error) = self.revision_asked(record, &mut content).await {
            return self.failed(record, error).await;
        }
        let settings = match content.settings.clone() {
            Ok(settings) => settings,
            Err(error) => {
                return self
                    .failed(record, configmap::Error::from(error).into())
                    .await;
            }
        };
        let offered = Offered {
            // What its revision keeps, if it serves and this replica writes.
            keep: (role == Role::Serving
                && self.revisions.keep > 0
                && self.config.leadership.permits_writes())
            .then(|| (settings.clone(), content.binary_data.clone())),
            by: content.published_by.clone().unwrap_or_default(),
            again: content.again,
        };
        let fetched = match content.fetched.take() {
            Some(fetched) => fetched,
            None => {
                if let Some(artifact) = &settings.artifact {
                    let registry = artifact.registry().to_owned();
                    self.pull(record, content, settings, &given, &registry);
                    return After::Pulling;
                }
                // Nothing to pull: the checks of a version without an
                // artifact, at once.
                load::fetch(&self.config.load, &settings, &content.binary_data, &given).await
            }
        };
        let result = match fetched {
            Ok(fetched) => {
                load::load(
                    &self.runtime,
                    &self.config.load,
                    &record.policy,
                    (settings, content.binary_data),
                    fetched,
                    given,
                )
                .await
            }
            Err(error) => Err(error),
        };
        match result {
            Ok(loaded) => {
                self.serve(record, role, loaded, offered).await;
                After::Done
            }
            Err(error) => self.failed(record, error).await,
        }
    }

    /// A ConfigMap asking for a version served before (`data.revision`)
    /// gets that version's content from its revision, before anything
    /// else reads it (the pull too).
    async fn revision_asked(&self, record: &Record, content: &mut Content) -> load::Result<()> {
        let Ok(settings) = &content.settings else {
            return Ok(());
        };
        let Some(digest) = settings.revision else {
            return Ok(());
        };
        revisions::check_alone(digest, settings, &content.binary_data)?;
        let kept = self.revisions.read(&record.policy, digest).await?;
        content.settings = kept.settings(digest);
        content.binary_data = kept.binary_data;
        content.again = true;
        Ok(())
    }

    /// Reports a version that did not load; one refused for want of
    /// compile time is loaded again once its team has it.
    async fn failed(&self, record: &Record, error: load::Error) -> After {
        if let Some(refusal) = refusal::to_record(&error) {
            self.record_refusal(record, refusal).await;
        }
        if let Some(after) = error.retry_after() {
            // Not compiled for want of compile time: loaded again once the
            // policy has it, unless newer content comes.
            self.pending()
                .entry(record.key.clone())
                .or_insert(Pending::Refetch);
            self.queue.add_after(record.key.clone(), after);
        }
        let again = error.is_transient();
        self.rejected(record, Refused::Load(error)).await;
        if again { After::Retry } else { After::Done }
    }

    /// Pulls the artifact `content` names on a task of its own, within the
    /// bounds of its team and registry ([`super::pulls`]); what it pulled
    /// is queued to load.
    fn pull(
        self: &Arc<Self>,
        record: &Arc<Record>,
        content: Content,
        settings: Settings,
        given: &load::Given,
        registry: &str,
    ) {
        let team = self.config.load.teams.team_of(&record.policy);
        let given = load::Given {
            remembered: None,
            outbound: None,
            pull: Arc::clone(&given.pull),
            pinned: given.pinned.clone(),
        };
        let (inner, record) = (Arc::clone(self), Arc::clone(record));
        debug!(policy = %record.policy, configmap = %record.key, %team, "pulling the artifact");
        self.pulls
            .start(record.key.clone(), &team, registry, async move {
                let fetched =
                    load::fetch(&inner.config.load, &settings, &content.binary_data, &given).await;
                inner.fetched(
                    record,
                    Content {
                        fetched: Some(fetched),
                        ..content
                    },
                );
            });
    }

    /// Makes the ConfigMap the holder of its claim, if [`admit`] lets it;
    /// what it holds.
    fn claim(&self, record: &Record) -> Result<Held, Refused> {
        let claim = record.claim();
        let mut state = self.state();
        let current = state
            .owners
            .get(&claim)
            .filter(|holder| **holder != record.key && self.store.get(holder).is_some())
            .cloned();
        let recorded = self
            .store
            .lookup(self.by_claim, &claim)
            .into_iter()
            .find(|other| other.key != record.key && other.is_recorded_provider())
            .map(|other| other.key.clone());
        let role = admit(
            record,
            self.config.load.tenancy,
            &Holders { current, recorded },
        )?;
        state.owners.insert(claim, record.key.clone());
        Ok(role)
    }

    /// Puts a loaded version in `role`, keeps its revision when it is
    /// `offered` to serve, and reports it.
    async fn serve(&self, record: &Record, role: Role, loaded: load::Loaded, offered: Offered) {
        let policy = Arc::clone(&loaded.policy);
        let digest = policy.digest().to_hex();
        let version = Version::offered(
            Arc::clone(&policy),
            loaded.access.clone(),
            Some(record.reference()),
        );
        let replaced_digest = self
            .registry
            .install(role, version)
            .map(|replaced| replaced.digest());
        if role == Role::Serving {
            self.metrics
                .policy_swapped(&record.policy, replaced_digest.as_deref(), Some(&digest));
        }
        self.metrics
            .policy_load_duration
            .get_or_create(&crate::metrics::PolicyLabel {
                policy: record.policy.clone(),
            })
            .observe(loaded.took.as_secs_f64());
        info!(
            policy = %record.policy,
            role = %record.role,
            configmap = %record.key,
            %digest,
            replaced = ?replaced_digest,
            source = ?policy.source(),
            artifact = ?loaded.pulled.as_ref().map(|(artifact, _)| artifact.to_string()),
            took_ms = loaded.took.as_millis(),
            "policy version in service"
        );
        let again = offered.again;
        let history = self.keep_revision(record, &loaded, offered).await;
        let annotations = Annotations {
            observed: record.fingerprint.clone(),
            loaded_digest: Some(digest),
            loaded_at: Some(format!("{:.0}", Timestamp::now())),
            error: None,
            clamped: report::clamped_text(policy.clamped()),
            sdk: policy.made_with().map(MadeWith::label),
            provides: Some(record.policy.clone()),
            pinned: loaded.pinned.clone(),
            history,
        };
        let mut note = report::loaded_note(&policy, loaded.compressed, loaded.took.as_millis());
        if let Some((artifact, from_registry)) = &loaded.pulled {
            let how = if *from_registry {
                "pulled"
            } else {
                "from the artifact cache"
            };
            note = format!("{note}; {how}: {artifact}");
        }
        if again {
            note.push_str("; served again from its revision");
        }
        let reason = match role {
            Role::Serving => "PolicyLoaded",
            Role::Candidate => {
                note = format!("candidate of policy `{}`: {note}", record.policy);
                "CandidateLoaded"
            }
        };
        self.report(record, annotations, false, reason, &note).await;
    }

    /// Keeps the revision of a version that went into service, if
    /// `offered` is to be kept; the policy's history as the annotation says
    /// it, or `None` (left as it was) when not kept.
    async fn keep_revision(
        &self,
        record: &Record,
        loaded: &load::Loaded,
        offered: Offered,
    ) -> Option<String> {
        let (settings, binary_data) = offered.keep?;
        let digest = loaded.policy.digest();
        let pulled = loaded.pulled.as_ref().map(|(artifact, _)| artifact);
        let kept = revisions::Kept::of(settings, binary_data, digest, pulled);
        let owner = revisions::owned_by(record.key.name(), &record.uid);
        let pinned = self
            .registry
            .pinned(&record.policy)
            .map(|pinned| pinned.pins.digests())
            .unwrap_or_default();
        match self
            .revisions
            .record(&record.policy, owner, digest, kept, &offered.by, &pinned)
            .await
        {
            Ok(history) => Some(history.to_annotation()),
            Err(error) => {
                warn!(policy = %record.policy, error = %Chain(&error), "cannot keep the revision: a rollback cannot serve this version");
                None
            }
        }
    }

    /// Records a refused version (in the registry, for its role, when this
    /// ConfigMap holds the role) and reports it.
    pub(super) async fn rejected(&self, record: &Record, refused: Refused) {
        let holder = refused.of_the_holder();
        let reason = refused.reason();
        let message = display_chain(&refused);
        let role = record.role.known().filter(|_| holder);
        if let Some(role) = role {
            self.registry
                .reject(role, &record.policy, reason, message.clone());
        }
        self.metrics.policy_rejected(&record.policy, reason);
        let serving = role
            .and_then(|role| self.registry.version(&record.policy, role))
            .map(|version| version.digest());
        warn!(
            policy = %record.policy,
            role = %record.role,
            configmap = %record.key,
            reason,
            error = %message,
            serving = ?serving,
            "policy version rejected"
        );
        // What this ConfigMap has in service stays in its annotations.
        let previous = self
            .state()
            .reported
            .get(&record.key)
            .filter(|r| r.claim == record.claim() && holder)
            .map(|r| r.annotations.clone())
            .unwrap_or_default();
        // The holder stays recorded as such, so that a restart gives it the
        // claim again; any other holds none.
        let annotations = Annotations {
            observed: record.fingerprint.clone(),
            error: Some(format!("{reason}: {message}")),
            provides: holder.then(|| record.policy.clone()),
            ..previous
        };
        let note = report::rejected_note(reason, &message, serving.as_deref());
        self.report(record, annotations, true, "PolicyRejected", &note)
            .await;
    }

    /// Leaves a ConfigMap that may not be a policy alone: no load, no claim
    /// on the policy (the version in service keeps serving), no annotation
    /// (it is not the host's to write); a warning, the load-error metric and
    /// an Event say why.
    async fn ignored(&self, record: &Record, foreign: &Foreign) {
        let reason = foreign.reason();
        self.metrics.policy_rejected(&record.policy, reason);
        warn!(
            policy = %record.policy,
            configmap = %record.key,
            reason,
            why = %foreign,
            "ConfigMap ignored: not a policy source"
        );
        if !self.config.leadership.permits_writes() {
            return;
        }
        let note = format!("not loaded as policy `{}`: {foreign}", record.policy);
        events::record_on_policy(
            &self.client,
            &self.config.instance,
            record.reference(),
            true,
            "PolicyIgnored",
            &note,
        )
        .await;
    }

    /// Keeps a compile refusal on the ConfigMap (the leader writes it), so
    /// that the next start refuses the same bytes without compiling them.
    async fn record_refusal(&self, record: &Record, refusal: &crate::runtime::Refusal) {
        if !self.config.leadership.permits_writes() {
            return;
        }
        if let Err(error) = refusal::write(&self.api(&record.key), record.key.name(), refusal).await
        {
            warn!(configmap = %record.key, error = %Chain(&error), "cannot record the compile refusal");
        }
    }

    /// Writes the annotations and the Event on the ConfigMap.
    pub(super) async fn report(
        &self,
        record: &Record,
        annotations: Annotations,
        warning: bool,
        reason: &str,
        note: &str,
    ) {
        let leading = self.config.leadership.permits_writes();
        if leading
            && let Err(error) = annotations
                .write(&self.api(&record.key), record.key.name())
                .await
        {
            warn!(configmap = %record.key, error = %Chain(&error), "cannot annotate the policy ConfigMap");
        }
        self.state().reported.insert(
            record.key.clone(),
            Reported {
                claim: record.claim(),
                annotations,
            },
        );
        if !leading {
            debug!(configmap = %record.key, reason, "not leading: the leader reports the load");
            return;
        }
        events::record_on_policy(
            &self.client,
            &self.config.instance,
            record.reference(),
            warning,
            reason,
            note,
        )
        .await;
    }

    /// The ConfigMap is gone: if it held its claim, the version is out of
    /// service (DataJobs keep their children and report `PolicyUnavailable`;
    /// a candidate is no longer called), and another ConfigMap claiming it
    /// may take over.
    pub(super) fn gone(&self, record: &Record) {
        let reported = self.state().reported.remove(&record.key);
        let claim = reported.map_or_else(|| record.claim(), |r| r.claim);
        self.release(&record.key, &claim);
    }

    /// `key` no longer holds `claim`.
    fn release(&self, key: &ObjectKey, claim: &Claim) {
        {
            let mut state = self.state();
            if state.owners.get(claim) != Some(key) {
                return;
            }
            state.owners.remove(claim);
        }
        let policy = claim.policy.as_str();
        if claim.role == Asked::Pins {
            self.count_pinned(policy, None);
            self.registry.pin(policy, None);
            info!(%policy, configmap = %key, "pins out of force: their ConfigMap is gone");
        }
        if claim.role == Asked::Rollout {
            self.stop_rollout(policy);
            info!(%policy, configmap = %key, "rollout out of force: its ConfigMap is gone");
        }
        if let Some(role) = claim.role.known() {
            let removed = self.registry.remove(role, policy);
            if role == Role::Serving {
                let removed = removed.map(|version| version.digest());
                self.metrics
                    .policy_swapped(policy, removed.as_deref(), None);
            }
            info!(%policy, %role, configmap = %key, "version out of service: its ConfigMap is gone");
        }
        for other in self.store.lookup_keys(self.by_claim, claim) {
            if &other != key {
                debug!(%policy, configmap = %other, "another ConfigMap may take over");
                self.pending()
                    .entry(other.clone())
                    .or_insert(Pending::Refetch);
                self.queue.add(other);
            }
        }
    }

    pub(super) fn api(&self, key: &ObjectKey) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), key.namespace().unwrap_or_default())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in super::super) fn record(name: &str, policy: &str, role: impl Into<Asked>) -> Record {
        Record {
            key: ObjectKey::namespaced("policyhost-system", name),
            uid: format!("uid-{name}"),
            resource_version: "1".into(),
            policy: policy.into(),
            role: role.into(),
            fingerprint: "f".into(),
            foreign: None,
            provides: None,
            recorded: None,
            rollout: None,
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("policyhost-system", name)
    }

    fn reason<T>(result: Result<T, Refused>) -> Option<(&'static str, String)> {
        result
            .err()
            .map(|refused| (refused.reason(), refused.to_string()))
    }

    /// One row: a ConfigMap, the holders of its claim, the host's tenancy,
    /// and the verdict (`None`: admitted).
    struct Row {
        record: Record,
        tenancy: Tenancy,
        holders: Holders,
        verdict: Option<&'static str>,
    }

    #[test]
    fn admission_follows_the_name_rule_the_role_and_the_holder() {
        let free = Holders::default();
        let held_by = |name: &str| Holders {
            current: Some(key(name)),
            recorded: None,
        };
        let recorded_as = |name: &str| Holders {
            current: None,
            recorded: Some(key(name)),
        };
        let mut recorded_self = record("policy-etl", "etl", Role::Serving);
        recorded_self.provides = Some("etl".into());
        let rows = [
            Row {
                record: record("policy-etl", "etl", Role::Serving),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: None,
            },
            Row {
                record: record("candidate-etl", "etl", Role::Candidate),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: None,
            },
            Row {
                record: record("policy-etl", "", Role::Serving),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: Some("InvalidName"),
            },
            Row {
                record: record("policy-etl", "etl", Asked::Unknown("shadow".into())),
                tenancy: Tenancy::SingleTeam,
                holders: free.clone(),
                verdict: Some("InvalidConfig"),
            },
            Row {
                record: record("policy-etl", "etl", Role::Candidate),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: Some("NameMismatch"),
            },
            Row {
                record: record("candidate-etl", "etl", Role::Serving),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: Some("NameMismatch"),
            },
            Row {
                record: record("etl-next", "etl", Role::Candidate),
                tenancy: Tenancy::SingleTeam,
                holders: free.clone(),
                verdict: None,
            },
            Row {
                record: record("pins-etl", "etl", Asked::Pins),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: None,
            },
            Row {
                record: record("pins-reports", "etl", Asked::Pins),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: Some("NameMismatch"),
            },
            Row {
                record: record("etl-pins", "etl", Asked::Pins),
                tenancy: Tenancy::SingleTeam,
                holders: free.clone(),
                verdict: None,
            },
            Row {
                record: record("rollout-etl", "etl", Asked::Rollout),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: None,
            },
            Row {
                record: record("rollout-reports", "etl", Asked::Rollout),
                tenancy: Tenancy::Strict,
                holders: free.clone(),
                verdict: Some("NameMismatch"),
            },
            Row {
                record: record("etl-b", "etl", Role::Serving),
                tenancy: Tenancy::SingleTeam,
                holders: held_by("etl-a"),
                verdict: Some("Conflict"),
            },
            Row {
                record: record("etl-b", "etl", Role::Serving),
                tenancy: Tenancy::SingleTeam,
                holders: recorded_as("etl-a"),
                verdict: Some("Conflict"),
            },
            Row {
                record: recorded_self.clone(),
                tenancy: Tenancy::Strict,
                holders: recorded_as("other"),
                verdict: None,
            },
            Row {
                record: recorded_self,
                tenancy: Tenancy::Strict,
                holders: held_by("other"),
                verdict: Some("Conflict"),
            },
        ];
        for (i, row) in rows.iter().enumerate() {
            let admitted = admit(&row.record, row.tenancy, &row.holders);
            if let Ok(held) = &admitted {
                let asked = match held {
                    Held::Version(role) => Asked::Role(*role),
                    Held::Pins => Asked::Pins,
                    Held::Rollout => Asked::Rollout,
                };
                assert_eq!(asked, row.record.role, "row {i}: the role asked");
            }
            let got = reason(admitted).map(|(r, _)| r);
            assert_eq!(got, row.verdict, "row {i}: {:?}", row.record);
        }
    }

    #[test]
    fn every_refusal_says_what_to_do() {
        let conflict = admit(
            &record("etl-next", "etl", Role::Candidate),
            Tenancy::SingleTeam,
            &Holders {
                current: Some(key("etl-candidate")),
                recorded: None,
            },
        );
        assert_eq!(
            reason(conflict).unwrap().1,
            "the candidate of policy `etl` is already ConfigMap policyhost-system/etl-candidate; delete one of them"
        );
        let unnamed = admit(
            &record("policy-etl", "", Role::Serving),
            Tenancy::Strict,
            &Holders::default(),
        );
        assert_eq!(
            reason(unnamed).unwrap().1,
            "the `policyhost.dev/policy` label is empty: it names the policy"
        );
        let unknown = admit(
            &record("policy-etl", "etl", Asked::Unknown("shadow".into())),
            Tenancy::Strict,
            &Holders::default(),
        );
        assert_eq!(
            reason(unknown).unwrap().1,
            "the `policyhost.dev/role` label is `shadow`; the roles are `candidate`, `pins` and `rollout` (no label: the serving version)"
        );
    }

    #[test]
    fn only_a_refusal_after_the_claim_is_the_holders() {
        assert!(!Refused::Unnamed.of_the_holder());
        assert!(
            !Refused::Conflict {
                claim: record("a", "etl", Role::Serving).claim(),
                holder: key("b"),
            }
            .of_the_holder()
        );
        let load = Refused::Load(load::Error::Config(configmap::Error::NoModule));
        assert!(load.of_the_holder());
        assert_eq!(load.reason(), "NoModule");
    }
}
