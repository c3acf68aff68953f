//! A stored object: its canonical JSON bytes, shared, plus the small summary reads and GC need.

use std::sync::{Arc, OnceLock};

use std::collections::HashSet;

use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value, json};

/// A group and a plural resource name, the identity of a storage table.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupResource {
    /// API group, "" for core.
    pub(crate) group: String,
    /// Plural resource name.
    pub(crate) resource: String,
}

impl GroupResource {
    /// A group-resource.
    pub(crate) fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_owned(),
            resource: resource.to_owned(),
        }
    }

    /// `pods` or `deployments.apps`, as error messages print it.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// Where an object lives inside one resource: namespace ("" when cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjectKey {
    /// Namespace, empty for cluster-scoped objects.
    pub(crate) namespace: String,
    /// Name.
    pub(crate) name: String,
}

impl ObjectKey {
    /// A key.
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// One `metadata.ownerReferences` entry, as much as GC needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OwnerRef {
    /// The owner's uid.
    pub(crate) uid: String,
    /// `blockOwnerDeletion`.
    pub(crate) block: bool,
}

/// The parsed summary kept beside the bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    /// `metadata.name`.
    pub(crate) name: String,
    /// `metadata.namespace`, empty when cluster-scoped.
    pub(crate) namespace: String,
    /// `metadata.uid`.
    pub(crate) uid: String,
    /// `metadata.resourceVersion` as a number.
    pub(crate) rv: u64,
    /// `metadata.labels`, in key order.
    pub(crate) labels: Vec<(String, String)>,
    /// Values of the selectable fields ([`SELECTABLE`]) the object has.
    pub(crate) fields: Vec<(&'static str, String)>,
    /// `metadata.ownerReferences`.
    pub(crate) owners: Vec<OwnerRef>,
    /// `metadata.finalizers`.
    pub(crate) finalizers: Vec<String>,
    /// Whether `metadata.deletionTimestamp` is set.
    pub(crate) deleting: bool,
}

/// Field paths that field selectors may name beyond `metadata.name`/`metadata.namespace`
/// (each resource allows a subset, see `selector::selectable_fields`).
pub(crate) const SELECTABLE: &[&str] = &[
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "reason",
    "reportingComponent",
    "reportingController",
    "source.component",
    "type",
];

