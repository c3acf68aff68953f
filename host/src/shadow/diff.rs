//! How two answers to the same call differ: every difference named by its
//! JSON pointer, with both values, as `policy test` prints them.
//!
//! Answers are compared in a [`view`] where a reconcile's children are an
//! object keyed by `Kind:name`, not a list: a child added or removed is one
//! difference at its own pointer (`/children/Pod:w-3`), and a change inside
//! a manifest is named by its path in it
//! (`/children/Pod:w-1/spec/containers/0/image`), whatever the order the
//! versions list their children in.
//!
//! A Secret's values are never shown ([`mask_secrets`]): its `data` and
//! `stringData` read `***`, as `kubectl diff` shows them, and a value that
//! changed reads `*** (before)` against `*** (after)`. The summary is read
//! by the policy's publishers, not by whoever may read the Secrets.

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use crate::runtime;
#[cfg(test)]
use crate::runtime::Cleaned;

/// A value as a line shows it: cut at this many bytes.
const SHOWN_BYTES: usize = 160;

/// One place where two answers differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The JSON pointer of the place (`/` for the whole answer).
    pub pointer: String,
    /// The value on the expected side (the serving version, or a golden
    /// case's `expected`), if it has one there.
    pub expected: Option<Value>,
    /// The value on the other side (the candidate), if it has one there.
    pub actual: Option<Value>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        match (&self.expected, &self.actual) {
            (Some(expected), Some(actual)) => {
                write!(
                    f,
                    "{at}: expected {}, got {}",
                    shown(expected),
                    shown(actual)
                )
            }
            (Some(expected), None) => write!(f, "{at}: expected {}, missing", shown(expected)),
            (None, Some(actual)) => write!(f, "{at}: not expected, got {}", shown(actual)),
            (None, None) => write!(f, "{at}: same"),
        }
    }
}

/// Every place where `actual` differs from `expected`, sorted by pointer
/// within each object; arrays are compared index by index.
#[must_use]
pub fn differences(expected: &Value, actual: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    differences_at(expected, actual, &mut String::new(), &mut out);
    out
}

fn differences_at(expected: &Value, actual: &Value, at: &mut String, out: &mut Vec<Difference>) {
    let mut descend = |key: &str, expected: Option<&Value>, actual: Option<&Value>| {
        let len = at.len();
        at.push('/');
        at.push_str(&key.replace('~', "~0").replace('/', "~1"));
        match (expected, actual) {
            (Some(expected), Some(actual)) => differences_at(expected, actual, at, out),
            (None, None) => {}
            (expected, actual) => out.push(Difference {
                pointer: at.clone(),
                expected: expected.cloned(),
                actual: actual.cloned(),
            }),
        }
        at.truncate(len);
    };
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let mut keys: Vec<&String> = e.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                descend(key, e.get(key), a.get(key));
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            for i in 0..e.len().max(a.len()) {
                descend(&i.to_string(), e.get(i), a.get(i));
            }
        }
        _ if expected == actual => {}
        _ => out.push(Difference {
            pointer: at.clone(),
            expected: Some(expected.clone()),
            actual: Some(actual.clone()),
        }),
    }
}

/// A value on one line, cut at [`SHOWN_BYTES`].
fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > SHOWN_BYTES {
        format!("{}…", &text[..text.floor_char_boundary(SHOWN_BYTES)])
    } else {
        text
    }
}

/// What one call answered, as the comparison sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A result, or the policy's own error (`invalidParams`, `failed`), as
    /// result JSON (the shape `policy run` prints).
    Result(Value),
    /// A fault: trap, fuel, deadline, memory, invalid output.
    Fault {
        /// Its reason, e.g. `OutOfFuel`.
        reason: &'static str,
        /// What happened.
        message: String,
    },
}

impl Answer {
    /// The answer of a call ([`Reconciled`], [`Cleaned`]).
    #[must_use]
    pub fn of<T: serde::Serialize>(result: &runtime::Result<T>) -> Self {
        match result {
            Ok(value) => Self::of_value(value),
            Err(error) => Self::of_error(error),
        }
    }

