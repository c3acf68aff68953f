//! Server-side apply, and the field ownership every write records.
//!
//! Kubernetes tracks, per object, which *field manager* last set which field,
//! in `metadata.managedFields`
//! (<https://kubernetes.io/docs/reference/using-api/server-side-apply/>).
//! Two kinds of writes change it:
//!
//! - **Apply** (`PATCH` with `application/apply-patch+yaml`), through
//!   [`apply`]: the body is the manager's whole intent. It creates the object
//!   if there is none; it sets the fields it names; the fields the same
//!   manager applied before and omits now are removed unless another manager
//!   owns them too; fields of other managers are kept. Changing a field
//!   another manager owns is a conflict (409) unless `force=true`, which
//!   moves the field to the applier. Two managers applying the same value
//!   share the field.
//! - **Update** (create, `PUT`, and the other patch types), through
//!   [`record_update`]: the fields the write changed become the writer's
//!   (operation `Update`) and are taken from every other manager.
//!
//! Both are pure functions over JSON values: the caller reads the live
//! object, calls them, and stores the result (running its own admission,
//! validation and resourceVersion checks around them).
//!
//! ```
//! use devcluster::apply::{self, Request};
//! use devcluster::kinds;
//! use serde_json::json;
//!
//! let schema = kinds::schema("", "v1", "ConfigMap").expect("built in");
//! let request = Request {
//!     manager: "policyhost",
//!     api_version: "v1",
//!     subresource: None,
//!     time: "2024-05-01T10:00:00Z",
//! };
//! let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                     "metadata": {"name": "c"}, "data": {"a": "1"}});
//! let created = apply::apply(None, &config, &request, false, schema)?;
//! assert_eq!(created["metadata"]["managedFields"][0]["fieldsV1"],
//!            json!({"f:data": {"f:a": {}}}));
//! # Ok::<(), apply::Error>(())
//! ```
//!
//! # Caveats
//!
//! - One API version per kind: no conversion between versions.
//! - The oldest `Update` managers are never folded into an
//!   `ancient-changes` entry, as kube-apiserver does past ten of them.
//! - Built-in kinds are described only where their lists or maps depart
//!   from the defaults (see [`crate::schema`]); elsewhere a field is a struct
//!   field, which matches kube-apiserver except for maps of objects.

mod compare;
mod conflict;
mod fieldset;
mod managed;
mod merge;
mod typed;

use std::sync::LazyLock;

use serde_json::{Map, Value};

pub use conflict::{Cause, Conflict, Conflicts};
pub use fieldset::{Error as FieldsV1Error, FieldSet, Path, PathElement};
pub use managed::{Entry, Error as ManagedFieldsError, Identity, ManagedFields, Operation};
pub use typed::{FieldError, FieldErrors};

use crate::schema::Schema;

/// The manager that owns the fields of an object that had no managed fields
/// when it was first applied to.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Why an apply failed. Each variant maps to the status a server answers
/// with ([`Error::code`], [`Error::reason`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The apply would change fields other managers own, and was not forced.
    /// 409 Conflict, with one cause per field ([`Error::causes`]).
    #[error("{0}")]
    Conflicts(Conflicts),
    /// The body is neither JSON nor YAML. 400 Bad Request.
    /// The cause names the line and column (boxed: it is over 100 bytes).
    #[error("the apply body is not valid JSON or YAML")]
    Body(#[source] Box<serde_saphyr::Error>),
    /// The body is not an object. 400 Bad Request.
    #[error("the apply body must be an object")]
    NotAnObject,
    /// The body has no `kind`. 400 Bad Request.
    #[error("Object 'Kind' is missing in the apply body")]
    MissingKind,
    /// The body's `apiVersion` is not the version of the endpoint.
    /// 400 Bad Request.
    #[error(
        "Incorrect version specified in apply patch. Specified patch version: {specified}, \
         expected: {expected}"
    )]
    Version {
        /// The `apiVersion` of the body.
        specified: String,
        /// The group/version of the endpoint.
        expected: String,
    },
    /// The body sets `metadata.managedFields`. 400 Bad Request.
    #[error("metadata.managedFields must be nil")]
    ManagedFields,
    /// The body does not fit the kind's schema: a value of the wrong type,
    /// a list with duplicate keys or items without keys. 500 with no
    /// reason: kube-apiserver's error carries no status of its own.
    #[error("failed to create typed patch object ({object}): {errors}")]
    Invalid {
        /// `namespace/name; group/version, Kind=kind` of the object.
        object: String,
        /// What is wrong, where.
        errors: FieldErrors,
    },
    /// No field manager was given: it is required for apply.
    /// 422 Unprocessable Entity.
    #[error("fieldManager: Required value: is required for apply patch")]
    MissingManager,
    /// The field manager is longer than 128 bytes or holds unprintable
    /// characters. 422 Unprocessable Entity.
    #[error("fieldManager: Invalid value: {0:?}: {reason}", reason = manager_problem(.0))]
    InvalidManager(String),
}