impl Meta {
    /// The value of a selectable field, if the object has it.
    pub(crate) fn field(&self, path: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, v)| v.as_str())
    }

    /// Reads the summary out of an object.
    pub(crate) fn from_value(v: &Value) -> Self {
        let md = &v["metadata"];
        let s = |x: &Value| x.as_str().map(str::to_owned);
        let labels = md["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let owners = md["ownerReferences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|o| {
                        Some(OwnerRef {
                            uid: o["uid"].as_str()?.to_owned(),
                            block: o["blockOwnerDeletion"].as_bool().unwrap_or(false),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let finalizers = md["finalizers"]
            .as_array()
            .map(|a| a.iter().filter_map(&s).collect())
            .unwrap_or_default();
        Self {
            name: s(&md["name"]).unwrap_or_default(),
            namespace: s(&md["namespace"]).unwrap_or_default(),
            uid: s(&md["uid"]).unwrap_or_default(),
            rv: md["resourceVersion"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            labels,
            fields: SELECTABLE
                .iter()
                .filter_map(|path| {
                    let mut cur = v;
                    for part in path.split('.') {
                        cur = cur.get(part)?;
                    }
                    Some((*path, cur.as_str()?.to_owned()))
                })
                .collect(),
            owners,
            finalizers,
            deleting: !md["deletionTimestamp"].is_null(),
        }
    }

    /// The object's key.
    pub(crate) fn key(&self) -> ObjectKey {
        ObjectKey::new(&self.namespace, &self.name)
    }
}

/// An object as stored: immutable once built, shared by the store, lists and watch events.
///
/// Its canonical JSON is kept in up to two pieces: `metadata.managedFields` is cut out
/// and shared between objects that have the same one (objects written by the same manager
/// in the same second usually do), which halves the memory a large cluster takes. The
/// rest is one allocation of exactly its size: a serialiser's buffer grows by doubling,
/// and keeping it would cost up to twice the JSON (a 4.4 KB Pod took an 8 KiB block).
#[derive(Debug)]
pub(crate) struct Stored {
    /// The JSON without `managedFields`' value (all of it when there is none), written
    /// with `apiVersion` and `kind` first.
    json: Bytes,
    /// How many bytes after the opening `{` hold `apiVersion`, `kind` and the comma after
    /// them, which list items of built-in kinds leave out.
    type_meta: usize,
    /// The interned `managedFields` value and the offset in `json` where it goes.
    managed: Option<(Arc<[u8]>, usize)>,
    /// The summary.
    pub(crate) meta: Meta,
    /// `PartialObjectMetadata` JSON, built on first use.
    partial: OnceLock<Bytes>,
}

/// Shares `managedFields` encodings between stored objects.
#[derive(Debug)]
pub(crate) struct Interner {
    set: HashSet<Arc<[u8]>>,
    /// Set size after the last sweep of unused entries.
    swept: usize,
    /// The placeholder written where `managedFields` goes, unguessable by clients.
    marker: String,
}

impl Interner {
    /// An empty interner whose placeholder includes `nonce`.
    pub(crate) fn new(nonce: u64) -> Self {
        Self {
            set: HashSet::new(),
            swept: 0,
            marker: format!("\u{1}devcluster-managed-fields-{nonce:016x}\u{1}"),
        }
    }

    fn intern(&mut self, bytes: Vec<u8>) -> Arc<[u8]> {
        if let Some(found) = self.set.get(bytes.as_slice()) {
            return found.clone();
        }
        if self.set.len() > 2 * self.swept + 1024 {
            self.set.retain(|e| Arc::strong_count(e) > 1);
            self.swept = self.set.len();
        }
        let arc: Arc<[u8]> = Arc::from(bytes);
        self.set.insert(arc.clone());
        arc
    }
}

/// Errors turning an object into stored bytes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Serialisation failed (cannot happen for values parsed from JSON).
    #[error("cannot serialise object")]
    Serialize(#[source] serde_json::Error),
    /// Stored bytes did not parse back.
    #[error("stored object does not parse")]
    Parse(#[source] serde_json::Error),
}

/// Results of object encoding.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Serialises an object with its `apiVersion` and `kind` first; returns the bytes and
/// how many of them after the `{` those two members take, with their comma.
fn encode(v: &Value) -> Result<(Vec<u8>, usize)> {
    let Some(obj) = v.as_object() else {
        return Ok((serde_json::to_vec(v).map_err(Error::Serialize)?, 0));
    };
    const TYPE_META: [&str; 2] = ["apiVersion", "kind"];
    let mut out = vec![b'{'];
    let member = |out: &mut Vec<u8>, k: &str, val: &Value| -> Result<()> {
        if out.len() > 1 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, k).map_err(Error::Serialize)?;
        out.push(b':');
        serde_json::to_writer(&mut *out, val).map_err(Error::Serialize)
    };
    for k in TYPE_META {
        if let Some(val) = obj.get(k) {
            member(&mut out, k, val)?;
        }
    }
    let head = out.len();
    for (k, val) in obj.iter().filter(|(k, _)| !TYPE_META.contains(&k.as_str())) {
        member(&mut out, k, val)?;
    }
    out.push(b'}');
    // The comma between the type and the rest goes with the type.
    let type_meta = match out.get(head) {
        Some(b',') => head,
        _ if head > 1 => head - 1,
        _ => 0,
    };
    Ok((out, type_meta))
}

impl Stored {
    /// Serialises a value once and keeps its summary.
    pub(crate) fn from_value(v: &Value) -> Result<Arc<Self>> {
        let (bytes, type_meta) = encode(v)?;
        Ok(Arc::new(Self {
            json: Bytes::copy_from_slice(&bytes),
            type_meta,
            managed: None,
            meta: Meta::from_value(v),
            partial: OnceLock::new(),
        }))
    }

    /// Like [`from_value`](Self::from_value), sharing `managedFields` through `interner`.
    pub(crate) fn interned(mut v: Value, interner: &mut Interner) -> Result<Arc<Self>> {
        let meta = Meta::from_value(&v);
        let mf = v
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .and_then(|m| {
                let mf = m.remove("managedFields")?;
                m.insert(
                    "managedFields".into(),
                    Value::String(interner.marker.clone()),
                );
                Some(mf)
            });
        let (bytes, type_meta) = encode(&v)?;
        let Some(mf) = mf else {
            return Ok(Arc::new(Self {
                json: Bytes::copy_from_slice(&bytes),
                type_meta,
                managed: None,
                meta,
                partial: OnceLock::new(),
            }));
        };
        let quoted = serde_json::to_vec(&Value::String(interner.marker.clone()))
            .map_err(Error::Serialize)?;
        let at = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'"')
            .map(|(i, _)| i)
            .find(|&i| bytes[i..].starts_with(&quoted));
        let Some(at) = at else {
            // Cannot happen: the marker was just written. Fall back to one piece.
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("managedFields".into(), mf);
            }
            return Self::from_value(&v);
        };
        let mf_bytes = serde_json::to_vec(&mf).map_err(Error::Serialize)?;
        let mut json = Vec::with_capacity(bytes.len() - quoted.len());
        json.extend_from_slice(&bytes[..at]);
        json.extend_from_slice(&bytes[at + quoted.len()..]);
        Ok(Arc::new(Self {
            json: Bytes::from(json),
            type_meta,
            managed: Some((interner.intern(mf_bytes), at)),
            meta,
            partial: OnceLock::new(),
        }))
    }

    /// The size of the JSON.
    pub(crate) fn len(&self) -> usize {
        self.json.len() + self.managed.as_ref().map_or(0, |(m, _)| m.len())
    }

    /// Appends the JSON to `buf`.
    pub(crate) fn write_to(&self, buf: &mut BytesMut) {
        match &self.managed {
            None => buf.extend_from_slice(&self.json),
            Some((m, at)) => {
                let (head, tail) = self.json.split_at(*at);
                buf.extend_from_slice(head);
                buf.extend_from_slice(m);
                buf.extend_from_slice(tail);
            }
        }
    }

    /// Appends the JSON without `apiVersion` and `kind`, as kube-apiserver writes the
    /// items of a list of a built-in kind (its typed lists leave each item's TypeMeta
    /// empty).
    pub(crate) fn write_untyped_to(&self, buf: &mut BytesMut) {
        if self.type_meta == 0 {
            return self.write_to(buf);
        }
        let rest = 1 + self.type_meta;
        buf.extend_from_slice(b"{");
        match &self.managed {
            None => buf.extend_from_slice(&self.json[rest..]),
            Some((m, at)) => {
                buf.extend_from_slice(&self.json[rest..*at]);
                buf.extend_from_slice(m);
                buf.extend_from_slice(&self.json[*at..]);
            }
        }
    }

    /// The JSON in one piece (shared, not copied, when it is stored in one piece).
    pub(crate) fn bytes(&self) -> Bytes {
        if self.managed.is_none() {
            return self.json.clone();
        }
        let mut buf = BytesMut::with_capacity(self.len());
        self.write_to(&mut buf);
        buf.freeze()
    }

    /// Whether the stored JSON (`managedFields` aside) holds `needle`: a
    /// scan that spares a parse when the answer is no.
    pub(crate) fn mentions(&self, needle: &[u8]) -> bool {
        self.json
            .windows(needle.len())
            .any(|window| window == needle)
    }

    /// Parses the bytes back into a value to change it.
    pub(crate) fn value(&self) -> Result<Value> {
        serde_json::from_slice(&self.bytes()).map_err(Error::Parse)
    }

    /// The object as `PartialObjectMetadata` (kind, apiVersion and metadata only).
    pub(crate) fn partial_metadata(&self) -> Bytes {
        self.partial
            .get_or_init(|| {
                let v = self.value().unwrap_or(Value::Null);
                let out = serde_json::json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": v["metadata"],
                });
                Bytes::copy_from_slice(out.to_string().as_bytes())
            })
            .clone()
    }
}

