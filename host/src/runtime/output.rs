//! Checks a policy's result against the sandbox rules, and gives it the
//! shape of the result JSON (`docs/result-json.md`).
//!
//! One bad child rejects the whole result: the host applies all of a
//! reconcile or nothing.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::error::Category;
use serde_json::{Map, Value};

pub mod metadata;
mod scan;
pub(crate) mod status;
pub mod strategy;
mod unique;

#[cfg(feature = "fuzzing")]
pub(crate) use scan::reference::agrees_with_serde as scanner_agrees_with_serde;

use super::bindings::{CleanupResult, Condition, DesiredChild, Event, ReconcileResult};
use super::error::{Error, Result};
use super::kinds::{CHILD_KINDS, ChildKind};
use super::limits::Limits;
use crate::outbound::Redactor;
pub use strategy::UpdateStrategy;

/// A kind a policy may create (`apiVersion` + `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedKind {
    /// e.g. `v1`, `batch/v1`.
    pub api_version: String,
    /// e.g. `Pod`.
    pub kind: String,
}

impl AllowedKind {
    /// `apiVersion` + `kind`.
    #[must_use]
    pub fn new(api_version: &str, kind: &str) -> Self {
        Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// The kinds a policy may create unless its configuration says
    /// otherwise: every row of [`CHILD_KINDS`].
    #[must_use]
    pub fn defaults() -> Vec<Self> {
        CHILD_KINDS
            .iter()
            .map(|row| Self::new(row.api_version, row.kind))
            .collect()
    }
}

/// A kind written as `v1/Pod` or `batch/v1/Job`: the kind after the last slash.
impl std::str::FromStr for AllowedKind {
    type Err = NotAKind;

    fn from_str(text: &str) -> Result<Self, NotAKind> {
        match text.rsplit_once('/') {
            Some((api_version, kind)) if !api_version.is_empty() && !kind.is_empty() => {
                Ok(Self::new(api_version, kind))
            }
            _ => Err(NotAKind(text.to_owned())),
        }
    }
}

/// Text that does not name a kind as `APIVERSION/KIND`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not APIVERSION/KIND (e.g. v1/Pod or batch/v1/Job)")]
pub struct NotAKind(String);

/// A `reconcile` result that passed every check.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reconciled {
    /// The complete desired set of children.
    pub children: Vec<ValidChild>,
    /// The DataJob's new status.
    pub status: ReportedStatus,
    /// Call again after this many milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    /// Events to record on the DataJob.
    pub events: Vec<ReportedEvent>,
}

/// A desired child that passed every check; `manifest` is the policy's
/// object (JSON text) as it returned it: a JSON object whose `apiVersion`,
/// `kind` and `metadata.name` match the record and whose namespace, if any,
/// is the DataJob's. It serializes as an embedded JSON object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidChild {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// The object to apply, as JSON text.
    #[serde(serialize_with = "embedded_json")]
    pub manifest: String,
    /// How it changes once it exists, as the manifest declares.
    #[serde(skip)]
    pub update: UpdateStrategy,
}

impl ValidChild {
    /// The manifest with `metadata.namespace` set to `namespace`, ready to apply.
    ///
    /// # Errors
    ///
    /// Never for a validated child: its manifest is a JSON object.
    pub fn manifest_in(&self, namespace: &str) -> serde_json::Result<Map<String, Value>> {
        let mut manifest: Map<String, Value> = serde_json::from_str(&self.manifest)?;
        if let Some(Value::Object(metadata)) = manifest.get_mut("metadata") {
            metadata.insert("namespace".into(), Value::String(namespace.to_owned()));
        }
        Ok(manifest)
    }
}

fn embedded_json<S: serde::Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    let value: Value = serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
    value.serialize(s)
}

/// What the sandbox rules read in a manifest; the rest is skipped (its
/// syntax is still checked) without building a JSON tree.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head<'a> {
    #[serde(borrow, default)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    metadata: Option<metadata::Metadata<'a>>,
}

impl<'a> From<scan::Head<'a>> for Head<'a> {
    fn from(head: scan::Head<'a>) -> Self {
        Self {
            api_version: head.api_version.map(Cow::Borrowed),
            kind: head.kind.map(Cow::Borrowed),
            metadata: head.metadata,
        }
    }
}