    /// The answer of a call that returned `value`.
    #[must_use]
    pub fn of_value<T: serde::Serialize>(value: &T) -> Self {
        Self::json(serde_json::to_value(value))
    }

    /// The answer of a call that failed: the policy's own error, or a fault.
    #[must_use]
    pub fn of_error(error: &runtime::Error) -> Self {
        match error {
            runtime::Error::PolicyError(error) => Self::json(serde_json::to_value(error)),
            fault => Self::Fault {
                reason: fault.reason(),
                message: crate::chain::display_chain(fault),
            },
        }
    }

    fn json(json: serde_json::Result<Value>) -> Self {
        match json {
            Ok(json) => Self::Result(json),
            Err(error) => Self::Fault {
                reason: "InvalidOutput",
                message: error.to_string(),
            },
        }
    }

    /// The answer with `requests` (request lines) as its `outbound`: what
    /// the call asked of the network is part of what it answered. A fault
    /// stays a fault.
    #[must_use]
    pub fn with_outbound(self, requests: Vec<String>) -> Self {
        match self {
            Self::Result(mut value) => {
                if let Value::Object(fields) = &mut value {
                    fields.insert("outbound".into(), Value::from(requests));
                }
                Self::Result(value)
            }
            fault @ Self::Fault { .. } => fault,
        }
    }

    /// The answer as it is compared ([`view`]): a fault is `{"fault": REASON}`.
    #[must_use]
    pub fn compared(&self) -> Value {
        match self {
            Self::Result(value) => view(value.clone()),
            Self::Fault { reason, .. } => serde_json::json!({ "fault": reason }),
        }
    }
}

/// The digest (`sha256:…`) of a call's answer: its result, or the policy's
/// own error, as JSON; none for a fault, whose message may name addresses
/// and times. The JSON goes straight into the hash, no tree of it built:
/// every serving call's decision takes one.
#[must_use]
pub fn answer_digest<T: serde::Serialize>(result: &runtime::Result<T>) -> Option<String> {
    match result {
        Ok(value) => json_digest(value),
        Err(runtime::Error::PolicyError(error)) => json_digest(error),
        Err(_) => None,
    }
}

/// The digest (`sha256:…`) of `value` as JSON.
pub(crate) fn json_digest<T: serde::Serialize>(value: &T) -> Option<String> {
    let mut hashing = Hashing(Sha256::new());
    serde_json::to_writer(&mut hashing, value).ok()?;
    Some(format!("sha256:{}", hex::encode(hashing.0.finalize())))
}

/// Bytes written into a hash.
struct Hashing(Sha256);

impl std::io::Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A result JSON (the shape `policy run` prints) as answers are compared:
/// `children` becomes an object keyed by `Kind:name`. Anything else is left
/// as it is.
#[must_use]
pub fn view(mut result: Value) -> Value {
    if let Some(Value::Array(children)) = result.get_mut("children") {
        let keyed: Map<String, Value> = children
            .drain(..)
            .map(|child| {
                let field = |name: &str| child.get(name).and_then(Value::as_str).unwrap_or("");
                let key = format!("{}:{}", field("kind"), field("name"));
                (key, child.get("manifest").cloned().unwrap_or(child))
            })
            .collect();
        result["children"] = Value::Object(keyed);
    }
    result
}

/// How a candidate's answer compares with the serving version's.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The same answer.
    Same,
    /// A different answer: where.
    Differs(Vec<Difference>),
    /// The candidate faulted (whatever the serving version answered).
    Fault {
        /// Its reason.
        reason: &'static str,
        /// What happened.
        message: String,
    },
}

impl Verdict {
    /// The verdict as a trace attribute shows it.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Same => "same",
            Self::Differs(_) => "differs",
            Self::Fault { .. } => "fault",
        }
    }
}

/// Compares the candidate's answer with the serving version's; a Secret's
/// values in the differences are masked.
#[must_use]
pub fn compare(serving: &Answer, candidate: &Answer) -> Verdict {
    match candidate {
        Answer::Fault { reason, message } => Verdict::Fault {
            reason,
            message: message.clone(),
        },
        Answer::Result(_) => {
            let mut found = differences(&serving.compared(), &candidate.compared());
            mask_secrets(&mut found);
            if found.is_empty() {
                Verdict::Same
            } else {
                Verdict::Differs(found)
            }
        }
    }
}

