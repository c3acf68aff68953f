//! Label and field selectors, parsed from query parameters and matched against object summaries.

use crate::object::Meta;

/// Why a selector string was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The label selector does not parse.
    #[error("unable to parse requirement: {0}")]
    Label(String),
    /// The field selector does not parse.
    #[error("invalid field selector: {0}")]
    Field(String),
    /// The field selector names a field this resource cannot be selected by.
    #[error("{}", unsupported(.0, *.1))]
    UnsupportedField(String, Wording),
}

/// How kube-apiserver words a field selector the resource does not support, which
/// depends on where the resource's selectable fields are defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wording {
    /// Only the generic `metadata.name` and `metadata.namespace` (most resources).
    Generic,
    /// A field label conversion of the API scheme (core kinds with selectable fields,
    /// custom resources).
    Conversion,
    /// A kind whose registry names itself (Jobs).
    Kind(&'static str),
}

fn unsupported(field: &str, wording: Wording) -> String {
    match wording {
        Wording::Generic => format!(
            "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ),
        Wording::Conversion => format!("field label not supported: {field}"),
        Wording::Kind(kind) => format!("field label {field:?} not supported for {kind}"),
    }
}

/// The fields a resource can be selected by besides `metadata.name` and
/// `metadata.namespace`, and how an unsupported one is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Selectable {
    /// The extra fields.
    pub(crate) fields: &'static [&'static str],
    /// The wording of the 400 for any other.
    pub(crate) wording: Wording,
}

impl Selectable {
    /// Only the name and namespace.
    pub(crate) const NAME_ONLY: Self = Self {
        fields: &[],
        wording: Wording::Generic,
    };

    /// The selectable fields of a resource, as kube-apiserver allows them.
    pub(crate) fn of(group: &str, resource: &str, custom: bool) -> Self {
        let fields = selectable_fields(group, resource);
        let wording = match (group, resource) {
            _ if custom => Wording::Conversion,
            ("batch", "jobs") => Wording::Kind("Job"),
            ("", "pods" | "namespaces" | "secrets" | "events" | "services" | "nodes")
            | ("events.k8s.io", "events") => Wording::Conversion,
            _ => Wording::Generic,
        };
        Self { fields, wording }
    }
}

/// Results of selector parsing.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<(String, Op)>);

/// A label key, as kube's selector parser checks it.
fn valid_key(k: &str) -> bool {
    policyhost_names::label_key(k).is_ok()
}

fn valid_value(v: &str) -> bool {
    policyhost_names::label_value(v).is_ok()
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| Error::Label(format!("{whole}: expected a parenthesised set")))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
    if values.iter().any(|v| !valid_value(v)) {
        return Err(Error::Label(format!("{whole}: invalid value in set")));
    }
    Ok(values)
}