/// The status a policy reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportedStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed`, ...
    pub phase: String,
    /// A human-readable summary.
    pub message: String,
    /// Conditions owned by the policy.
    pub conditions: Vec<ReportedCondition>,
    /// The JSON object for `status.outputs`.
    pub outputs: Value,
}

/// A condition, in Kubernetes' shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportedCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True` or `False`.
    pub status: &'static str,
    /// One-word reason.
    pub reason: String,
    /// Sentence.
    pub message: String,
}

/// An Event to record, in Kubernetes' shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportedEvent {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// One-word reason.
    pub reason: String,
    /// Sentence.
    pub message: String,
}

/// What `cleanup` reported, in the result JSON shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum Cleaned {
    /// Cleanup is complete.
    Done,
    /// Call again later.
    #[serde(rename_all = "camelCase")]
    RetryAfter {
        /// After this many milliseconds.
        retry_after_ms: u64,
    },
}

impl From<CleanupResult> for Cleaned {
    fn from(result: CleanupResult) -> Self {
        match result {
            CleanupResult::Done => Self::Done,
            CleanupResult::RetryAfterMs(ms) => Self::RetryAfter { retry_after_ms: ms },
        }
    }
}

/// Checks a `reconcile` result: size caps first (cheap), then the
/// credentials `redactor` finds are replaced, then every child is checked.
pub(crate) fn validate(
    result: ReconcileResult,
    namespace: &str,
    allowed: &[AllowedKind],
    limits: &Limits,
    redactor: &Redactor,
) -> Result<Reconciled> {
    let count = result.children.len() as u64;
    if count > u64::from(limits.children) {
        return Err(Error::OutputTooLarge {
            what: "children",
            actual: count,
            limit: u64::from(limits.children),
        });
    }
    let bytes = byte_size(&result);
    if bytes > limits.output_bytes {
        return Err(Error::OutputTooLarge {
            what: "bytes",
            actual: bytes,
            limit: limits.output_bytes,
        });
    }
    // Redacted before any check: an error that names part of the result
    // names the redacted part.
    let ReconcileResult {
        children,
        status,
        requeue_after_ms,
        events,
    } = redacted(result, redactor);
    let status = self::status::check(status)?;
    self::status::check_events(&events)?;
    let children = children
        .into_iter()
        .enumerate()
        .map(|(index, child)| validate_child(index, child, namespace, allowed))
        .collect::<Result<Vec<_>>>()?;
    unique::check(&children)?;
    let outputs = if status.outputs.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        match serde_json::from_str::<Value>(&status.outputs) {
            Ok(value @ Value::Object(_)) => value,
            Ok(_) => {
                return Err(Error::invalid_output(
                    "status.outputs",
                    "must be a JSON object",
                ));
            }
            Err(error) => {
                return Err(Error::invalid_output(
                    "status.outputs",
                    format!("is not valid JSON ({error})"),
                ));
            }
        }
    };
    Ok(Reconciled {
        children,
        status: ReportedStatus {
            phase: status.phase,
            message: status.message,
            conditions: status.conditions.into_iter().map(condition).collect(),
            outputs,
        },
        requeue_after_ms,
        events: events.into_iter().map(event).collect(),
    })
}

/// `result` with every credential `redactor` finds replaced: in each
/// string, and in the decoded strings of the JSON texts (outputs, manifests).
fn redacted(mut result: ReconcileResult, redactor: &Redactor) -> ReconcileResult {
    if redactor.is_empty() {
        return result;
    }
    let text = |text: &mut String| redactor.redact_string(text);
    for child in &mut result.children {
        text(&mut child.api_version);
        text(&mut child.kind);
        text(&mut child.name);
        redactor.redact_json_text(&mut child.manifest);
    }
    let status = &mut result.status;
    text(&mut status.phase);
    text(&mut status.message);
    redactor.redact_json_text(&mut status.outputs);
    for condition in &mut status.conditions {
        text(&mut condition.kind);
        text(&mut condition.reason);
        text(&mut condition.message);
    }
    for event in &mut result.events {
        text(&mut event.reason);
        text(&mut event.message);
    }
    result
}

fn condition(c: Condition) -> ReportedCondition {
    ReportedCondition {
        kind: c.kind,
        status: if c.status { "True" } else { "False" },
        reason: c.reason,
        message: c.message,
    }
}