/// Sets `path` in `v`, turning whatever is in the way into objects (client data may hold
/// a string where an object belongs; indexing would panic on it).
pub(crate) fn set_at(v: &mut Value, path: &[&str], value: Value) {
    let Some((last, init)) = path.split_last() else {
        *v = value;
        return;
    };
    let mut cur = v;
    for key in init {
        if !cur.is_object() {
            *cur = json!({});
        }
        cur = match cur {
            Value::Object(m) => m.entry(*key).or_insert_with(|| json!({})),
            _ => unreachable!("made an object above"),
        };
    }
    if !cur.is_object() {
        *cur = json!({});
    }
    if let Value::Object(m) = cur {
        m.insert((*last).to_owned(), value);
    }
}

/// The metadata map of an object, created when missing (callers have checked `v` is an object).
pub(crate) fn md(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    let obj = match v {
        Value::Object(o) => o,
        _ => unreachable!("made an object above"),
    };
    let entry = obj.entry("metadata").or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_at_replaces_non_objects_on_the_way() {
        let mut v = json!({"status": "odd"});
        set_at(&mut v, &["status", "phase"], json!("Terminating"));
        assert_eq!(v, json!({"status": {"phase": "Terminating"}}));
    }
    use serde_json::json;

    #[test]
    fn summary_reads_labels_owners_and_deletion() {
        let v = json!({
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "42",
                "labels": {"x": "1"},
                "ownerReferences": [{"uid": "o", "blockOwnerDeletion": true}],
                "finalizers": ["f"],
                "deletionTimestamp": "2024-01-01T00:00:00Z"
            },
            "status": {"phase": "Running"}
        });
        let m = Meta::from_value(&v);
        assert_eq!(m.rv, 42);
        assert_eq!(m.labels, vec![("x".to_owned(), "1".to_owned())]);
        assert_eq!(
            m.owners,
            vec![OwnerRef {
                uid: "o".into(),
                block: true
            }]
        );
        assert!(m.deleting);
        assert_eq!(m.field("status.phase"), Some("Running"));
    }

    #[test]
    fn managed_fields_are_shared_and_the_json_reads_back_whole() {
        let mut interner = Interner::new(7);
        let obj = |name: &str| {
            json!({"kind": "Pod", "metadata": {"name": name, "annotations": {"a": "b"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]}, "spec": {"x": 1}})
        };
        let a = Stored::interned(obj("a"), &mut interner).unwrap();
        let b = Stored::interned(obj("b"), &mut interner).unwrap();
        assert_eq!(a.value().unwrap(), obj("a"));
        assert_eq!(
            serde_json::from_slice::<Value>(&b.bytes()).unwrap(),
            obj("b")
        );
        let (ma, mb) = (
            &a.managed.as_ref().unwrap().0,
            &b.managed.as_ref().unwrap().0,
        );
        assert!(Arc::ptr_eq(ma, mb));
        assert_eq!(a.len(), a.bytes().len());
        let plain = Stored::interned(json!({"metadata": {"name": "c"}}), &mut interner).unwrap();
        assert!(plain.managed.is_none());
    }

    #[test]
    fn untyped_json_leaves_out_api_version_and_kind() {
        let mut interner = Interner::new(7);
        let mut untyped = |v: Value| {
            let s = Stored::interned(v, &mut interner).unwrap();
            let mut buf = BytesMut::new();
            s.write_untyped_to(&mut buf);
            serde_json::from_slice::<Value>(&buf).unwrap()
        };
        assert_eq!(
            untyped(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"kind": "x"},
                "metadata": {"name": "a", "managedFields": [{"manager": "m"}]}})
            ),
            json!({"data": {"kind": "x"}, "metadata": {"name": "a", "managedFields": [{"manager": "m"}]}})
        );
        assert_eq!(
            untyped(json!({"kind": "Event", "involvedObject": {"kind": "Pod"}})),
            json!({"involvedObject": {"kind": "Pod"}})
        );
        assert_eq!(untyped(json!({"apiVersion": "v1", "kind": "X"})), json!({}));
        assert_eq!(untyped(json!({"metadata": {}})), json!({"metadata": {}}));
    }

    #[test]
    fn partial_metadata_keeps_only_metadata() {
        let s = Stored::from_value(&json!({"kind": "Pod", "metadata": {"name": "a"}, "spec": {}}))
            .unwrap();
        let p: Value = serde_json::from_slice(&s.partial_metadata()).unwrap();
        assert_eq!(
            p,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a"}})
        );
    }
}
