//! Write semantics on top of the store: what create, update, patch and delete do to an
//! object's metadata, as kube-apiserver's generic registry does it.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::apply;
use crate::clock;
use crate::object::{ObjectKey, Stored};
use crate::rand::Rng;
use crate::resource::{self, GroupResource, Registry, ResourceType};
use crate::status::{ApiError, Cause, Result};
use crate::store::{GcWork, Txn};

/// The `orphan` finalizer: dependents lose their ownerReference before the owner goes.
pub(crate) const ORPHAN: &str = "orphan";
/// The `foregroundDeletion` finalizer: dependents go before the owner.
pub(crate) const FOREGROUND: &str = "foregroundDeletion";
/// The namespace controller's `spec.finalizers` entry.
pub(crate) const NAMESPACE_FINALIZER: &str = "kubernetes";

/// Which part of the object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The main resource.
    Main,
    /// The `status` subresource.
    Status,
}

/// The deletion propagation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    /// Dependents keep living, without the ownerReference.
    Orphan,
    /// The owner goes now, the garbage collector deletes dependents after.
    Background,
    /// Dependents go first, then the owner.
    Foreground,
}

/// `DeleteOptions` as far as they matter here.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    /// `propagationPolicy` (or the deprecated `orphanDependents`).
    pub(crate) propagation: Option<Propagation>,
    /// `preconditions.uid`.
    pub(crate) uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub(crate) resource_version: Option<String>,
    /// `dryRun=All`.
    pub(crate) dry_run: bool,
    /// The deprecated `orphanDependents: false` was sent, which alone makes a delete
    /// that leaves the object in place a 202 Accepted.
    pub(crate) cascade_requested: bool,
    /// `gracePeriodSeconds`: for Pods bound to a node, how long the kubelet has to stop
    /// them (default: the Pod's `terminationGracePeriodSeconds`); 0 deletes at once.
    pub(crate) grace_period: Option<i64>,
}

/// What a delete did.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// The object is gone; this was its last state.
    Now(Arc<Stored>),
    /// The object is being deleted and waits for finalizers.
    Pending(Arc<Stored>),
}

/// Shared context of writes.
pub(crate) struct Writer<'a> {
    /// The registry, to serve CRDs as they are written.
    pub(crate) registry: &'a Registry,
    /// For uids and generated names.
    pub(crate) rng: &'a Rng,
    /// `fieldValidation=Strict`: unknown fields of custom resources are a 400, not pruned.
    pub(crate) strict: bool,
    /// The field manager the write is recorded under in `metadata.managedFields`
    /// (operation `Update`); `None` for server-side apply, whose result carries its
    /// own managed fields.
    pub(crate) manager: Option<&'a str>,
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
fn md(v: &mut Value) -> &mut Map<String, Value> {
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

fn str_at<'v>(v: &'v Value, path: &[&str]) -> Option<&'v str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

fn field_invalid(
    rt: &ResourceType,
    name: &str,
    field: &str,
    reason: &'static str,
    message: String,
) -> ApiError {
    ApiError::invalid(
        &rt.kind,
        &rt.gr.group,
        name,
        vec![Cause {
            reason,
            message,
            field: field.to_owned(),
        }],
    )
}

/// A DNS-1123 subdomain, as most names must be.
fn valid_name(name: &str) -> bool {
    policyhost_names::dns1123_subdomain(name).is_ok()
}

fn check_type(rt: &ResourceType, version: &str, v: &mut Value) -> Result<()> {
    let want_av = rt.api_version(version);
    let Some(obj) = v.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(av) if av != want_av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        _ => {}
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some(k) if k != rt.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        _ => {}
    }
    obj.insert("apiVersion".into(), Value::String(want_av));
    obj.insert("kind".into(), Value::String(rt.kind.clone()));
    canonical_bytes(rt, obj);
    if !rt.custom {
        rt.merge_schema(version).omit_empty(v);
    }
    Ok(())
}