/// The longest field manager name kube-apiserver accepts.
pub const MAX_MANAGER_LEN: usize = 128;

fn manager_problem(manager: &str) -> &'static str {
    if manager.len() > MAX_MANAGER_LEN {
        "may not be more than 128 bytes"
    } else {
        "must only contain printable characters"
    }
}

/// Checks a `fieldManager` query parameter as kube-apiserver does: at most
/// 128 bytes, printable characters only. Empty is valid here (it is only
/// required for apply, which [`apply`] checks).
///
/// # Errors
///
/// [`Error::InvalidManager`], a 422.
pub fn validate_manager(manager: &str) -> Result<()> {
    if manager.len() > MAX_MANAGER_LEN || manager.chars().any(char::is_control) {
        return Err(Error::InvalidManager(manager.to_owned()));
    }
    Ok(())
}

/// The field manager of a non-apply write without a `fieldManager`
/// parameter: the User-Agent up to its first `/`, without unprintable
/// characters, cut to 128 bytes (`kubectl/v1.33.0 (linux/amd64)` gives
/// `kubectl`); `unknown` when that leaves nothing (no User-Agent, or one
/// starting with `/`), as kube-apiserver records it.
#[must_use]
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let prefix = user_agent.split('/').next().unwrap_or_default();
    let mut out = String::new();
    for c in prefix.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_MANAGER_LEN {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        out.push_str("unknown");
    }
    out
}

/// The result of an apply.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The HTTP status code of the response.
    #[must_use]
    pub fn code(&self) -> u16 {
        match self {
            Error::Conflicts(_) => 409,
            Error::MissingManager | Error::InvalidManager(_) => 422,
            Error::Invalid { .. } => 500,
            _ => 400,
        }
    }

    /// The `Status.reason` of the response ("" for none).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self.code() {
            409 => "Conflict",
            422 => "Invalid",
            500 => "",
            _ => "BadRequest",
        }
    }

    /// The `Status.details.causes` of the response: the conflicting fields.
    #[must_use]
    pub fn causes(&self) -> Vec<Cause> {
        match self {
            Error::Conflicts(conflicts) => conflicts.causes(),
            _ => Vec::new(),
        }
    }

    /// The `Status.message` of the response: the error and its causes.
    #[must_use]
    pub fn status_message(&self) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        message
    }
}

/// Who writes, and how: what ownership is recorded under.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The field manager: the `fieldManager` query parameter, or for
    /// non-apply writes without one, the User-Agent up to its first `/`.
    pub manager: &'a str,
    /// The group/version of the endpoint written to (`v1`, `apps/v1`).
    pub api_version: &'a str,
    /// The subresource written to (`Some("status")`), if any.
    pub subresource: Option<&'a str>,
    /// The time of the write, RFC 3339 (`2024-05-01T10:00:00Z`).
    pub time: &'a str,
}

