//! Conversion between the two faces of one stored kind: `events.k8s.io/v1` Events are
//! stored as core/v1 Events, as kube-apiserver does, so `kubectl get events` and
//! `kubectl describe` show what controllers record through either API.

use serde_json::{Map, Value};

/// `(events.k8s.io/v1 field, core/v1 field)` pairs that only differ by name.
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(
    v: Value,
    pairs: impl Iterator<Item = (&'static str, &'static str)>,
    api_version: &str,
) -> Value {
    let Value::Object(mut m) = v else { return v };
    let mut out = Map::new();
    for (from, to) in pairs {
        if let Some(x) = m.remove(from) {
            out.insert(to.to_owned(), x);
        }
    }
    out.extend(m);
    out.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    out.insert("kind".into(), Value::String("Event".into()));
    Value::Object(out)
}

/// An `events.k8s.io/v1` Event in its stored core/v1 form.
pub(crate) fn event_to_core(v: Value) -> Value {
    rename(v, RENAMED.iter().copied(), "v1")
}

/// A stored core/v1 Event as `events.k8s.io/v1`.
pub(crate) fn event_from_core(v: Value) -> Value {
    rename(v, RENAMED.iter().map(|(a, b)| (*b, *a)), "events.k8s.io/v1")
}

/// A field selector written against `events.k8s.io/v1` names, in stored core/v1 names.
pub(crate) fn event_field_selector(s: &str) -> String {
    s.split(',')
        .map(|req| {
            let req = req.trim();
            RENAMED
                .iter()
                .find_map(|(new, old)| {
                    req.strip_prefix(new)
                        .filter(|rest| rest.starts_with(['.', '=', '!']))
                        .map(|rest| format!("{old}{rest}"))
                })
                .unwrap_or_else(|| req.to_owned())
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_round_trip_between_the_two_apis() {
        let new = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "started", "reason": "Started",
            "reportingController": "policyhost", "eventTime": "2024-01-01T00:00:00.000000Z",
        });
        let core = event_to_core(new.clone());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "started");
        assert_eq!(core["reportingComponent"], "policyhost");
        assert_eq!(event_from_core(core), new);
    }

    #[test]
    fn field_selectors_are_renamed() {
        assert_eq!(
            event_field_selector("regarding.name=p,reason=Started,reportingController!=x"),
            "involvedObject.name=p,reason=Started,reportingComponent!=x"
        );
    }
}
