//! Resource requests: resolve the type, count, inject faults, then get, list, watch,
//! create, update, patch, delete or deletecollection.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::render::{Include, ListMeta, View};
use super::request::{self, Output, Query, RvMatch, Target};
use super::watch;
use super::{App, header, json_response};
use crate::apply;
use crate::counters;
use crate::object::{ObjectKey, Stored};
use crate::ops::{DeleteOptions, Deleted, Part, Propagation, Target as WriteTarget, Writer};
use crate::pagination::Token;
use crate::patch::{self, PatchType};
use crate::resource::ResourceType;
use crate::selector::{FieldSelector, LabelSelector, Selectors};
use crate::sharding::ShardSelector;
use crate::status::{self, ApiError, Result};
use crate::store::{self, ListQuery};

/// The body media types served (protobuf only for Namespaces, ConfigMaps and Secrets).
const BODY_TYPES: &str = "application/json, application/vnd.kubernetes.protobuf";

/// Request bodies larger than this are rejected (kube-apiserver's limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
        }
    }
}

/// The bearer token the client presented, "" when none.
pub(super) fn identity(req: &Request) -> String {
    header(req.headers(), "authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::to_owned)
        .unwrap_or_default()
}

pub(super) async fn handle(app: Arc<App>, req: Request) -> Result<Response> {
    let target = request::parse_path(req.uri().path()).ok_or_else(ApiError::path_not_found)?;
    if target.resource.is_empty() {
        return Err(ApiError::method_not_allowed());
    }
    let Some(rt) = app
        .registry
        .lookup(&target.group, &target.version, &target.resource)
    else {
        // A group the server does not have is the mux's 404; a resource or version it
        // does not serve in a known group is a Status.
        if !target.group.is_empty() && !app.registry.serves_group(&target.group) {
            return Ok(super::page_not_found());
        }
        return Err(ApiError::path_not_found());
    };
    let query = request::parse_query(req.uri().query())?;
    if !rt.namespaced && target.namespace.is_some() {
        return Err(ApiError::path_not_found());
    }
    let part = match target.sub.as_deref() {
        None => Part::Main,
        Some("status") if rt.has_status() => Part::Status,
        Some(_) => return Err(ApiError::path_not_found()),
    };
    let verb = match (req.method(), target.name.is_some()) {
        (&Method::GET, _) if target.legacy_watch || query.watch => Verb::Watch,
        (&Method::GET, true) => Verb::Get,
        (&Method::GET, false) => Verb::List,
        (&Method::POST, false) => Verb::Create,
        (&Method::PUT, true) => Verb::Update,
        (&Method::PATCH, true) => Verb::Patch,
        (&Method::DELETE, true) => Verb::Delete,
        (&Method::DELETE, false) => Verb::DeleteCollection,
        _ => return Err(ApiError::method_not_allowed()),
    };
    if part == Part::Status && !matches!(verb, Verb::Get | Verb::Update | Verb::Patch) {
        return Err(ApiError::method_not_allowed());
    }
    if rt.namespaced
        && target.namespace.is_none()
        && !matches!(verb, Verb::List | Verb::Watch | Verb::DeleteCollection)
    {
        return Err(ApiError::path_not_found());
    }
    let user_agent = header(req.headers(), "user-agent")
        .unwrap_or_default()
        .to_owned();
    let seq = app.counters.record(counters::Request {
        verb: verb.as_str().to_owned(),
        group: target.group.clone(),
        resource: target.resource.clone(),
        subresource: target.sub.clone().unwrap_or_default(),
        namespace: target.namespace.clone().unwrap_or_default(),
        name: target.name.clone().unwrap_or_default(),
        user_agent: user_agent.clone(),
        identity: identity(&req),
        seq: 0,
        unix_micros: 0,
        code: 0,
        dry_run: query.dry_run,
    });
    let result: Result<Response> = async {
        let latency = app.faults.latency();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if let Some(e) = app
            .faults
            .error_for(verb.as_str(), &target.group, &target.resource)
        {
            return Err(e);
        }
        let output = request::negotiate(header(req.headers(), "accept"))?;
        let view = View::new(
            rt.clone(),
            &target.version,
            output,
            Include::parse(query.include_object.as_deref()),
        );
        let content_type = header(req.headers(), "content-type")
            .unwrap_or_default()
            .to_owned();
        let body = if matches!(
            verb,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        ) {
            axum::body::to_bytes(req.into_body(), MAX_BODY)
                .await
                .map_err(|e| ApiError::bad_request(format!("cannot read request body: {e}")))?
        } else {
            Bytes::new()
        };
        // Writes are recorded in managedFields under `fieldManager`, or the User-Agent.
        let manager = query
            .field_manager
            .clone()
            .unwrap_or_else(|| apply::manager_from_user_agent(&user_agent));
        // A resource stored as another one (events.k8s.io Events) is written and read in
        // the storage form and converted at the edges.
        let (store_rt, store_version) = match &rt.stored_as {
            Some(gr) => {
                let srt = app.registry.get(gr).ok_or_else(ApiError::path_not_found)?;
                let v = srt
                    .versions
                    .first()
                    .map(|v| v.name.clone())
                    .unwrap_or_default();
                (srt, v)
            }
            None => (rt.clone(), target.version.clone()),
        };
        let ctx = Ctx {
            app: &app,
            rt: &rt,
            store_rt: &store_rt,
            store_version: &store_version,
            target: &target,
            query: &query,
            view: &view,
            part,
            manager,
            seq,
        };
        match verb {
            Verb::Get => ctx.get(),
            Verb::List => ctx.list(),
            Verb::Watch => ctx.watch(),
            Verb::Create => ctx.create(&body, &content_type),
            Verb::Update => ctx.update(&body, &content_type),
            Verb::Patch => ctx.patch(&body, &content_type),
            Verb::Delete => ctx.delete(&body),
            Verb::DeleteCollection => ctx.delete_collection(&body),
        }
    }
    .await;
    let code = match &result {
        Ok(response) => response.status().as_u16(),
        Err(e) => e.code,
    };
    app.counters.answered(seq, code);
    result
}

struct Ctx<'a> {
    app: &'a Arc<App>,
    rt: &'a Arc<ResourceType>,
    /// Where objects of `rt` are stored (`rt` itself unless it is a converted face).
    store_rt: &'a Arc<ResourceType>,
    /// The storage version of `store_rt`.
    store_version: &'a str,
    target: &'a Target,
    query: &'a Query,
    view: &'a View,
    part: Part,
    manager: String,
    /// This request's place in the request log.
    seq: u64,
}

