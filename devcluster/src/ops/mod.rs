//! Write semantics on top of the store: what create, update, patch and delete do to an
//! object's metadata, as kube-apiserver's generic registry does it. What a kind adds is
//! its [`Strategy`](crate::resource::Strategy)'s.

mod create;
mod delete;
mod update;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::apply;
use crate::object::{ObjectKey, Stored, md};
use crate::rand::Rng;
use crate::resource::{Registry, ResourceType};
use crate::status::{ApiError, Result};
use crate::store::{GcWork, Txn};

pub(crate) use delete::{DeleteOptions, Deleted, FOREGROUND, ORPHAN, Propagation};
pub(crate) use update::{patched_body, put_body};

/// Which part of the object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The main resource.
    Main,
    /// The `status` subresource.
    Status,
}

/// The object a write addresses, as the request names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// Its type.
    pub(crate) rt: &'a ResourceType,
    /// The version the body is in.
    pub(crate) version: &'a str,
    /// The namespace, "" for cluster-scoped types.
    pub(crate) namespace: &'a str,
    /// The name on the URL. A POST has none: its body (or `generateName`) names the object.
    pub(crate) name: &'a str,
    /// The main resource or a subresource.
    pub(crate) part: Part,
    /// `dryRun=All`: everything is checked, nothing stored.
    pub(crate) dry_run: bool,
}

impl<'a> Target<'a> {
    /// The main resource of `namespace/name`, in the type's preferred version, written
    /// for real: what the cluster's own controllers write.
    pub(crate) fn of(rt: &'a ResourceType, namespace: &'a str, name: &'a str) -> Self {
        Self {
            rt,
            version: rt.versions.first().map_or("", |v| v.name.as_str()),
            namespace,
            name,
            part: Part::Main,
            dry_run: false,
        }
    }

    /// The same object, with the body in `version`.
    pub(crate) fn in_version(self, version: &'a str) -> Self {
        Self { version, ..self }
    }

    /// The same object, through `part`.
    pub(crate) fn through(self, part: Part) -> Self {
        Self { part, ..self }
    }

    /// The same object, written only if `dry_run` is false.
    pub(crate) fn with_dry_run(self, dry_run: bool) -> Self {
        Self { dry_run, ..self }
    }

    /// The store key of the object.
    fn key(&self) -> ObjectKey {
        let namespace = if self.rt.namespaced {
            self.namespace
        } else {
            ""
        };
        ObjectKey::new(namespace, self.name)
    }
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

fn str_at<'v>(v: &'v Value, path: &[&str]) -> Option<&'v str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

/// Checks a body's `apiVersion` and `kind` against its type, sets them, and stores it in
/// the form its type keeps.
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
    rt.strategy.canonicalize(obj);
    if !rt.custom {
        rt.merge_schema(version).omit_empty(v);
    }
    Ok(())
}

/// A body's name must be the URL's, as kube-apiserver checks it.
fn check_url_name(body_name: &str, url_name: &str) -> Result<()> {
    if body_name == url_name {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
    )))
}

/// A namespaced body's namespace must be empty or the URL's.
fn check_namespace(rt: &ResourceType, body: &Value, ns: &str) -> Result<()> {
    match str_at(body, &["metadata", "namespace"]) {
        Some(n) if rt.namespaced && !n.is_empty() && n != ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => Ok(()),
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

fn write_finalizers(v: &mut Value, f: &[String]) {
    let m = md(v);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

impl Writer<'_> {
    /// Prunes fields a custom resource's schema does not know; under
    /// `fieldValidation=Strict` they are an error, as kube-apiserver reports it.
    fn prune(&self, rt: &ResourceType, version: &str, body: &mut Value) -> Result<()> {
        let Some(schema) = rt.version(version).and_then(|v| v.schema.as_ref()) else {
            return Ok(());
        };
        let dropped = crate::schema::structural::apply(body, schema);
        if !self.strict || dropped.is_empty() {
            return Ok(());
        }
        let fields = dropped
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Err(ApiError::undecodable(
            &rt.kind,
            version,
            format!("strict decoding error: {fields}"),
        ))
    }

    /// Records the write in `metadata.managedFields` under the writer's manager.
    fn record_fields(
        &self,
        manager: &str,
        target: &Target<'_>,
        version: &str,
        old: Option<&Value>,
        new: &mut Value,
        time: &str,
    ) {
        let rt = target.rt;
        let request = apply::Request {
            manager,
            api_version: &rt.api_version(version),
            subresource: (target.part == Part::Status).then_some("status"),
            time,
        };
        apply::record_update(old, new, &request, &rt.merge_schema(version));
    }

    /// Follows a stored write: the garbage collector checks an object with owners, and
    /// the kind's strategy has its part.
    fn after_write(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        stored: &Arc<Stored>,
    ) -> Result<()> {
        if !stored.meta.owners.is_empty() {
            txn.queue_gc(GcWork::Object(rt.gr.clone(), stored.meta.key()));
        }
        rt.strategy.after_write(txn, self.registry, rt, stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_data_is_stored_without_the_line_breaks_it_was_wrapped_in() {
        let reg = crate::kinds::registry();
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
    fn a_body_names_the_object_on_the_url_and_its_namespace() {
        assert!(check_url_name("a", "a").is_ok());
        let e = check_url_name("b", "a").unwrap_err();
        assert!(
            e.to_string()
                .contains("(b) does not match the name on the URL (a)"),
            "{e}"
        );
        let reg = crate::kinds::registry();
        let pods = reg.lookup("", "v1", "pods").unwrap();
        let nodes = reg.lookup("", "v1", "nodes").unwrap();
        let body = json!({"metadata": {"namespace": "other"}});
        assert!(check_namespace(&pods, &body, "default").is_err());
        assert!(check_namespace(&pods, &body, "other").is_ok());
        assert!(check_namespace(&nodes, &body, "").is_ok(), "cluster-scoped");
    }
}
