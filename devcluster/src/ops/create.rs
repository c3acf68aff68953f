//! Create: a new object's name, namespace and system fields, its kind's defaults, and
//! the insert that needs its namespace alive and its name free.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Target, Writer, check_namespace, check_type, check_url_name};
use crate::clock;
use crate::object::GroupResource;
use crate::object::Stored;
use crate::object::md;
use crate::resource::ResourceType;
use crate::status::{ApiError, Result};
use crate::store::Txn;

/// A DNS-1123 subdomain, as most names must be.
fn valid_name(name: &str) -> bool {
    policyhost_names::dns1123_subdomain(name).is_ok()
}

/// The fields the server sets on every new object, whatever the client sent.
fn reset_system_fields(rt: &ResourceType, m: &mut Map<String, Value>, uid: String, now: &str) {
    m.insert("uid".into(), Value::String(uid));
    m.insert("creationTimestamp".into(), Value::String(now.to_owned()));
    for field in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
        "selfLink",
    ] {
        m.remove(field);
    }
    if rt.generation {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
}

impl Writer<'_> {
    /// Creates the object `target` names, from `body`.
    pub(crate) fn create(
        &self,
        txn: &mut Txn<'_>,
        target: &Target<'_>,
        body: Value,
    ) -> Result<Arc<Stored>> {
        let body = self.prepare_new(target, body)?;
        self.insert_new(txn, target, body)
    }

    /// The part of a create that needs no store access (validation, defaults, ownership),
    /// so the HTTP layer can run it before taking the store lock.
    pub(crate) fn prepare_new(&self, target: &Target<'_>, mut body: Value) -> Result<Value> {
        let rt = target.rt;
        check_type(rt, target.version, &mut body)?;
        self.name_new(target, &mut body)?;
        check_namespace(rt, &body, target.namespace)?;
        let m = md(&mut body);
        if rt.namespaced {
            m.insert(
                "namespace".into(),
                Value::String(target.namespace.to_owned()),
            );
        } else {
            m.remove("namespace");
        }
        let now = clock::now_rfc3339();
        reset_system_fields(rt, m, self.rng.uuid(), &now);
        rt.strategy.prepare_for_create(rt, &mut body, self.rng)?;
        self.prune(rt, target.version, &mut body)?;
        if let Some(manager) = self.manager {
            self.record_fields(manager, target, target.version, None, &mut body, &now);
        }
        rt.strategy.admit_create(&mut body);
        Ok(body)
    }

    /// Names a new object: its own name, one generated from `generateName`, and (for a
    /// create through PATCH) the URL's; the name must be a DNS-1123 subdomain.
    fn name_new(&self, target: &Target<'_>, body: &mut Value) -> Result<()> {
        let rt = target.rt;
        let m = md(body);
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
            return Err(rt.field_invalid(
                "",
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required".into(),
            ));
        }
        if !target.name.is_empty() {
            check_url_name(&name, target.name)?;
        }
        if !valid_name(&name) {
            return Err(rt.field_invalid(
                                &name,
                "metadata.name",
                "FieldValueInvalid",
                format!(
                    "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                ),
            ));
        }
        Ok(())
    }

    /// The part of a create that reads and writes the store: the namespace must exist and
    /// not be terminating, and the name must be free.
    pub(crate) fn insert_new(
        &self,
        txn: &mut Txn<'_>,
        target: &Target<'_>,
        body: Value,
    ) -> Result<Arc<Stored>> {
        let rt = target.rt;
        let gr = &rt.gr;
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let name = name.as_str();
        if rt.namespaced {
            let ns_gr = GroupResource::new("", "namespaces");
            let ns = target.namespace;
            match txn.get(&ns_gr, &crate::object::ObjectKey::new("", ns)) {
                None => return Err(ApiError::not_found(&ns_gr, ns)),
                Some(n) if n.meta.deleting => {
                    return Err(ApiError::namespace_terminating(gr, name, ns));
                }
                Some(_) => {}
            }
        }
        let key = Target { name, ..*target }.key();
        if txn.get(gr, &key).is_some() {
            return Err(ApiError::already_exists(gr, name));
        }
        if target.dry_run {
            return Stored::from_value(&body).map_err(crate::status::internal);
        }
        let stored = txn.put(gr, body).map_err(crate::status::internal)?;
        self.after_write(txn, rt, &stored)?;
        Ok(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_dns_subdomains() {
        assert!(valid_name("web-1.example"));
        assert!(!valid_name("Web"));
        assert!(!valid_name("-a"));
        assert!(!valid_name(""));
    }
}