/// A create's or update's body: JSON, decoded against the kind's Go type as
/// kube-apiserver decodes it (a field of the wrong type is a 400 before
/// anything is stored), or protobuf.
fn parse_body(body: &[u8], content_type: &str, rt: &ResourceType, version: &str) -> Result<Value> {
    let ct = content_type.split(';').next().unwrap_or_default().trim();
    if ct == crate::proto::MEDIA_TYPE {
        return crate::proto::decode(body, &rt.api_version(version), &rt.kind).map_err(
            |e| match e {
                crate::proto::Error::UnsupportedKind(_) => {
                    ApiError::unsupported_media_type(BODY_TYPES)
                }
                other => ApiError::bad_request(other.to_string()),
            },
        );
    }
    if !ct.is_empty() && ct != "application/json" && ct != "*/*" {
        return Err(ApiError::unsupported_media_type(BODY_TYPES));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })?;
    if let Some(go_type) = rt.go_type(version) {
        go_type
            .decode_json(&value)
            .map_err(|e| ApiError::undecodable(&rt.kind, version, e))?;
    }
    Ok(value)
}

impl Ctx<'_> {
    fn ns(&self) -> &str {
        self.target.namespace.as_deref().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or_default()
    }

    /// The stored object this request writes.
    fn write_target(&self) -> WriteTarget<'_> {
        WriteTarget::of(self.store_rt, self.ns(), self.name())
            .in_version(self.store_version)
            .through(self.part)
            .with_dry_run(self.query.dry_run)
    }

    fn writer(&self) -> Writer<'_> {
        Writer {
            registry: &self.app.registry,
            rng: &self.app.rng,
            strict: self.query.field_validation.as_deref() == Some("Strict"),
            manager: Some(&self.manager),
        }
    }

    /// A request body in its storage form.
    fn storage_form(&self, v: Value) -> Value {
        if self.rt.stored_as.is_some() {
            crate::convert::event_to_core(v)
        } else {
            v
        }
    }

    /// A stored object in the requested form.
    fn requested_form(&self, v: Value) -> Value {
        if self.rt.stored_as.is_some() {
            crate::convert::event_from_core(v)
        } else {
            v
        }
    }

    fn respond(&self, code: StatusCode, obj: &Stored) -> Result<Response> {
        Ok(json_response(code, self.view.one(obj)))
    }

    fn selectors(&self) -> Result<Selectors> {
        let allowed = crate::selector::Selectable::of(
            &self.store_rt.gr.group,
            &self.store_rt.gr.resource,
            self.rt.custom,
        );
        let fields = if self.rt.stored_as.is_some() {
            crate::convert::event_field_selector(&self.query.field_selector)
        } else {
            self.query.field_selector.clone()
        };
        Ok(Selectors {
            labels: LabelSelector::parse(&self.query.label_selector)
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
            fields: FieldSelector::parse(&fields, &allowed)
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
            shard: self.shard_selector()?,
        })
    }

    /// The request's shard selector where the `ShardedListAndWatch` gate is
    /// on; a malformed one is kube-apiserver's 500 (its registry returns a
    /// plain error, which carries no status of its own).
    fn shard_selector(&self) -> Result<Option<ShardSelector>> {
        match &self.query.shard_selector {
            Some(text) if self.app.features.sharded_list_and_watch => ShardSelector::parse(text)
                .map(Some)
                .map_err(|e| ApiError::unknown(format!("invalid shard selector: {e}"))),
            _ => Ok(None),
        }
    }

    fn get(&self) -> Result<Response> {
        let key = ObjectKey::new(self.ns(), self.name());
        let obj = self
            .app
            .store
            .lock()
            .get(&self.store_rt.gr, &key)
            .ok_or_else(|| ApiError::not_found(&self.rt.gr, self.name()))?;
        self.respond(StatusCode::OK, &obj)
    }

    fn list(&self) -> Result<Response> {
        let selectors = self.selectors()?;
        let q = self.query;
        let mut txn = self.app.store.lock();
        let current = txn.rv();
        let token = match &q.continue_token {
            Some(t) => Some(Token::decode(t).map_err(|e| ApiError::bad_request(e.to_string()))?),
            None => None,
        };
        let requested = match q.resource_version.as_deref() {
            None | Some("") => None,
            Some(s) => Some(s.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "Invalid value: {s:?}: resourceVersion must be an integer"
                ))
            })?),
        };
        let at = match (&token, requested, q.rv_match) {
            (Some(t), _, _) => Some(t.rv),
            (None, Some(rv), Some(RvMatch::Exact)) => {
                if rv > current {
                    return Err(ApiError::too_large_resource_version(rv, current));
                }
                Some(rv)
            }
            // Legacy semantics: a paginated list at a non-zero resourceVersion is Exact.
            (None, Some(rv), None) if q.limit > 0 && rv > 0 && rv <= current => Some(rv),
            (None, Some(rv), _) if rv > current => {
                return Err(ApiError::too_large_resource_version(rv, current));
            }
            _ => None,
        };
        let ns = self.target.namespace.as_deref();
        let filter = |o: &Stored| selectors.matches(&o.meta);
        let pinned = selectors
            .fields
            .pinned_name()
            .map(|n| ObjectKey::new(ns.unwrap_or_default(), n));
        let page = match (&pinned, ns, &token) {
            // A field selector on the name of a namespaced-or-cluster object reads one key.
            (Some(key), Some(_), None) | (Some(key), None, None)
                if !self.rt.namespaced || ns.is_some() =>
            {
                let items: Vec<_> = if at.is_none() {
                    txn.get(&self.store_rt.gr, key)
                        .into_iter()
                        .filter(|o| filter(o))
                        .collect()
                } else {
                    Vec::new()
                };
                if at.is_none() {
                    store::Page {
                        rv: current,
                        items,
                        next: None,
                        remaining: None,
                    }
                } else {
                    self.read_page(&mut txn, ns, at, None, &filter, &selectors)?
                }
            }
            _ => self.read_page(
                &mut txn,
                ns,
                at,
                token.as_ref().map(|t| &t.after),
                &filter,
                &selectors,
            )?,
        };
        drop(txn);
        let cont = page.next.map(|after| Token { rv: page.rv, after }.encode());
        Ok(json_response(
            StatusCode::OK,
            self.view.list(
                page.items,
                &ListMeta {
                    rv: page.rv,
                    cont,
                    remaining: page.remaining,
                    shard: selectors.shard.as_ref().map(ShardSelector::canonical),
                },
            ),
        ))
    }

    fn read_page(
        &self,
        txn: &mut store::Txn<'_>,
        ns: Option<&str>,
        at: Option<u64>,
        after: Option<&ObjectKey>,
        filter: &dyn Fn(&Stored) -> bool,
        selectors: &Selectors,
    ) -> Result<store::Page> {
        txn.list(&ListQuery {
            gr: &self.store_rt.gr,
            namespace: ns,
            at,
            after,
            limit: self.query.limit,
            filter,
            count_remaining: selectors.is_empty(),
            label_hint: selectors.labels.required_pair(),
        })
        .map_err(|e| match e {
            store::Error::TooOld { requested, oldest } if self.query.continue_token.is_some() => {
                let _ = (requested, oldest);
                ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
            }
            store::Error::TooOld { requested, oldest } => {
                ApiError::gone(format!("too old resource version: {requested} ({oldest})"))
            }
            other => ApiError::internal(other.to_string()),
        })
    }

    fn watch(&self) -> Result<Response> {
        let q = self.query;
        let selectors = self.selectors()?;
        let rv = match q.resource_version.as_deref() {
            None | Some("") => None,
            Some(s) => Some(s.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "Invalid value: {s:?}: resourceVersion must be an integer"
                ))
            })?),
        };
        let send_initial = q.send_initial_events;
        let causes = watch_option_causes(send_initial, q.rv_match);
        if !causes.is_empty() {
            return Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", causes));
        }
        let start = match (send_initial, rv) {
            (Some(true), _) => watch::Start::InitialState,
            (Some(false), None) => watch::Start::Now,
            (_, None) | (_, Some(0)) => watch::Start::InitialState,
            (_, Some(rv)) => watch::Start::From(rv),
        };
        let mut name_selector = selectors;
        if let Some(name) = &self.target.name {
            // A watch on a single object is a field selector on its name.
            name_selector.fields = FieldSelector::parse(
                &format!("metadata.name={name}"),
                &crate::selector::Selectable::NAME_ONLY,
            )
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        let body = watch::start(
            self.app.store.clone(),
            self.app.faults.clone(),
            watch::Params {
                view: self.view.clone(),
                namespace: self.target.namespace.clone(),
                selectors: name_selector,
                start,
                initial_end_bookmark: send_initial == Some(true) && q.allow_bookmarks,
                bookmarks: q.allow_bookmarks,
                timeout: q.timeout,
            },
        )?;
        Ok(json_response(StatusCode::OK, body))
    }

    fn create(&self, body: &[u8], content_type: &str) -> Result<Response> {
        let value = self.storage_form(parse_body(
            body,
            content_type,
            self.rt,
            &self.target.version,
        )?);
        if let Some(name) = value.pointer("/metadata/name").and_then(Value::as_str) {
            self.app.counters.created(self.seq, name);
        }
        let w = self.writer();
        // Validation, defaults and ownership need no lock; only the insert does.
        let target = self.write_target();
        let value = w.prepare_new(&target, value)?;
        let obj = {
            let mut txn = self.app.store.lock();
            w.insert_new(&mut txn, &target, value)?
        };
        self.respond(StatusCode::CREATED, &obj)
    }

    fn update(&self, body: &[u8], content_type: &str) -> Result<Response> {
        let value = self.storage_form(parse_body(
            body,
            content_type,
            self.rt,
            &self.target.version,
        )?);
        let w = self.writer();
        let target = self.write_target();
        let value = crate::ops::put_body(&target, value)?;
        let obj = w.update_unlocked(&self.app.store, &target, |_| Ok(value.clone()))?;
        self.respond(StatusCode::OK, &obj)
    }

    fn patch(&self, body: &[u8], content_type: &str) -> Result<Response> {
        let ty = PatchType::from_content_type(content_type).ok_or_else(|| {
            ApiError::unsupported_media_type(patch::served_types(!self.rt.custom))
        })?;
        let pctx = patch::Context {
            field_manager: self.query.field_manager.clone(),
            force: self.query.force,
            schema: Some(self.rt.merge_schema(&self.target.version)),
            api_version: self.rt.api_version(&self.target.version),
            subresource: (self.part == Part::Status).then(|| "status".to_owned()),
            time: crate::clock::now_rfc3339(),
        };
        let mut w = self.writer();
        if ty == PatchType::Apply {
            // The apply records its own ownership.
            w.manager = None;
        }
        let key = ObjectKey::new(self.ns(), self.name());
        let target = self.write_target();
        // Only the main resource is created by a patch: a subresource of a missing
        // object is a 404, as kube-apiserver's status REST answers it.
        if ty.creates_missing() && self.part == Part::Main {
            let mut txn = self.app.store.lock();
            if txn.get(&self.store_rt.gr, &key).is_none() {
                let mut seed = serde_json::json!({
                    "apiVersion": self.rt.api_version(&self.target.version),
                    "kind": self.rt.kind,
                    "metadata": {"name": self.name()},
                });
                if self.rt.namespaced {
                    seed["metadata"]["namespace"] = Value::String(self.ns().to_owned());
                }
                let body = self.storage_form(patch::apply(ty, seed, body, &pctx)?);
                // A patch naming a uid updates that object or nothing
                // (kube-apiserver's patcher.applyPatch): never a create.
                if let Some(uid) = body["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
                    return Err(ApiError::conflict(
                        &self.rt.gr,
                        self.name(),
                        &format!(
                            "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                        ),
                    ));
                }
                let created = w.create(&mut txn, &target, body)?;
                drop(txn);
                return self.respond(StatusCode::CREATED, &created);
            }
        }
        // The patch is computed without the store lock, and recomputed if the object
        // changed meanwhile.
        let obj = w.update_unlocked(&self.app.store, &target, |old| {
            crate::ops::patched_body(&target, old, |cur| {
                Ok(self.storage_form(patch::apply(ty, self.requested_form(cur), body, &pctx)?))
            })
        })?;
        self.respond(StatusCode::OK, &obj)
    }

    /// A delete's options, and whether it is a dry run (on the query or in the body).
    fn delete_options(&self, body: &[u8]) -> Result<(DeleteOptions, bool)> {
        let q = self.query;
        let parsed: Value = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
            })?
        };
        let policy = parsed["propagationPolicy"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| q.propagation_policy.clone());
        let orphan = parsed["orphanDependents"].as_bool().or(q.orphan_dependents);
        let propagation = match (policy.as_deref(), orphan) {
            (Some("Orphan"), _) => Some(Propagation::Orphan),
            (Some("Background"), _) => Some(Propagation::Background),
            (Some("Foreground"), _) => Some(Propagation::Foreground),
            (Some(other), _) => {
                return Err(ApiError::invalid(
                    "DeleteOptions",
                    "meta.k8s.io",
                    "",
                    vec![status::Cause {
                        reason: "FieldValueNotSupported",
                        message: format!(
                            "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                        ),
                        field: "propagationPolicy".into(),
                    }],
                ));
            }
            (None, Some(true)) => Some(Propagation::Orphan),
            (None, Some(false)) => Some(Propagation::Background),
            (None, None) => None,
        };
        let dry_run = q.dry_run
            || parsed["dryRun"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "All"));
        let opts = DeleteOptions {
            propagation,
            uid: parsed["preconditions"]["uid"].as_str().map(str::to_owned),
            resource_version: parsed["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_owned),
            cascade_requested: orphan == Some(false),
            grace_period: parsed["gracePeriodSeconds"].as_i64().or(q.grace_period),
        };
        Ok((opts, dry_run))
    }

    fn delete(&self, body: &[u8]) -> Result<Response> {
        let (opts, dry_run) = self.delete_options(body)?;
        let w = self.writer();
        let outcome = {
            let mut txn = self.app.store.lock();
            w.delete(&mut txn, &self.write_target().with_dry_run(dry_run), &opts)?
        };
        match outcome {
            Deleted::Now(obj) if self.rt.return_deleted => self.respond(StatusCode::OK, &obj),
            Deleted::Now(obj) => Ok(json_response(
                StatusCode::OK,
                status::success(&self.rt.gr, &obj.meta.name, &obj.meta.uid).to_string(),
            )),
            Deleted::Pending(obj) => {
                let code = if opts.cascade_requested {
                    StatusCode::ACCEPTED
                } else {
                    StatusCode::OK
                };
                self.respond(code, &obj)
            }
        }
    }

    fn delete_collection(&self, body: &[u8]) -> Result<Response> {
        let (opts, dry_run) = self.delete_options(body)?;
        let selectors = self.selectors()?;
        let w = self.writer();
        let mut out = Vec::new();
        let rv = {
            let mut txn = self.app.store.lock();
            let filter = |o: &Stored| selectors.matches(&o.meta);
            let page = self.read_page(
                &mut txn,
                self.target.namespace.as_deref(),
                None,
                None,
                &filter,
                &selectors,
            )?;
            for o in page.items {
                let target = WriteTarget::of(self.store_rt, &o.meta.namespace, &o.meta.name)
                    .with_dry_run(dry_run);
                match w.delete(&mut txn, &target, &opts) {
                    Ok(Deleted::Now(x) | Deleted::Pending(x)) => out.push(x),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            txn.rv()
        };
        let list_view = View::new(
            self.rt.clone(),
            &self.target.version,
            Output::Object,
            Include::Metadata,
        );
        Ok(json_response(
            StatusCode::OK,
            list_view.list(
                out,
                &ListMeta {
                    rv,
                    ..ListMeta::default()
                },
            ),
        ))
    }
}

/// What kube-apiserver finds wrong with a watch's `sendInitialEvents` and
/// `resourceVersionMatch`: they come together, and the match can only be `NotOlderThan`.
fn watch_option_causes(
    send_initial: Option<bool>,
    rv_match: Option<RvMatch>,
) -> Vec<status::Cause> {
    let forbidden = |message: &str| status::Cause {
        reason: "FieldValueForbidden",
        message: format!("Forbidden: {message}"),
        field: "resourceVersionMatch".into(),
    };
    let rv_match = rv_match.filter(|m| *m != RvMatch::Unset);
    let mut causes = Vec::new();
    if send_initial.is_some() && rv_match != Some(RvMatch::NotOlderThan) {
        causes.push(forbidden(
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if let Some(m) = rv_match {
        if send_initial.is_none() {
            causes.push(forbidden(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if m == RvMatch::Exact {
            causes.push(status::Cause {
                reason: "FieldValueNotSupported",
                message: "Unsupported value: \"Exact\": supported values: \"NotOlderThan\"".into(),
                field: "resourceVersionMatch".into(),
            });
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_bodies_are_decoded() {
        let rt = crate::kinds::registry()
            .lookup("", "v1", "configmaps")
            .unwrap();
        assert!(parse_body(b"{}", "application/json", &rt, "v1").is_ok());
        assert_eq!(
            parse_body(b"{}", "application/yaml", &rt, "v1")
                .unwrap_err()
                .code,
            415
        );
        assert_eq!(parse_body(b"{", "", &rt, "v1").unwrap_err().code, 400);
    }

    #[test]
    fn a_body_of_a_built_in_kind_is_decoded_against_its_type() {
        let registry = crate::kinds::registry();
        let configmaps = registry.lookup("", "v1", "configmaps").unwrap();
        let e = parse_body(
            br#"{"data": {"a": true}}"#,
            "application/json",
            &configmaps,
            "v1",
        )
        .unwrap_err();
        assert_eq!(
            (e.code, e.reason, e.to_string().as_str()),
            (
                400,
                "BadRequest",
                "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot \
                 unmarshal bool into Go struct field ConfigMap.data of type string"
            )
        );
        assert!(
            parse_body(
                br#"{"data": {"a": "x"}, "unknown": 1}"#,
                "",
                &configmaps,
                "v1"
            )
            .is_ok(),
            "unknown fields are no error"
        );
    }

    #[test]
    fn verbs_are_named_like_kubernetes_audit_verbs() {
        assert_eq!(Verb::DeleteCollection.as_str(), "deletecollection");
    }
}
