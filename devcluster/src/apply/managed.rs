//! `metadata.managedFields`: which manager owns which fields, read and
//! written in the format of kube-apiserver.
//!
//! ```json
//! {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
//!  "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
//!  "fieldsV1": {"f:data": {"f:key": {}}}}
//! ```
//!
//! Entries are one manager each, identified by name, operation and
//! subresource, and for `Update` entries also the API version: an applier
//! keeps one entry whatever version it applies at.

use serde_json::{Map, Value, json};

use super::fieldset::{self, FieldSet, extend_fields_v1, subtract_fields_v1};

/// Why `metadata.managedFields` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `managedFields` is not a list of objects.
    #[error("metadata.managedFields must be a list of objects")]
    NotAList,
    /// An entry breaks a rule of the format.
    #[error("managed fields entry {index}: {reason}")]
    Entry {
        /// The position of the entry.
        index: usize,
        /// The rule broken.
        reason: &'static str,
    },
    /// An entry's `fieldsV1` is malformed.
    #[error("managed fields entry {index} has invalid fieldsV1")]
    Fields {
        /// The position of the entry.
        index: usize,
        /// What is wrong with it.
        #[source]
        source: fieldset::Error,
    },
}

/// The result of reading managed fields.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a manager last wrote its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Create, update, or a patch that is not an apply.
    Update,
}

impl Operation {
    /// The name used in `managedFields`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// What makes two entries the same manager.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The field manager name.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The subresource written (`status`), or empty.
    pub subresource: String,
    /// The API version written at, for `Update` entries; empty for `Apply`.
    pub api_version: String,
}

impl Identity {
    /// The identity of a writer.
    #[must_use]
    pub fn new(manager: &str, operation: Operation, subresource: &str, api_version: &str) -> Self {
        let api_version = match operation {
            Operation::Apply => String::new(),
            Operation::Update => api_version.to_owned(),
        };
        Self {
            manager: manager.to_owned(),
            operation,
            subresource: subresource.to_owned(),
            api_version,
        }
    }

    /// The manager as conflict messages name it: `"name"`, then
    /// `with subresource "status"`, then `using v1` for `Update` entries.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

/// One manager and the fields it owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Who.
    pub identity: Identity,
    /// The API version of the write.
    pub api_version: String,
    /// When the manager last changed the object (RFC 3339).
    pub time: Option<String>,
    /// What it owns.
    pub fields: FieldSet,
}

/// All the managers of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagedFields {
    entries: Vec<Entry>,
}

impl ManagedFields {
    /// Reads `metadata.managedFields` of `object`; none is an empty set of
    /// managers.
    ///
    /// # Errors
    ///
    /// [`Error`] for entries kube-apiserver would not decode either (the
    /// server then starts over from no managers).
    pub fn read(object: &Value) -> Result<Self> {
        match object.pointer("/metadata/managedFields") {
            None | Some(Value::Null) => Ok(Self::default()),
            Some(Value::Array(items)) => {
                let mut out = Self::default();
                for (index, item) in items.iter().enumerate() {
                    out.put(read_entry(index, item)?);
                }
                Ok(out)
            }
            Some(_) => Err(Error::NotAList),
        }
    }

    /// The entry of one manager in `object`'s managed fields, decoding that
    /// entry only; `None` if it has none or it cannot be read.
    pub(crate) fn entry_of(object: &Value, identity: &Identity) -> Option<Entry> {
        let items = object.pointer("/metadata/managedFields")?.as_array()?;
        items.iter().enumerate().find_map(|(index, item)| {
            (read_identity(index, item).ok()? == *identity)
                .then(|| read_entry(index, item).ok())
                .flatten()
        })
    }

    /// Whether `object` carries exactly `managedFields: [{}]`, the documented
    /// way to clear them.
    pub(crate) fn is_reset(object: &Value) -> bool {
        match object.pointer("/metadata/managedFields") {
            Some(Value::Array(items)) => {
                matches!(items.as_slice(), [Value::Object(entry)] if entry.is_empty())
            }
            _ => false,
        }
    }

    /// Whether `object` carries a non-empty `managedFields` list.
    pub(crate) fn present(object: &Value) -> bool {
        object
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|items| !items.is_empty())
    }

    /// The entries, in no particular order.
    #[must_use]
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry of a manager.
    #[must_use]
    pub fn get(&self, identity: &Identity) -> Option<&Entry> {
        self.entries.iter().find(|e| e.identity == *identity)
    }

    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.entries.iter_mut()
    }

    /// Adds an entry, replacing the one of the same manager.
    pub(crate) fn put(&mut self, entry: Entry) {
        match self
            .entries
            .iter_mut()
            .find(|e| e.identity == entry.identity)
        {
            Some(slot) => *slot = entry,
            None => self.entries.push(entry),
        }
    }

    /// Drops the managers that own nothing.
    pub(crate) fn drop_empty(&mut self) {
        self.entries.retain(|e| !e.fields.is_empty());
    }

    /// Writes the entries to `metadata.managedFields` of `object`, sorted as
    /// kube-apiserver sorts them (Apply before Update, then by time, manager,
    /// version and subresource), or removes the field when there are none.
    pub fn write(&self, object: &mut Value) {
        let Value::Object(root) = object else { return };
        if self.entries.is_empty() {
            if let Some(Value::Object(metadata)) = root.get_mut("metadata") {
                metadata.remove("managedFields");
            }
            return;
        }
        let mut list: Vec<Value> = self.entries.iter().map(write_entry).collect();
        sort_raw(&mut list);
        let metadata = root
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(metadata) = metadata {
            metadata.insert("managedFields".to_owned(), Value::Array(list));
        }
    }
}