/// What a Secret's value reads as.
const MASK: &str = "***";
/// The fields of a Secret that hold its values.
const SECRET_FIELDS: [&str; 2] = ["data", "stringData"];

/// Masks the values of Secret children in `found` (at
/// `/children/Secret:NAME…`): a whole Secret or its `data` and `stringData`
/// show each key with [`MASK`]; one value that changed shows
/// `*** (before)` and `*** (after)`. Where the difference is, and which
/// keys, stay shown.
pub fn mask_secrets(found: &mut [Difference]) {
    for difference in found {
        let Some(inside) = difference
            .pointer
            .strip_prefix("/children/Secret:")
            .map(|rest| rest.split_once('/').map_or("", |(_, inside)| inside))
        else {
            continue;
        };
        let mut path = inside.split('/').filter(|segment| !segment.is_empty());
        let (field, key) = (path.next(), path.next());
        let both = difference.expected.is_some() && difference.actual.is_some();
        let sides = [
            (&mut difference.expected, "before"),
            (&mut difference.actual, "after"),
        ];
        for (side, when) in sides {
            let Some(value) = side else { continue };
            match (field, key) {
                (None, _) => {
                    for field in SECRET_FIELDS {
                        mask_values(value.get_mut(field));
                    }
                }
                (Some(field), None) if SECRET_FIELDS.contains(&field) => mask_values(Some(value)),
                (Some(field), Some(_)) if SECRET_FIELDS.contains(&field) => {
                    *value = Value::String(if both {
                        format!("{MASK} ({when})")
                    } else {
                        MASK.to_owned()
                    });
                }
                _ => {}
            }
        }
    }
}