impl LabelSelector {
    /// Parses the `labelSelector` syntax (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`).
    pub(crate) fn parse(s: &str) -> Result<Self> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(k) = part.strip_prefix('!') {
                (k.trim().to_owned(), Op::NotExists)
            } else if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_owned(), Op::NotEq(v.trim().to_owned()))
            } else if let Some((k, v)) = part.split_once("==") {
                (k.trim().to_owned(), Op::Eq(v.trim().to_owned()))
            } else if let Some((k, v)) = part.split_once('=') {
                (k.trim().to_owned(), Op::Eq(v.trim().to_owned()))
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                (k.trim().to_owned(), Op::NotIn(parse_set(rest, part)?))
            } else if let Some((k, rest)) = part.split_once(" in ") {
                (k.trim().to_owned(), Op::In(parse_set(rest, part)?))
            } else {
                (part.to_owned(), Op::Exists)
            };
            if !valid_key(&req.0) {
                return Err(Error::Label(format!(
                    "{part}: invalid label key {:?}",
                    req.0
                )));
            }
            if let Op::Eq(v) | Op::NotEq(v) = &req.1
                && !valid_value(v)
            {
                return Err(Error::Label(format!("{part}: invalid label value {v:?}")));
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether the selector has no requirements.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A label pair every match must carry (`k=v` or `k in (v)`), for index lookups.
    pub(crate) fn required_pair(&self) -> Option<(&str, &str)> {
        self.0.iter().find_map(|(k, op)| match op {
            Op::Eq(v) => Some((k.as_str(), v.as_str())),
            Op::In(vs) if vs.len() == 1 => Some((k.as_str(), vs[0].as_str())),
            _ => None,
        })
    }

    /// Whether `labels` satisfies every requirement.
    pub(crate) fn matches(&self, labels: &[(String, String)]) -> bool {
        let get = |k: &str| {
            labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map(|(_, v)| v.as_str())
        };
        self.0.iter().all(|(k, op)| match op {
            Op::Eq(v) => get(k) == Some(v.as_str()),
            Op::NotEq(v) => get(k) != Some(v.as_str()),
            Op::In(vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Op::NotIn(vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Op::Exists => get(k).is_some(),
            Op::NotExists => get(k).is_none(),
        })
    }
}

/// The fields a resource can be selected by besides `metadata.name` and `metadata.namespace`,
/// as kube-apiserver allows them.
pub(crate) fn selectable_fields(group: &str, resource: &str) -> &'static [&'static str] {
    match (group, resource) {
        ("", "pods") => &[
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
        ],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source.component",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        ],
        _ => &[],
    }
}

/// A parsed field selector: `a=b,c!=d`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses a field selector on a resource whose fields are `allowed`.
    pub(crate) fn parse(s: &str, allowed: &Selectable) -> Result<Self> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(Error::Field(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let k = k.trim();
            if !matches!(k, "metadata.name" | "metadata.namespace") && !allowed.fields.contains(&k)
            {
                return Err(Error::UnsupportedField(k.to_owned(), allowed.wording));
            }
            reqs.push((k.to_owned(), eq, v.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    /// Whether the selector has no requirements.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The exact name this selector pins, if any (lets a list skip the scan).
    pub(crate) fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether `meta` satisfies every requirement.
    pub(crate) fn matches(&self, meta: &Meta) -> bool {
        self.0.iter().all(|(f, eq, v)| {
            let actual = match f.as_str() {
                "metadata.name" => meta.name.as_str(),
                "metadata.namespace" => meta.namespace.as_str(),
                other => meta.field(other).unwrap_or(""),
            };
            (actual == v) == *eq
        })
    }
}

/// Both selectors of a list or watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    /// The label selector.
    pub(crate) labels: LabelSelector,
    /// The field selector.
    pub(crate) fields: FieldSelector,
    /// The shard selector, where the feature gate serves one.
    pub(crate) shard: Option<crate::sharding::ShardSelector>,
}

impl Selectors {
    /// Whether the object passes all three.
    pub(crate) fn matches(&self, meta: &Meta) -> bool {
        self.labels.matches(&meta.labels)
            && self.fields.matches(meta)
            && self.shard.as_ref().is_none_or(|s| s.matches(meta))
    }

    /// Whether none selects anything.
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty() && self.shard.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn equality_and_inequality_select_by_value() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        assert!(LabelSelector::parse("app=web").unwrap().matches(&l));
        assert!(
            LabelSelector::parse("app==web,tier=front")
                .unwrap()
                .matches(&l)
        );
        assert!(!LabelSelector::parse("app!=web").unwrap().matches(&l));
        assert!(LabelSelector::parse("env!=prod").unwrap().matches(&l));
    }

    #[test]
    fn set_based_requirements_select_by_membership() {
        let l = labels(&[("env", "prod")]);
        assert!(
            LabelSelector::parse("env in (prod, staging)")
                .unwrap()
                .matches(&l)
        );
        assert!(
            !LabelSelector::parse("env notin (prod)")
                .unwrap()
                .matches(&l)
        );
        assert!(LabelSelector::parse("tier notin (x)").unwrap().matches(&l));
        assert!(LabelSelector::parse("env,!tier").unwrap().matches(&l));
        assert!(!LabelSelector::parse("tier").unwrap().matches(&l));
    }

    #[test]
    fn equality_requirements_name_an_indexable_pair() {
        assert_eq!(
            LabelSelector::parse("a!=b,c=d").unwrap().required_pair(),
            Some(("c", "d"))
        );
        assert_eq!(
            LabelSelector::parse("a in (x)").unwrap().required_pair(),
            Some(("a", "x"))
        );
        assert_eq!(
            LabelSelector::parse("a in (x,y),!b")
                .unwrap()
                .required_pair(),
            None
        );
    }

    #[test]
    fn keys_and_values_follow_the_label_rules() {
        assert!(LabelSelector::parse("app.kubernetes.io/name=web").is_ok());
        let long = "k".repeat(64);
        for bad in [
            format!("{long}=v"),
            "Example.com/a=v".to_owned(),
            "a/b/c=v".to_owned(),
            "-a=v".to_owned(),
            format!("a={long}"),
            "a=-v".to_owned(),
        ] {
            assert!(LabelSelector::parse(&bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn malformed_selectors_are_rejected() {
        assert!(LabelSelector::parse("a in x").is_err());
        assert!(LabelSelector::parse("a=b c").is_err());
        assert_eq!(
            FieldSelector::parse("spec.foo=1", &Selectable::NAME_ONLY),
            Err(Error::UnsupportedField("spec.foo".into(), Wording::Generic))
        );
    }

    #[test]
    fn field_selectors_match_name_and_phase() {
        let meta = Meta {
            name: "p".into(),
            namespace: "ns".into(),
            fields: vec![("status.phase", "Running".into())],
            ..Meta::default()
        };
        let pods = &Selectable::of("", "pods", false);
        assert!(
            FieldSelector::parse("metadata.name=p,status.phase=Running", pods)
                .unwrap()
                .matches(&meta)
        );
        assert!(
            !FieldSelector::parse("status.phase!=Running", pods)
                .unwrap()
                .matches(&meta)
        );
        assert_eq!(
            FieldSelector::parse("metadata.name=p", &Selectable::NAME_ONLY)
                .unwrap()
                .pinned_name(),
            Some("p")
        );
    }
}

#[cfg(test)]
mod wording_tests {
    use super::*;

    #[test]
    fn unsupported_fields_are_worded_as_each_resource_words_them() {
        let message = |group, resource, custom| {
            FieldSelector::parse("data.k=x", &Selectable::of(group, resource, custom))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            message("", "configmaps", false),
            "\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert_eq!(
            message("", "pods", false),
            "field label not supported: data.k"
        );
        assert_eq!(
            message("policyhost.dev", "datajobs", true),
            "field label not supported: data.k"
        );
        assert_eq!(
            message("batch", "jobs", false),
            "field label \"data.k\" not supported for Job"
        );
    }
}