fn event(e: Event) -> ReportedEvent {
    ReportedEvent {
        kind: if e.warning { "Warning" } else { "Normal" },
        reason: e.reason,
        message: e.message,
    }
}

/// The bytes of every string in the result: what the host must hold and apply.
fn byte_size(result: &ReconcileResult) -> u64 {
    let children: usize = result
        .children
        .iter()
        .map(|c| c.api_version.len() + c.kind.len() + c.name.len() + c.manifest.len())
        .sum();
    let status = &result.status;
    let conditions: usize = status
        .conditions
        .iter()
        .map(|c| c.kind.len() + c.reason.len() + c.message.len())
        .sum();
    let events: usize = result
        .events
        .iter()
        .map(|e| e.reason.len() + e.message.len())
        .sum();
    (children
        + status.phase.len()
        + status.message.len()
        + status.outputs.len()
        + conditions
        + events) as u64
}

fn validate_child(
    index: usize,
    child: DesiredChild,
    namespace: &str,
    allowed: &[AllowedKind],
) -> Result<ValidChild> {
    let at = || format!("children[{index}] ({} {})", child.kind, child.name);
    let fail = |rule: String| Err(Error::invalid_output(at(), rule));
    if !allowed
        .iter()
        .any(|k| k.api_version == child.api_version && k.kind == child.kind)
    {
        return fail(format!(
            "kind `{}` `{}` is not in the policy's allowed kinds",
            child.api_version, child.kind
        ));
    }
    if let Err(why) = ChildKind::check_name(&child.api_version, &child.kind, &child.name) {
        return fail(format!("name `{}` {why}", child.name));
    }
    // The fast path reads every manifest a builder writes; anything else is
    // parsed (and, if wrong, explained) by serde_json.
    let head: Head<'_> = match scan::head(&child.manifest) {
        Some(head) => Head::from(head),
        None => match serde_json::from_str(&child.manifest) {
            Ok(head) => head,
            Err(error) => {
                let object = child.manifest.trim_start().starts_with('{');
                let json = object || serde_json::from_str::<IgnoredAny>(&child.manifest).is_ok();
                return fail(match (json, object, error.classify()) {
                    (true, false, _) => "manifest must be a JSON object".into(),
                    (_, _, Category::Data) => {
                        format!("manifest is not a valid Kubernetes object ({error})")
                    }
                    _ => format!("manifest is not valid JSON ({error})"),
                });
            }
        },
    };
    if head.api_version.as_deref() != Some(child.api_version.as_str()) {
        return fail(format!(
            "manifest apiVersion {:?} does not match the record's `{}`",
            head.api_version, child.api_version
        ));
    }
    if head.kind.as_deref() != Some(child.kind.as_str()) {
        return fail(format!(
            "manifest kind {:?} does not match the record's `{}`",
            head.kind, child.kind
        ));
    }
    let Some(metadata) = head.metadata else {
        return fail("manifest has no metadata object".into());
    };
    if metadata.name.as_deref() != Some(child.name.as_str()) {
        return fail(format!(
            "manifest metadata.name {:?} does not match the record's `{}`",
            metadata.name, child.name
        ));
    }
    if let Some(ns) = metadata.namespace.as_deref()
        && ns != namespace
    {
        return fail(format!(
            "metadata.namespace \"{ns}\" is not the DataJob's namespace `{namespace}`"
        ));
    }
    if let Err(rule) = metadata::check(&metadata) {
        return fail(rule);
    }
    let update = match UpdateStrategy::declared(&child.manifest) {
        Ok(update) => update,
        Err(rule) => return fail(rule),
    };
    Ok(ValidChild {
        api_version: child.api_version,
        kind: child.kind,
        name: child.name,
        manifest: child.manifest,
        update,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::bindings::Status;
    use super::*;

    #[test]
    fn kinds_parse_with_or_without_a_group() {
        let parse = |text: &str| text.parse::<AllowedKind>();
        assert_eq!(parse("v1/Pod"), Ok(AllowedKind::new("v1", "Pod")));
        assert_eq!(
            parse("batch/v1/Job"),
            Ok(AllowedKind::new("batch/v1", "Job"))
        );
        assert_eq!(
            parse("Pod").map_err(|e| e.to_string()),
            Err("`Pod` is not APIVERSION/KIND (e.g. v1/Pod or batch/v1/Job)".to_owned())
        );
        assert!(parse("v1/").is_err());
    }

    fn pod(name: &str, manifest: Value) -> DesiredChild {
        DesiredChild {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: name.into(),
            manifest: manifest.to_string(),
        }
    }

    fn good_pod(name: &str) -> DesiredChild {
        pod(
            name,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}}),
        )
    }

    fn result(children: Vec<DesiredChild>) -> ReconcileResult {
        ReconcileResult {
            children,
            status: Status {
                phase: "Running".into(),
                message: "ok".into(),
                conditions: vec![Condition {
                    kind: "WorkersReady".into(),
                    status: true,
                    reason: "AllRunning".into(),
                    message: "m".into(),
                }],
                outputs: r#"{"running":1}"#.into(),
            },
            requeue_after_ms: None,
            events: vec![Event {
                warning: true,
                reason: "Slow".into(),
                message: "m".into(),
            }],
        }
    }

    fn check(children: Vec<DesiredChild>) -> Result<Reconciled> {
        validate(
            result(children),
            "ns",
            &AllowedKind::defaults(),
            &Limits::default(),
            &Redactor::none(),
        )
    }

    fn rule_of(error: Error) -> (String, String) {
        match error {
            Error::InvalidOutput { location, rule } => (location, rule),
            other => panic!("expected InvalidOutput, got {other}"),
        }
    }

    #[test]
    fn a_good_result_serializes_to_the_result_json_shape() {
        let ok = check(vec![good_pod("w-0")]).unwrap();
        let value = serde_json::to_value(&ok).unwrap();
        assert_eq!(
            value,
            json!({
                "children": [{"apiVersion": "v1", "kind": "Pod", "name": "w-0",
                  "manifest": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-0", "namespace": "ns"}}}],
                "status": {"phase": "Running", "message": "ok",
                  "conditions": [{"type": "WorkersReady", "status": "True", "reason": "AllRunning", "message": "m"}],
                  "outputs": {"running": 1}},
                "events": [{"type": "Warning", "reason": "Slow", "message": "m"}]
            })
        );
    }

    #[test]
    fn a_child_in_another_namespace_rejects_the_whole_result() {
        let bad = pod(
            "w-1",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-1", "namespace": "kube-system"}}),
        );
        let (location, rule) = rule_of(check(vec![good_pod("w-0"), bad]).unwrap_err());
        assert_eq!(location, "children[1] (Pod w-1)");
        assert!(
            rule.contains("\"kube-system\" is not the DataJob's namespace `ns`"),
            "{rule}"
        );
    }

    #[test]
    fn a_child_declares_its_update_strategy_and_no_other_host_key() {
        let declared = |annotations: Value| {
            pod(
                "w-0",
                json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "w-0", "annotations": annotations}}),
            )
        };
        let ok = check(vec![declared(
            json!({"policyhost.dev/update-strategy": "OnDelete"}),
        )])
        .unwrap();
        assert_eq!(ok.children[0].update, UpdateStrategy::OnDelete);
        assert_eq!(
            check(vec![good_pod("w-0")]).unwrap().children[0].update,
            UpdateStrategy::InPlace
        );
        let (location, rule) = rule_of(
            check(vec![declared(
                json!({"policyhost.dev/update-strategy": "Rolling"}),
            )])
            .unwrap_err(),
        );
        assert_eq!(location, "children[0] (Pod w-0)");
        assert!(rule.contains("\"Rolling\", not one of InPlace"), "{rule}");
        let (_, rule) = rule_of(
            check(vec![declared(
                json!({"policyhost.dev/update-strategies": "x"}),
            )])
            .unwrap_err(),
        );
        assert!(rule.contains("keys are the host's"), "{rule}");
    }

    #[test]
    fn a_kind_outside_the_allow_list_is_refused() {
        let child = DesiredChild {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRoleBinding".into(),
            name: "x".into(),
            manifest: "{}".into(),
        };
        let (_, rule) = rule_of(check(vec![child]).unwrap_err());
        assert!(rule.contains("not in the policy's allowed kinds"), "{rule}");
    }

    #[test]
    fn malformed_or_mismatched_manifests_are_refused() {
        let mut broken = good_pod("w-0");
        broken.manifest = "{not json".into();
        assert!(
            rule_of(check(vec![broken]).unwrap_err())
                .1
                .contains("not valid JSON")
        );
        let array = pod("w-0", json!([1]));
        assert!(
            rule_of(check(vec![array]).unwrap_err())
                .1
                .contains("JSON object")
        );
        let renamed = pod(
            "w-0",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other"}}),
        );
        assert!(
            rule_of(check(vec![renamed]).unwrap_err())
                .1
                .contains("metadata.name")
        );
        let rekinded = pod(
            "w-0",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "w-0"}}),
        );
        assert!(
            rule_of(check(vec![rekinded]).unwrap_err())
                .1
                .contains("manifest kind")
        );
    }

    #[test]
    fn caps_on_children_and_bytes_are_enforced() {
        let limits = Limits {
            children: 1,
            ..Limits::default()
        };
        let err = validate(
            result(vec![good_pod("a"), good_pod("b")]),
            "ns",
            &AllowedKind::defaults(),
            &limits,
            &Redactor::none(),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            Error::OutputTooLarge {
                what: "children",
                actual: 2,
                limit: 1
            }
        ));
        let limits = Limits {
            output_bytes: 10,
            ..Limits::default()
        };
        let err = validate(
            result(vec![good_pod("a")]),
            "ns",
            &AllowedKind::defaults(),
            &limits,
            &Redactor::none(),
        )
        .unwrap_err();
        assert!(matches!(err, Error::OutputTooLarge { what: "bytes", .. }));
    }

    #[test]
    fn a_credential_is_redacted_from_every_string_of_a_result_and_from_the_errors_naming_it() {
        const TOKEN: &str = r#"Bearer s3cret-"token"\x"#;
        let redactor = Redactor::new([TOKEN.as_bytes()]).expect("redactor");
        let escaped = serde_json::to_string(TOKEN).unwrap();
        let mut result = result(vec![pod(
            "w-0",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "w-0", "annotations": {"seen": TOKEN}},
                   "spec": {"containers": [{"name": "c", "args": [TOKEN]}]}}),
        )]);
        result.status.message = format!("the server said {TOKEN}");
        result.status.outputs = format!(r#"{{"seen":{escaped},{escaped}:1}}"#);
        result.status.conditions[0].message = TOKEN.into();
        result.events[0].message = format!("echo: {TOKEN}");
        let ok = validate(
            result.clone(),
            "ns",
            &AllowedKind::defaults(),
            &Limits::default(),
            &redactor,
        )
        .unwrap();
        let text = serde_json::to_string(&ok).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(ok.status.message, "the server said [redacted]");
        assert_eq!(
            ok.status.outputs,
            json!({"seen": "[redacted]", "[redacted]": 1})
        );
        assert_eq!(ok.status.conditions[0].message, "[redacted]");
        assert_eq!(ok.events[0].message, "echo: [redacted]");
        let manifest = ok.children[0].manifest_in("ns").unwrap();
        assert_eq!(manifest["metadata"]["annotations"]["seen"], "[redacted]");
        assert_eq!(manifest["spec"]["containers"][0]["args"][0], "[redacted]");
        // A part the checks refuse is named redacted: a phase, a reason, a
        // child's name.
        for mutate in [
            (|r: &mut ReconcileResult| r.status.phase = TOKEN.into()) as fn(&mut ReconcileResult),
            |r| r.status.conditions[0].reason = TOKEN.into(),
            |r| r.children[0].name = format!("w-{TOKEN}"),
        ] {
            let mut bad = result.clone();
            mutate(&mut bad);
            let error = validate(
                bad,
                "ns",
                &AllowedKind::defaults(),
                &Limits::default(),
                &redactor,
            )
            .unwrap_err()
            .to_string();
            assert!(!error.contains("s3cret"), "{error}");
        }
    }

    #[test]
    fn manifest_in_forces_the_namespace() {
        let ok = check(vec![pod(
            "w-0",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-0"}}),
        )])
        .unwrap();
        let manifest = ok.children[0].manifest_in("ns").unwrap();
        assert_eq!(manifest["metadata"]["namespace"], "ns");
    }

    #[test]
    fn cleanup_results_serialize_as_documented() {
        assert_eq!(
            serde_json::to_value(Cleaned::Done).unwrap(),
            json!({"result": "done"})
        );
        assert_eq!(
            serde_json::to_value(Cleaned::RetryAfter {
                retry_after_ms: 1000
            })
            .unwrap(),
            json!({"result": "retryAfter", "retryAfterMs": 1000})
        );
    }
}