impl Request<'_> {
    fn on_status(&self) -> bool {
        self.subresource == Some("status")
    }

    /// The part of a field set this write may own: never the metadata the
    /// server sets; only `status` on the status subresource; never `status`
    /// on the main resource when the status subresource exists.
    fn ownable(&self, mut set: FieldSet, schema: &Schema) -> FieldSet {
        set.subtract(&SERVER_FIELDS);
        let status = PathElement::field("status");
        if self.on_status() {
            set.restrict_to(&status)
        } else {
            if schema.has_status_subresource() {
                set.remove_subtree(&status);
            }
            set
        }
    }
}

/// The fields no manager owns: identity and bookkeeping set by the server.
static SERVER_FIELDS: LazyLock<FieldSet> = LazyLock::new(|| {
    let mut set = FieldSet::new();
    let f = PathElement::field;
    set.insert(&[f("apiVersion")]);
    set.insert(&[f("kind")]);
    set.insert(&[f("metadata")]);
    for name in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.insert(&[f("metadata"), f(name)]);
    }
    set
});

/// Reads an apply body: JSON, or YAML (one document).
///
/// # Errors
///
/// [`Error::Body`] when it is neither.
pub fn parse_body(body: &[u8]) -> Result<Value> {
    if let Ok(value) = serde_json::from_slice(body) {
        return Ok(value);
    }
    serde_saphyr::from_slice_with_options(body, yaml_options())
        .map_err(|error| Error::Body(Box::new(error)))
}

/// How a YAML body is read. Scalars as YAML 1.2 reads them (`yes`, `on`
/// and `017` are strings, `<<` an ordinary key), a repeated key's last
/// value wins, `.inf` becomes `null`: where serde-saphyr's defaults read
/// YAML 1.1 scalars and refuse the rest. The error is one line, without the
/// snippet of the body: it becomes a Status message. The caps stay at
/// serde-saphyr's defaults (64 levels of nesting, 250,000 nodes, 64 MiB of
/// scalars): they bound what one body costs. Deeper nesting (JSON's 128,
/// say, in a body that failed as JSON) overflowed a debug build's 2 MiB
/// thread stack inside the parser.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
        with_snippet: false,
    }
}

/// Sets or removes `metadata.managedFields` of `object` as a raw value.
fn set_managed_fields(object: &mut Value, managed: Option<Value>) {
    let Value::Object(root) = object else { return };
    match managed {
        Some(managed) => {
            let metadata = root
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(metadata) = metadata {
                metadata.insert("managedFields".to_owned(), managed);
            }
        }
        None => {
            if let Some(Value::Object(metadata)) = root.get_mut("metadata") {
                metadata.remove("managedFields");
            }
        }
    }
}

/// Removes `metadata.managedFields` from `object` and returns it.
fn take_managed_fields(object: &mut Value) -> Option<Value> {
    object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|metadata| metadata.remove("managedFields"))
}