/// Replaces each value of an object with [`MASK`]; anything else whole.
fn mask_values(value: Option<&mut Value>) {
    match value {
        Some(Value::Object(values)) => values
            .values_mut()
            .for_each(|value| *value = Value::String(MASK.to_owned())),
        Some(value) => *value = Value::String(MASK.to_owned()),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lines(expected: &Value, actual: &Value) -> Vec<String> {
        differences(expected, actual)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn differences_are_named_by_their_json_pointer_with_both_values() {
        let expected = json!({"status": {"phase": "Running", "conditions": [1, 2]}, "events": []});
        assert!(differences(&expected, &expected).is_empty());
        let actual = json!({"status": {"phase": "Pending", "conditions": [1]}, "requeueAfterMs": 5, "events": []});
        assert_eq!(
            lines(&expected, &actual),
            [
                "/requeueAfterMs: not expected, got 5",
                "/status/conditions/1: expected 2, missing",
                "/status/phase: expected \"Running\", got \"Pending\"",
            ]
        );
        assert_eq!(lines(&json!(1), &json!("1")), ["/: expected 1, got \"1\""]);
        assert_eq!(
            lines(&json!({"a/b": 1}), &json!({"a/b": 2})),
            ["/a~1b: expected 1, got 2"]
        );
        let long = json!("x".repeat(400));
        let line = &lines(&json!(1), &long)[0];
        assert!(line.ends_with('…') && line.len() < 200, "{line}");
    }

    fn reconciled(children: Value) -> Value {
        json!({"children": children, "status": {"phase": "Running"}, "events": []})
    }

    fn pod(name: &str, image: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "name": name, "manifest": {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": image}]}
        }})
    }

    #[test]
    fn children_are_compared_by_kind_and_name_whatever_their_order() {
        let serving = view(reconciled(json!([pod("w-0", "a"), pod("w-1", "a")])));
        let reordered = view(reconciled(json!([pod("w-1", "a"), pod("w-0", "a")])));
        assert!(differences(&serving, &reordered).is_empty());

        let added = view(reconciled(json!([
            pod("w-0", "a"),
            pod("w-1", "a"),
            pod("w-2", "a")
        ])));
        let found = differences(&serving, &added);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pointer, "/children/Pod:w-2");
        assert!(found[0].expected.is_none());
        assert!(
            found[0]
                .to_string()
                .starts_with("/children/Pod:w-2: not expected, got {")
        );

        let changed = view(reconciled(json!([pod("w-0", "a"), pod("w-1", "b")])));
        assert_eq!(
            lines(&serving, &changed),
            ["/children/Pod:w-1/spec/containers/0/image: expected \"a\", got \"b\""]
        );
    }

    #[test]
    fn a_candidate_fault_is_a_fault_whatever_the_serving_version_answered() {
        let serving = Answer::Result(reconciled(json!([])));
        let fault = Answer::Fault {
            reason: "OutOfFuel",
            message: "out of fuel".into(),
        };
        assert_eq!(
            compare(&serving, &fault),
            Verdict::Fault {
                reason: "OutOfFuel",
                message: "out of fuel".into()
            }
        );
        assert_eq!(compare(&fault, &fault), compare(&serving, &fault));
        assert_eq!(compare(&serving, &serving), Verdict::Same);
        let Verdict::Differs(found) = compare(&fault, &serving) else {
            panic!("a serving fault and a candidate answer differ");
        };
        assert_eq!(found[0].pointer, "/children");
    }

    fn secret(name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "name": name, "manifest": {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "type": "Opaque", "data": data, "stringData": {"plain": "p-l41n"}
        }})
    }

    #[test]
    fn a_secrets_values_are_masked_and_a_change_still_shows() {
        let serving = Answer::Result(reconciled(json!([secret("s", json!({"token": "b2xk"}))])));
        let changed = Answer::Result(reconciled(json!([secret("s", json!({"token": "bmV3"}))])));
        let Verdict::Differs(found) = compare(&serving, &changed) else {
            panic!("a changed value differs");
        };
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [r#"/children/Secret:s/data/token: expected "*** (before)", got "*** (after)""#]
        );
        // A new key, a new data field, a Secret added or removed whole.
        let more = Answer::Result(reconciled(json!([
            secret("s", json!({"token": "b2xk", "extra": "ZXh0cmE="})),
            secret("t", json!({"token": "dG9rZW4="}))
        ])));
        let Verdict::Differs(found) = compare(&serving, &more) else {
            panic!("differs");
        };
        let text: String = found.iter().map(|d| format!("{d}\n")).collect();
        for secret in ["ZXh0cmE=", "dG9rZW4=", "b2xk", "p-l41n"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(
            text.contains(r#"/children/Secret:s/data/extra: not expected, got "***""#),
            "{text}"
        );
        assert!(text.contains(r#""data":{"token":"***"}"#), "{text}");
        assert!(text.contains(r#""stringData":{"plain":"***"}"#), "{text}");
        let Verdict::Differs(removed) = compare(&more, &serving) else {
            panic!("differs");
        };
        assert!(!format!("{removed:?}").contains("dG9rZW4="));
        // Other kinds, and a Secret's other fields, are shown as they are.
        let mut found = vec![
            Difference {
                pointer: "/children/ConfigMap:c/data/k".into(),
                expected: Some(json!("v1")),
                actual: Some(json!("v2")),
            },
            Difference {
                pointer: "/children/Secret:s/type".into(),
                expected: Some(json!("Opaque")),
                actual: Some(json!("kubernetes.io/tls")),
            },
        ];
        let before = found.clone();
        mask_secrets(&mut found);
        assert_eq!(found, before);
    }

    #[test]
    fn cleanup_answers_compare_done_retry_and_error() {
        let done = Answer::of(&Ok(Cleaned::Done));
        let retry = Answer::of(&Ok(Cleaned::RetryAfter {
            retry_after_ms: 500,
        }));
        assert_eq!(compare(&done, &done), Verdict::Same);
        let Verdict::Differs(found) = compare(&done, &retry) else {
            panic!("done and retry differ");
        };
        assert_eq!(
            found.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "/result: expected \"done\", got \"retryAfter\"",
                "/retryAfterMs: not expected, got 500"
            ]
        );
    }
}