/// Sorts raw entries as kube-apiserver does: Apply before Update, then by
/// time, manager, API version and subresource.
pub(crate) fn sort_raw(entries: &mut [Value]) {
    entries.sort_by_cached_key(|entry| {
        let text = |name: &str| {
            entry
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        (
            text("operation"),
            text("time"),
            text("manager"),
            text("apiVersion"),
            text("subresource"),
        )
    });
}

/// The ownership changes of one non-apply write.
pub(crate) struct Update<'a> {
    /// The writer.
    pub(crate) me: &'a Identity,
    /// The API version written at.
    pub(crate) api_version: &'a str,
    /// The time of the write.
    pub(crate) time: &'a str,
    /// The fields the write set, which become the writer's.
    pub(crate) changed: FieldSet,
    /// The fields the write removed, which leave every manager.
    pub(crate) removed: &'a FieldSet,
}

/// `entries` (raw `managedFields`) without those that own nothing, as
/// kube-apiserver stores them; `None` when none is left.
pub(crate) fn without_empty(entries: Value) -> Option<Value> {
    let Value::Array(entries) = entries else {
        return Some(entries);
    };
    let kept: Vec<Value> = entries.into_iter().filter(owns_something).collect();
    (!kept.is_empty()).then_some(Value::Array(kept))
}

fn owns_something(entry: &Value) -> bool {
    entry
        .get("fieldsV1")
        .and_then(Value::as_object)
        .is_some_and(|fields| !fields.is_empty())
}

/// Applies `update` to raw `managedFields` entries, decoding and re-encoding
/// only the entries it touches (the writer's, and those owning a field it
/// changed or removed): most writes touch one or two of them. Entries that
/// cannot be read are dropped.
pub(crate) fn update_raw(raw: Vec<Value>, update: Update<'_>) -> Vec<Value> {
    let Update {
        me,
        api_version,
        time,
        changed,
        removed,
    } = update;
    let mut out = Vec::with_capacity(raw.len() + 1);
    let mut mine = false;
    for (index, mut item) in raw.into_iter().enumerate() {
        let Ok(identity) = read_identity(index, &item) else {
            continue;
        };
        let is_me = identity == *me;
        let Some(Value::Object(fields)) = item.get_mut("fieldsV1") else {
            // An entry without fields owns nothing.
            continue;
        };
        if !is_me && !touches(&changed, fields) && !touches(removed, fields) {
            out.push(item);
            continue;
        }
        // Edited in place: the writer's entry and the entries losing fields change
        // only along the changed paths, so nothing is decoded.
        subtract_fields_v1(fields, removed);
        if is_me {
            extend_fields_v1(fields, &changed);
            mine = true;
        } else {
            subtract_fields_v1(fields, &changed);
        }
        if fields.is_empty() {
            continue;
        }
        if is_me && !changed.is_empty() {
            item["time"] = Value::String(time.to_owned());
            item["apiVersion"] = Value::String(api_version.to_owned());
        }
        out.push(item);
    }
    if !mine && !changed.is_empty() {
        out.push(write_entry(&Entry {
            identity: me.clone(),
            api_version: api_version.to_owned(),
            time: Some(time.to_owned()),
            fields: changed,
        }));
    }
    sort_raw(&mut out);
    out
}

/// Whether taking `set` away from the `fieldsV1` document `fields` would
/// change it. Keys are compared in their canonical form, the one
/// kube-apiserver and devcluster write.
fn touches(set: &FieldSet, fields: &Map<String, Value>) -> bool {
    let members = set.members().any(|member| {
        matches!(fields.get(&member.to_key()),
            Some(Value::Object(node)) if node.is_empty() || node.contains_key("."))
    });
    members
        || set.children().any(|(element, below)| {
            matches!(fields.get(&element.to_key()),
                Some(Value::Object(node)) if touches(below, node))
        })
}