/// Server-side apply of `config` by `request.manager` to `live` (`None` to
/// create), forcing conflicts away when `force`.
///
/// Returns the object to store, with `metadata.managedFields` updated. When
/// the apply changes nothing, that is the live object with the same
/// managed fields (no new timestamp), so the caller can skip the write.
///
/// On the main resource of a kind with a status subresource, `status` in the
/// body is ignored; on the `status` subresource, everything but `status` is.
/// The body's `metadata.resourceVersion`, if any, stays in the result for the
/// caller's precondition check. The caller answers 404 itself for a status
/// apply to a missing object.
///
/// # Errors
///
/// [`Error::Conflicts`] when fields owned by other managers would change and
/// `force` is false; the others for bodies kube-apiserver rejects too.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    request: &Request<'_>,
    force: bool,
    schema: &Schema,
) -> Result<Value> {
    check_body(config, request, schema)?;
    let empty = Value::Object(Map::new());
    let base = live.unwrap_or(&empty);
    let effective = effective_config(config, request, schema);
    let mut merged = merge::merge(&schema.root, base, &effective);
    if request.on_status() {
        merged = with_status_of(base, &merged);
    }
    let me = Identity::new(
        request.manager,
        Operation::Apply,
        request.subresource.unwrap_or_default(),
        request.api_version,
    );
    let applied = request.ownable(typed::field_set(&schema.root, &effective), schema);
    if let Some(live) = live
        && merged == *live
        && ManagedFields::entry_of(live, &me)
            .is_some_and(|e| e.fields == applied && e.api_version == request.api_version)
    {
        // The same manager re-applying what is in place: nothing changes.
        return Ok(merged);
    }

    let mut managers = live
        .and_then(|live| ManagedFields::read(live).ok())
        .unwrap_or_default();
    // An entry that owns nothing is no owner.
    managers.drop_empty();
    if live.is_some() && managers.entries().is_empty() {
        // An object nobody owns yet: what it holds is owned by a placeholder
        // updater, so that the first apply conflicts instead of clobbering.
        // It owns what an update writing the whole object would (maps
        // themselves too, as `.`).
        let (everything, _) =
            compare::compare(&schema.root, &empty, base).into_changed_and_removed();
        let fields = request.ownable(everything, schema);
        managers.put(Entry {
            identity: Identity::new(
                BEFORE_FIRST_APPLY,
                Operation::Update,
                "",
                request.api_version,
            ),
            api_version: request.api_version.to_owned(),
            time: Some(request.time.to_owned()),
            fields,
        });
        managers.drop_empty();
    }

    let previous = managers.get(&me).cloned();
    managers.put(Entry {
        identity: me.clone(),
        api_version: request.api_version.to_owned(),
        time: previous.as_ref().and_then(|p| p.time.clone()),
        fields: applied,
    });
    if let Some(previous) = previous {
        // Fields this manager applied before, omits now, and nobody owns,
        // themselves or anything in them (an entry moved over from an Update,
        // as kubectl does when switching to server-side apply, owns maps as
        // `.` where an Apply entry owns only what is in them).
        let mut stale = previous.fields;
        let mut owned = FieldSet::new();
        for entry in managers.entries() {
            stale.subtract(&entry.fields);
            owned.extend(&entry.fields);
        }
        stale.drop_owned_containers(&owned);
        merge::remove(&schema.root, &mut merged, &stale);
    }

    let (changed, removed) =
        compare::compare(&schema.root, base, &merged).into_changed_and_removed();
    let mut conflicts = Vec::new();
    for entry in managers.entries() {
        if entry.identity != me {
            for path in entry.fields.intersection(&changed).paths() {
                let manager = entry.identity.clone();
                conflicts.push(Conflict { manager, path });
            }
        }
    }
    if !conflicts.is_empty() && !force {
        conflicts.sort_by_cached_key(|c| c.manager.describe());
        return Err(Error::Conflicts(Conflicts(conflicts)));
    }
    for entry in managers.entries_mut() {
        if entry.identity != me {
            entry.fields.subtract(&changed);
            entry.fields.subtract(&removed);
        }
    }
    if !(changed.is_empty() && removed.is_empty()) {
        for entry in managers.entries_mut() {
            if entry.identity == me {
                entry.time = Some(request.time.to_owned());
            }
        }
    }
    managers.drop_empty();
    managers.write(&mut merged);
    Ok(merged)
}

/// Checks an apply body the way kube-apiserver does before merging it.
fn check_body(config: &Value, request: &Request<'_>, schema: &Schema) -> Result<()> {
    if request.manager.is_empty() {
        return Err(Error::MissingManager);
    }
    validate_manager(request.manager)?;
    let Value::Object(body) = config else {
        return Err(Error::NotAnObject);
    };
    let text = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or_default();
    if text("apiVersion") != request.api_version {
        return Err(Error::Version {
            specified: text("apiVersion").to_owned(),
            expected: request.api_version.to_owned(),
        });
    }
    if text("kind").is_empty() {
        return Err(Error::MissingKind);
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(Error::ManagedFields);
    }
    typed::validate(&schema.root, schema.types(), config).map_err(|errors| Error::Invalid {
        object: describe(config),
        errors,
    })
}