/// kube-apiserver decodes `[]byte` fields from base64 (Go's decoder skips
/// line breaks) and stores the bytes, so they read back without the line
/// breaks kustomize and YAML tools wrap them in; clients such as
/// k8s-openapi reject those.
fn canonical_bytes(rt: &ResourceType, obj: &mut Map<String, Value>) {
    let field = match (rt.gr.group.as_str(), rt.gr.resource.as_str()) {
        ("", "configmaps") => "binaryData",
        ("", "secrets") => "data",
        _ => return,
    };
    let Some(values) = obj.get_mut(field).and_then(Value::as_object_mut) else {
        return;
    };
    for value in values.values_mut() {
        if let Value::String(text) = value
            && text.contains(['\n', '\r'])
        {
            text.retain(|c| c != '\n' && c != '\r');
        }
    }
}

fn finalizers(v: &Value) -> Vec<String> {
    v["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn set_finalizers(v: &mut Value, f: &[String]) {
    let m = md(v);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

/// Whether the parts of two objects whose change bumps `generation` (everything but
/// metadata, and status when it is a subresource) are equal; compared in place, without
/// copying the objects.
fn same_generation_view(rt: &ResourceType, a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let skip = |k: &str| k == "metadata" || (k == "status" && rt.has_status());
    let count = |m: &Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    count(a) == count(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Marks an object as deleting `at`, with `grace` seconds left; `first`, when its
/// deletion starts, raises the generation of an object that keeps one, as a spec
/// change does (controllers must notice it as they notice a spec change).
fn mark_deleting(v: &mut Value, at: String, grace: i64, first: bool) {
    let m = md(v);
    m.insert("deletionTimestamp".into(), Value::String(at));
    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
    if first
        && let Some(g) = m
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
    {
        m.insert("generation".into(), json!(g + 1));
    }
}

/// What an update computes.
enum Over {
    /// Nothing changed: store nothing, send no event.
    Unchanged,
    /// The new state to store.
    Write(Value),
}

/// A PUT body checked against the URL.
pub(crate) fn put_body(
    rt: &ResourceType,
    version: &str,
    ns: &str,
    name: &str,
    mut body: Value,
) -> Result<Value> {
    check_type(rt, version, &mut body)?;
    match str_at(&body, &["metadata", "name"]) {
        Some(n) if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {}
    }
    if rt.namespaced {
        match str_at(&body, &["metadata", "namespace"]) {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
    }
    Ok(body)
}

/// The patched body: `f` applied to the current object in the requested version.
pub(crate) fn patched_body(
    rt: &ResourceType,
    version: &str,
    name: &str,
    old: &Stored,
    f: impl FnOnce(Value) -> Result<Value>,
) -> Result<Value> {
    let mut current = old.value().map_err(internal)?;
    if rt.custom {
        // Served versions share storage; the patch applies to the requested version.
        current["apiVersion"] = Value::String(rt.api_version(version));
    }
    let mut patched = f(current)?;
    if !patched.is_object() {
        return Err(ApiError::bad_request(
            "the patched object is not a JSON object",
        ));
    }
    check_type(rt, version, &mut patched)?;
    // As kube-apiserver checks a patched object: a name the patch removed is the URL's.
    match str_at(&patched, &["metadata", "name"]) {
        None | Some("") => {
            md(&mut patched).insert("name".into(), Value::String(name.to_owned()));
            Ok(patched)
        }
        Some(n) if n == name => Ok(patched),
        Some(n) => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
    }
}

/// What kube-apiserver's admission plugins change on a new object: after its managed
/// fields are recorded, so the fields they set belong to no manager.
fn admit_create(rt: &ResourceType, body: &mut Value) {
    if let ("", "pods") = (rt.gr.group.as_str(), rt.gr.resource.as_str()) {
        crate::defaults::pod_admission(body);
    }
}

impl Writer<'_> {
    /// Creates an object in namespace `ns` ("" for cluster-scoped types).
    pub(crate) fn create(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        body: Value,
        dry_run: bool,
    ) -> Result<Arc<Stored>> {
        let body = self.prepare_new(rt, version, ns, body)?;
        self.insert_new(txn, rt, ns, body, dry_run)
    }

    /// The part of a create that needs no store access (validation, defaults, ownership),
    /// so the HTTP layer can run it before taking the store lock.
    pub(crate) fn prepare_new(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        mut body: Value,
    ) -> Result<Value> {
        check_type(rt, version, &mut body)?;
        let m = md(&mut body);
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if name.is_empty()
            && let Some(prefix) = m.get("generateName").and_then(Value::as_str)
        {
            name = format!("{prefix}{}", self.rng.name_suffix());
            m.insert("name".into(), Value::String(name.clone()));
        }
        if name.is_empty() {
            return Err(field_invalid(
                rt,
                "",
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required".into(),
            ));
        }
        if !valid_name(&name) {
            return Err(field_invalid(
                rt,
                &name,
                "metadata.name",
                "FieldValueInvalid",
                format!(
                    "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                ),
            ));
        }
        if rt.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
            m.insert("namespace".into(), Value::String(ns.to_owned()));
        } else {
            m.remove("namespace");
        }
        let uid = self.rng.uuid();
        m.insert("uid".into(), Value::String(uid));
        let now = clock::now_rfc3339();
        m.insert("creationTimestamp".into(), Value::String(now.clone()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("resourceVersion");
        m.remove("selfLink");
        if rt.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        self.prepare_create(rt, &mut body)?;
        if let Some(schema) = rt.version(version).and_then(|v| v.schema.as_ref()) {
            let dropped = crate::schema::apply(&mut body, schema);
            self.check_unknown(rt, version, &dropped)?;
        }
        if let Some(manager) = self.manager {
            let request = apply::Request {
                manager,
                api_version: &rt.api_version(version),
                subresource: None,
                time: &now,
            };
            apply::record_update(None, &mut body, &request, &rt.merge_schema(version));
        }
        admit_create(rt, &mut body);
        Ok(body)
    }

    /// The part of a create that reads and writes the store: the namespace must exist and
    /// not be terminating, and the name must be free.
    pub(crate) fn insert_new(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        ns: &str,
        body: Value,
        dry_run: bool,
    ) -> Result<Arc<Stored>> {
        let gr = &rt.gr;
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if rt.namespaced {
            let ns_gr = GroupResource::new("", "namespaces");
            match txn.get(&ns_gr, &ObjectKey::new("", ns)) {
                None => return Err(ApiError::not_found(&ns_gr, ns)),
                Some(n) if n.meta.deleting => {
                    return Err(ApiError::namespace_terminating(gr, &name, ns));
                }
                Some(_) => {}
            }
        }
        let key = ObjectKey::new(if rt.namespaced { ns } else { "" }, &name);
        if txn.get(gr, &key).is_some() {
            return Err(ApiError::already_exists(gr, &name));
        }
        if dry_run {
            return Stored::from_value(&body).map_err(internal);
        }
        let stored = txn.put(gr, body).map_err(internal)?;
        self.after_write(txn, rt, &stored)?;
        Ok(stored)
    }

    /// Type-specific defaults on create, which the writer's managed fields record.
    fn prepare_create(&self, rt: &ResourceType, body: &mut Value) -> Result<()> {
        match (rt.gr.group.as_str(), rt.gr.resource.as_str()) {
            ("", "pods") => {
                crate::defaults::pod(body);
                body["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            }
            ("", "services") => crate::defaults::service(body, self.rng),
            ("", "namespaces") => {
                body["spec"] = json!({"finalizers": [NAMESPACE_FINALIZER]});
                body["status"] = json!({"phase": "Active"});
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let labels = md(body).entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
                }
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                resource::from_crd(body).map_err(|e| {
                    let name = body["metadata"]["name"].as_str().unwrap_or_default();
                    field_invalid(rt, name, "", "FieldValueInvalid", e.to_string())
                })?;
                if let Some(o) = body.as_object_mut() {
                    o.remove("status");
                }
            }
            _ => {
                if rt.has_status()
                    && let Some(o) = body.as_object_mut()
                {
                    o.remove("status");
                }
            }
        }
        Ok(())
    }

    /// Hooks after a stored write: CRDs are served and get an Established status.
    fn after_write(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        stored: &Arc<Stored>,
    ) -> Result<()> {
        if !stored.meta.owners.is_empty() {
            txn.queue_gc(GcWork::Object(rt.gr.clone(), stored.meta.key()));
        }
        if rt.gr.group == "apiextensions.k8s.io" && rt.gr.resource == "customresourcedefinitions" {
            let v = stored.value().map_err(internal)?;
            if let Ok(t) = resource::from_crd(&v) {
                self.registry.register(t);
            }
            let mut next = v.clone();
            let storage: Vec<Value> = v["spec"]["versions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|x| x["storage"].as_bool() == Some(true))
                        .map(|x| x["name"].clone())
                        .collect()
                })
                .unwrap_or_default();
            let now = clock::now_rfc3339();
            let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
            next["status"] = json!({
                "acceptedNames": v["spec"]["names"],
                "conditions": [
                    cond("NamesAccepted", "NoConflicts", "no conflicts found"),
                    cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                ],
                "storedVersions": storage,
            });
            if let Some(old_status) = v.get("status") {
                // Keep transition times stable when nothing changed.
                if old_status["acceptedNames"] == next["status"]["acceptedNames"]
                    && old_status["storedVersions"] == next["status"]["storedVersions"]
                {
                    return Ok(());
                }
            }
            txn.put(&rt.gr, next).map_err(internal)?;
        }
        Ok(())
    }

    /// Under `fieldValidation=Strict`, unknown fields are an error, as kube-apiserver reports it.
    fn check_unknown(&self, rt: &ResourceType, version: &str, dropped: &[String]) -> Result<()> {
        if !self.strict || dropped.is_empty() {
            return Ok(());
        }
        let fields = dropped
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {fields}",
            kind = rt.kind
        )))
    }

    /// Patches an object: `f` turns the current object into the patched one, which is then
    /// written as an update would be.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        name: &str,
        part: Part,
        dry_run: bool,
        f: impl FnOnce(Value) -> Result<Value>,
    ) -> Result<Arc<Stored>> {
        let key = ObjectKey::new(if rt.namespaced { ns } else { "" }, name);
        let old = txn
            .get(&rt.gr, &key)
            .ok_or_else(|| ApiError::not_found(&rt.gr, name))?;
        let patched = patched_body(rt, version, name, &old, f)?;
        self.write_over(txn, rt, &old, patched, part, dry_run)
    }

    /// The shared part of update and patch: merge immutable fields, check preconditions,
    /// bump generation, and store (or finish a deletion).
    fn write_over(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        old: &Arc<Stored>,
        new: Value,
        part: Part,
        dry_run: bool,
    ) -> Result<Arc<Stored>> {
        match self.compute_over(rt, old, new, part)? {
            Over::Unchanged => Ok(old.clone()),
            Over::Write(result) => self.commit_over(txn, rt, old, result, dry_run),
        }
    }

    /// What an update of `old` to `new` stores; needs no store access.
    fn compute_over(
        &self,
        rt: &ResourceType,
        old: &Arc<Stored>,
        mut new: Value,
        part: Part,
    ) -> Result<Over> {
        let gr = &rt.gr;
        let name = old.meta.name.clone();
        if let Some(rv) = str_at(&new, &["metadata", "resourceVersion"]).filter(|s| !s.is_empty())
            && rv.parse::<u64>().ok() != Some(old.meta.rv)
        {
            return Err(ApiError::stale(gr, &name));
        }
        if let Some(uid) = str_at(&new, &["metadata", "uid"]).filter(|s| !s.is_empty())
            && uid != old.meta.uid
        {
            return Err(ApiError::conflict(
                gr,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old.meta.uid
                ),
            ));
        }
        let old_v = old.value().map_err(internal)?;
        // An apply's result carries the managed fields it computed, even none at all.
        let applied_fields = match self.manager {
            None => Some(new["metadata"].get("managedFields").cloned()),
            Some(_) => None,
        };
        let mut result = match part {
            Part::Status => {
                let mut r = old_v.clone();
                match new.get("status") {
                    Some(s) => r["status"] = s.clone(),
                    None => {
                        if let Some(o) = r.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                if let Some(mf) = new["metadata"].get("managedFields") {
                    md(&mut r).insert("managedFields".into(), mf.clone());
                }
                r
            }
            Part::Main => {
                if rt.has_status() {
                    match old_v.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(o) = new.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                let om = &old_v["metadata"];
                let m = md(&mut new);
                for k in [
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                ] {
                    match om.get(k) {
                        Some(v) => m.insert(k.into(), v.clone()),
                        None => m.remove(k),
                    };
                }
                if !m.contains_key("managedFields")
                    && let Some(mf) = om.get("managedFields")
                {
                    m.insert("managedFields".into(), mf.clone());
                }
                if gr.group.is_empty() && gr.resource == "namespaces" {
                    // spec.finalizers only change through the finalize subresource.
                    new["spec"] = old_v["spec"].clone();
                }
                new
            }
        };
        md(&mut result).insert(
            "resourceVersion".into(),
            Value::String(old.meta.rv.to_string()),
        );
        let version = result["apiVersion"]
            .as_str()
            .map(|av| av.rsplit('/').next().unwrap_or(av).to_owned())
            .unwrap_or_default();
        if let Some(schema) = rt.version(&version).and_then(|v| v.schema.as_ref()) {
            let dropped = crate::schema::apply(&mut result, schema);
            self.check_unknown(rt, &version, &dropped)?;
        }
        match (self.manager, applied_fields) {
            (Some(manager), _) => {
                let request = apply::Request {
                    manager,
                    api_version: &rt.api_version(&version),
                    subresource: (part == Part::Status).then_some("status"),
                    time: &clock::now_rfc3339(),
                };
                let schema = rt.merge_schema(&version);
                apply::record_update(Some(&old_v), &mut result, &request, &schema);
            }
            (None, Some(Some(fields))) => {
                md(&mut result).insert("managedFields".into(), fields);
            }
            (None, _) => {
                md(&mut result).remove("managedFields");
            }
        }
        // Finalizers cannot be added once deletion started.
        let old_f = finalizers(&old_v);
        let new_f = finalizers(&result);
        if old.meta.deleting {
            let added: Vec<&String> = new_f.iter().filter(|f| !old_f.contains(f)).collect();
            if !added.is_empty() {
                let list = added
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(field_invalid(
                    rt,
                    &name,
                    "metadata.finalizers",
                    "FieldValueForbidden",
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                    ),
                ));
            }
        }
        if gr.group.is_empty()
            && gr.resource == "pods"
            && part == Part::Main
            && crate::pod_update::changes_immutable_spec(&old_v, &result)
        {
            return Err(field_invalid(
                rt,
                &name,
                "spec",
                "FieldValueForbidden",
                crate::pod_update::FORBIDDEN.to_owned(),
            ));
        }
        if rt.generation && !same_generation_view(rt, &old_v, &result) {
            let g = old_v["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            md(&mut result).insert("generation".into(), json!(g));
        }
        if gr.group == "apiextensions.k8s.io"
            && gr.resource == "customresourcedefinitions"
            && part == Part::Main
        {
            resource::from_crd(&result)
                .map_err(|e| field_invalid(rt, &name, "", "FieldValueInvalid", e.to_string()))?;
        }
        // `result` carries the old resourceVersion, so equal means nothing changed; a
        // no-op write stores nothing and sends no event, as the real server does.
        if result == old_v {
            return Ok(Over::Unchanged);
        }
        Ok(Over::Write(result))
    }

    /// Stores the result of [`compute_over`](Self::compute_over) over `old`.
    fn commit_over(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        old: &Arc<Stored>,
        result: Value,
        dry_run: bool,
    ) -> Result<Arc<Stored>> {
        let gr = &rt.gr;
        if dry_run {
            return Stored::from_value(&result).map_err(internal);
        }
        let new_f = finalizers(&result);
        let key = old.meta.key();
        // A deleting object goes once its finalizers are gone, unless it is a Pod whose
        // graceful termination the kubelet still has to finish.
        let in_grace = result["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0)
            > 0;
        if old.meta.deleting && new_f.is_empty() && !in_grace {
            // kube-apiserver removes the object as it was stored before this update: the
            // DELETED event carries that state, finalizers and all. The update is
            // answered with its own result, at the delete's resourceVersion.
            let gone = txn.remove(gr, &key, old.value().map_err(internal)?);
            let gone = gone.map_err(internal)?;
            self.after_remove(txn, rt, &gone);
            let mut answer = result;
            md(&mut answer).insert(
                "resourceVersion".into(),
                Value::String(gone.meta.rv.to_string()),
            );
            return Stored::from_value(&answer).map_err(internal);
        }
        let stored = txn.put(gr, result).map_err(internal)?;
        if stored.meta.deleting || old.meta.owners != stored.meta.owners {
            txn.queue_gc(GcWork::Object(gr.clone(), key));
        }
        self.after_write(txn, rt, &stored)?;
        Ok(stored)
    }

    /// Updates or patches an object without holding the store lock while the new state
    /// is computed: `f` builds the new body from the current object; if the object changed
    /// meanwhile, it is rebuilt from the newer state (kube-apiserver's GuaranteedUpdate).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update_unlocked(
        &self,
        store: &crate::store::Store,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        part: Part,
        dry_run: bool,
        f: impl Fn(&Arc<Stored>) -> Result<Value>,
    ) -> Result<Arc<Stored>> {
        let key = ObjectKey::new(if rt.namespaced { ns } else { "" }, name);
        loop {
            let old = store
                .lock()
                .get(&rt.gr, &key)
                .ok_or_else(|| ApiError::not_found(&rt.gr, name))?;
            let over = self.compute_over(rt, &old, f(&old)?, part)?;
            let mut txn = store.lock();
            match txn.get(&rt.gr, &key) {
                Some(cur) if Arc::ptr_eq(&cur, &old) => {}
                Some(_) => continue,
                None => return Err(ApiError::not_found(&rt.gr, name)),
            }
            return match over {
                Over::Unchanged => Ok(old),
                Over::Write(result) => self.commit_over(&mut txn, rt, &old, result, dry_run),
            };
        }
    }

    /// Bookkeeping after an object is gone: its dependents and its namespace are re-checked,
    /// and a CRD's objects go with it.
    pub(crate) fn after_remove(&self, txn: &mut Txn<'_>, rt: &ResourceType, gone: &Arc<Stored>) {
        txn.queue_gc(GcWork::Owner(gone.meta.uid.clone()));
        for o in &gone.meta.owners {
            if let Some((g, k)) = txn.by_uid(&o.uid) {
                txn.queue_gc(GcWork::Object(g, k));
            }
        }
        if rt.namespaced {
            txn.queue_gc(GcWork::Object(
                GroupResource::new("", "namespaces"),
                ObjectKey::new("", &gone.meta.namespace),
            ));
        }
        if rt.gr.group == "apiextensions.k8s.io"
            && rt.gr.resource == "customresourcedefinitions"
            && let Ok(v) = gone.value()
            && let Ok(t) = resource::from_crd(&v)
        {
            let keys: Vec<ObjectKey> = txn
                .list(&crate::store::ListQuery {
                    gr: &t.gr,
                    namespace: None,
                    at: None,
                    after: None,
                    limit: 0,
                    filter: &|_| true,
                    count_remaining: false,
                    label_hint: None,
                })
                .map(|p| p.items.iter().map(|o| o.meta.key()).collect())
                .unwrap_or_default();
            for k in keys {
                if let Some(o) = txn.get(&t.gr, &k)
                    && let Ok(last) = o.value()
                {
                    let _ = txn.remove(&t.gr, &k, last);
                }
            }
            txn.drop_table(&t.gr);
            self.registry.unregister(&t.gr);
        }
    }

    /// Deletes an object, honouring preconditions, finalizers and the propagation policy.
    pub(crate) fn delete(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted> {
        let gr = &rt.gr;
        let key = ObjectKey::new(if rt.namespaced { ns } else { "" }, name);
        let old = txn
            .get(gr, &key)
            .ok_or_else(|| ApiError::not_found(gr, name))?;
        // Delete preconditions fail as kube-apiserver's BeforeDelete words them, naming
        // the kind rather than the resource.
        let by_kind = GroupResource::new(&gr.group, &rt.kind);
        if let Some(uid) = &opts.uid
            && *uid != old.meta.uid
        {
            return Err(ApiError::conflict(
                &by_kind,
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    old.meta.uid
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && rv.parse::<u64>().ok() != Some(old.meta.rv)
        {
            return Err(ApiError::conflict(
                &by_kind,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    old.meta.rv
                ),
            ));
        }
        let mut v = old.value().map_err(internal)?;
        let is_namespace = gr.group.is_empty() && gr.resource == "namespaces";
        let mut f = finalizers(&v);
        let policy = opts
            .propagation
            .unwrap_or(if f.iter().any(|x| x == ORPHAN) {
                Propagation::Orphan
            } else {
                Propagation::Background
            });
        match policy {
            Propagation::Orphan => {
                if !f.iter().any(|x| x == ORPHAN) {
                    f.push(ORPHAN.to_owned());
                }
                f.retain(|x| x != FOREGROUND);
            }
            Propagation::Foreground => {
                if !f.iter().any(|x| x == FOREGROUND) {
                    f.push(FOREGROUND.to_owned());
                }
                f.retain(|x| x != ORPHAN);
            }
            Propagation::Background => {
                f.retain(|x| x != ORPHAN && x != FOREGROUND);
            }
        }
        // Pods on a node terminate gracefully: the kubelet stops them, then deletes them
        // with a zero grace period.
        let is_pod = gr.group.is_empty() && gr.resource == "pods";
        let bound = is_pod && v["spec"]["nodeName"].is_string();
        let grace = if bound {
            opts.grace_period
                .or_else(|| v["spec"]["terminationGracePeriodSeconds"].as_i64())
                .unwrap_or(30)
                .max(0)
        } else {
            0
        };
        let current_grace = v["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        if bound && grace > 0 && (!old.meta.deleting || grace < current_grace) {
            if opts.dry_run {
                return Ok(Deleted::Pending(old));
            }
            set_finalizers(&mut v, &f);
            let at = clock::format_rfc3339(clock::now_unix() + grace);
            mark_deleting(&mut v, at, grace, !old.meta.deleting);
            let stored = txn.put(gr, v).map_err(internal)?;
            txn.queue_gc(GcWork::Object(gr.clone(), key));
            return Ok(Deleted::Pending(stored));
        }
        if bound && old.meta.deleting && grace == 0 {
            md(&mut v).insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        let ns_pending = is_namespace;
        if f.is_empty() && !ns_pending {
            // Pods are deleted gracefully even with no grace left: kube-apiserver stores
            // the Pod as deleting (a MODIFIED event), then removes it, so its last state
            // says it was deleted.
            if is_pod && !old.meta.deleting {
                mark_deleting(&mut v, clock::now_rfc3339(), 0, true);
            }
            let marked = is_pod && v != old.value().map_err(internal)?;
            if opts.dry_run {
                if marked {
                    return Ok(Deleted::Now(Stored::from_value(&v).map_err(internal)?));
                }
                return Ok(Deleted::Now(old));
            }
            if marked {
                txn.put(gr, v.clone()).map_err(internal)?;
            }
            let gone = txn.remove(gr, &key, v).map_err(internal)?;
            self.after_remove(txn, rt, &gone);
            return Ok(Deleted::Now(gone));
        }
        if old.meta.deleting && finalizers(&v) == f {
            if v["metadata"]["deletionGracePeriodSeconds"] != json!(current_grace) {
                // A force delete of a terminating Pod that still has finalizers.
                let stored = txn.put(gr, v).map_err(internal)?;
                return Ok(Deleted::Pending(stored));
            }
            return Ok(Deleted::Pending(old));
        }
        set_finalizers(&mut v, &f);
        if !old.meta.deleting {
            mark_deleting(&mut v, clock::now_rfc3339(), 0, true);
            if is_namespace {
                set_at(&mut v, &["status", "phase"], json!("Terminating"));
            }
        }
        if opts.dry_run {
            return Ok(Deleted::Pending(Stored::from_value(&v).map_err(internal)?));
        }
        let stored = txn.put(gr, v).map_err(internal)?;
        txn.queue_gc(GcWork::Object(gr.clone(), key));
        Ok(Deleted::Pending(stored))
    }

    /// Replaces `metadata.finalizers` (or a namespace's `spec.finalizers`) as controllers do.
    pub(crate) fn set_finalizers(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        key: &ObjectKey,
        f: impl FnOnce(&mut Vec<String>),
    ) -> Result<()> {
        let Some(old) = txn.get(&rt.gr, key) else {
            return Ok(());
        };
        let mut v = old.value().map_err(internal)?;
        let mut list = finalizers(&v);
        f(&mut list);
        set_finalizers(&mut v, &list);
        self.write_over(txn, rt, &old, v, Part::Main, false)
            .map(|_| ())
    }
}

/// Wraps an internal failure as a 500.
pub(crate) fn internal(e: impl std::error::Error) -> ApiError {
    ApiError::internal(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_ignores_metadata_and_a_status_subresource() {
        let reg = crate::resource::Registry::new();
        let deploy = reg.lookup("apps", "v1", "deployments").unwrap();
        let a = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1}, "status": {"x": 1}});
        let b = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"replicas": 1}, "status": {"x": 2}});
        assert!(same_generation_view(&deploy, &a, &b));
        let c = json!({"metadata": {}, "spec": {"replicas": 2}});
        assert!(!same_generation_view(&deploy, &a, &c));
    }

    #[test]
    fn set_at_replaces_non_objects_on_the_way() {
        let mut v = json!({"status": "odd"});
        set_at(&mut v, &["status", "phase"], json!("Terminating"));
        assert_eq!(v, json!({"status": {"phase": "Terminating"}}));
    }

    #[test]
    fn binary_data_is_stored_without_the_line_breaks_it_was_wrapped_in() {
        let reg = crate::resource::Registry::new();
        let configmaps = reg.lookup("", "v1", "configmaps").unwrap();
        let mut map = json!({"binaryData": {"a": "AGFz\nbQ0A\r\nAQ==\n"}, "data": {"b": "x\ny"}});
        check_type(&configmaps, "v1", &mut map).unwrap();
        assert_eq!(map["binaryData"]["a"], "AGFzbQ0AAQ==");
        assert_eq!(map["data"]["b"], "x\ny", "text data is text");
        let secrets = reg.lookup("", "v1", "secrets").unwrap();
        let mut secret = json!({"data": {"k": "c2Vj\ncmV0"}});
        check_type(&secrets, "v1", &mut secret).unwrap();
        assert_eq!(secret["data"]["k"], "c2VjcmV0");
    }

    #[test]
    fn names_must_be_dns_subdomains() {
        assert!(valid_name("web-1.example"));
        assert!(!valid_name("Web"));
        assert!(!valid_name("-a"));
        assert!(!valid_name(""));
    }
}