/// Reads who an entry is, without its fields.
fn read_identity(index: usize, item: &Value) -> Result<Identity> {
    let bad = |reason| Error::Entry { index, reason };
    let Value::Object(map) = item else {
        return Err(Error::NotAList);
    };
    let text = |name: &str| map.get(name).and_then(Value::as_str).unwrap_or_default();
    let operation = match text("operation") {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        _ => return Err(bad("operation must be `Apply` or `Update`")),
    };
    let api_version = text("apiVersion");
    if api_version.is_empty() {
        return Err(bad("apiVersion must not be empty"));
    }
    match text("fieldsType") {
        "FieldsV1" => {}
        "" => return Err(bad("missing fieldsType")),
        _ => return Err(bad("invalid fieldsType")),
    }
    Ok(Identity::new(
        text("manager"),
        operation,
        text("subresource"),
        api_version,
    ))
}

fn read_entry(index: usize, item: &Value) -> Result<Entry> {
    let identity = read_identity(index, item)?;
    let text = |name: &str| item.get(name).and_then(Value::as_str);
    let fields = match item.get("fieldsV1") {
        None | Some(Value::Null) => FieldSet::new(),
        Some(doc) => {
            FieldSet::from_fields_v1(doc).map_err(|source| Error::Fields { index, source })?
        }
    };
    Ok(Entry {
        api_version: text("apiVersion").unwrap_or_default().to_owned(),
        time: text("time").map(str::to_owned),
        identity,
        fields,
    })
}

fn write_entry(entry: &Entry) -> Value {
    let mut out = json!({
        "manager": entry.identity.manager,
        "operation": entry.identity.operation.as_str(),
        "apiVersion": entry.api_version,
    });
    if let Some(time) = &entry.time {
        out["time"] = Value::String(time.clone());
    }
    out["fieldsType"] = Value::String("FieldsV1".to_owned());
    out["fieldsV1"] = entry.fields.to_fields_v1();
    if !entry.identity.subresource.is_empty() {
        out["subresource"] = Value::String(entry.identity.subresource.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(entries: Value) -> Value {
        json!({"metadata": {"name": "x", "managedFields": entries}})
    }

    #[test]
    fn entries_round_trip_and_are_written_in_kube_apiserver_order() {
        let update = json!({"manager": "kube-controller-manager", "operation": "Update",
            "apiVersion": "apps/v1", "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:replicas": {}}}, "subresource": "status"});
        let apply = json!({"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
            "time": "2024-05-01T11:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:replicas": {}}}});
        let mut obj = object(json!([update.clone(), apply.clone()]));
        let managed = ManagedFields::read(&obj).expect("valid");
        assert_eq!(managed.entries().len(), 2);
        managed.write(&mut obj);
        assert_eq!(obj["metadata"]["managedFields"], json!([apply, update]));
    }

    #[test]
    fn apply_entries_are_one_manager_across_versions_and_update_entries_are_not() {
        let apply_v1 = Identity::new("m", Operation::Apply, "", "v1");
        let apply_v2 = Identity::new("m", Operation::Apply, "", "v2");
        assert_eq!(apply_v1, apply_v2);
        let update_v1 = Identity::new("m", Operation::Update, "", "v1");
        let update_v2 = Identity::new("m", Operation::Update, "", "v2");
        assert_ne!(update_v1, update_v2);
        assert_ne!(apply_v1, update_v1);
    }

    #[test]
    fn managers_are_described_as_in_kube_apiserver_conflicts() {
        let update = Identity::new("kubectl-edit", Operation::Update, "", "v1");
        assert_eq!(update.describe(), "\"kubectl-edit\" using v1");
        let status = Identity::new("ctrl", Operation::Update, "status", "apps/v1");
        assert_eq!(
            status.describe(),
            "\"ctrl\" with subresource \"status\" using apps/v1"
        );
        let apply = Identity::new("policyhost", Operation::Apply, "", "v1");
        assert_eq!(apply.describe(), "\"policyhost\"");
    }

    #[test]
    fn invalid_entries_are_errors_that_say_why() {
        let err = |entries: Value| {
            ManagedFields::read(&object(entries))
                .expect_err("invalid")
                .to_string()
        };
        assert_eq!(
            err(json!([{}])),
            "managed fields entry 0: operation must be `Apply` or `Update`"
        );
        assert_eq!(
            err(json!([{"operation": "Apply", "fieldsType": "FieldsV1"}])),
            "managed fields entry 0: apiVersion must not be empty"
        );
        assert_eq!(
            err(json!([{"operation": "Apply", "apiVersion": "v1"}])),
            "managed fields entry 0: missing fieldsType"
        );
        assert_eq!(
            err(
                json!([{"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
                        "fieldsV1": {"x": {}}}])
            ),
            "managed fields entry 0 has invalid fieldsV1"
        );
        assert_eq!(
            err(json!(5)),
            "metadata.managedFields must be a list of objects"
        );
        assert!(ManagedFields::is_reset(&object(json!([{}]))));
        assert!(!ManagedFields::is_reset(&object(json!([]))));
    }

    #[test]
    fn writing_no_entries_removes_the_field() {
        let mut obj = object(json!([]));
        ManagedFields::default().write(&mut obj);
        assert_eq!(obj, json!({"metadata": {"name": "x"}}));
    }
}