/// `namespace/name; group/version, Kind=kind` of an apply's configuration,
/// as kube-apiserver names the object in apply errors.
pub(crate) fn describe(config: &Value) -> String {
    let meta = |name: &str| {
        config
            .pointer(&format!("/metadata/{name}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    format!(
        "{}/{}; {}",
        meta("namespace"),
        meta("name"),
        group_version_kind(config)
    )
}

/// Go's `GroupVersionKind.String()` of a configuration: `/v1, Kind=ConfigMap`,
/// `apps/v1, Kind=Deployment`.
pub(crate) fn group_version_kind(config: &Value) -> String {
    let text = |name: &str| config[name].as_str().unwrap_or_default();
    let api_version = text("apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={}", text("kind"))
}

/// The part of the body this write applies.
fn effective_config(config: &Value, request: &Request<'_>, schema: &Schema) -> Value {
    let mut config = config.clone();
    if let Value::Object(body) = &mut config {
        if request.on_status() {
            body.retain(|key, _| matches!(key.as_str(), "apiVersion" | "kind" | "status"));
        } else if schema.has_status_subresource() {
            body.remove("status");
        }
    }
    config
}

/// `base` with the `status` of `merged`.
fn with_status_of(base: &Value, merged: &Value) -> Value {
    let mut out = base.clone();
    if let Value::Object(out_map) = &mut out {
        match merged.get("status") {
            Some(status) => {
                out_map.insert("status".to_owned(), status.clone());
            }
            None => {
                out_map.remove("status");
            }
        }
    }
    out
}

/// Records the ownership of a write that is not an apply: a create (`old`
/// is `None`), an update, or a JSON, merge or strategic merge patch.
///
/// The fields `new` adds or changes relative to `old` become owned by
/// `request.manager` (operation `Update`) and are taken from every other
/// manager; removed fields leave every manager. `new` gets the resulting
/// `metadata.managedFields`; the manager's timestamp moves only when the
/// write changed something it now owns.
///
/// As on kube-apiserver: managed fields that `new` carries (a client editing
/// them on purpose) are the starting point when they are valid, except on a
/// subresource; `managedFields: [{}]` clears them and records nothing; and an
/// object that has no managed fields stays untracked until an apply.
pub fn record_update(old: Option<&Value>, new: &mut Value, request: &Request<'_>, schema: &Schema) {
    if !new.is_object() {
        return;
    }
    if ManagedFields::is_reset(new) {
        ManagedFields::default().write(new);
        return;
    }
    if let Some(old) = old
        && !ManagedFields::present(old)
        && !ManagedFields::present(new)
    {
        // An object nobody owns stays untracked until it is applied to.
        set_managed_fields(new, None);
        return;
    }
    let empty = Value::Object(Map::new());
    let base = old.unwrap_or(&empty);
    let (changed, removed) = compare::compare(&schema.root, base, new).into_changed_and_removed();
    let changed = request.ownable(changed, schema);
    let old_raw = base.pointer("/metadata/managedFields");
    // Managed fields a client sends are kept when valid (that is how they
    // are edited on purpose), except on a subresource.
    let new_valid = request.subresource.is_none()
        && ManagedFields::present(new)
        && (new.pointer("/metadata/managedFields") == old_raw || ManagedFields::read(new).is_ok());
    if changed.is_empty() && removed.is_empty() {
        let kept = if new_valid {
            take_managed_fields(new)
        } else {
            old_raw.cloned()
        };
        set_managed_fields(new, kept.and_then(managed::without_empty));
        return;
    }
    let start = if new_valid {
        take_managed_fields(new)
    } else {
        old_raw.cloned()
    };
    let raw = match start {
        Some(Value::Array(entries)) => entries,
        _ => Vec::new(),
    };
    let me = Identity::new(
        request.manager,
        Operation::Update,
        request.subresource.unwrap_or_default(),
        request.api_version,
    );
    let update = managed::Update {
        me: &me,
        api_version: request.api_version,
        time: request.time,
        changed,
        removed: &removed,
    };
    let entries = managed::update_raw(raw, update);
    set_managed_fields(new, (!entries.is_empty()).then_some(Value::Array(entries)));
}

#[cfg(test)]
mod tests;
