//! Rendering stored objects as responses: the object itself (rewritten to the requested
//! version when a CRD serves several), `PartialObjectMetadata`, or `Table` rows; lists are
//! built by concatenating stored bytes in chunks (items of built-in kinds without their
//! `apiVersion` and `kind`, as kube-apiserver sends them).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};

use super::request::Output;
use crate::object::Stored;
use crate::resource::ResourceType;
use crate::table;
use crate::table::PrinterColumn;

/// How list bodies are cut into chunks.
const CHUNK: usize = 256 * 1024;

/// `includeObject` for Table rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Include {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The full object.
    Object,
}

impl Include {
    /// From the `includeObject` parameter.
    pub(crate) fn parse(v: Option<&str>) -> Self {
        match v {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// What to render, fixed per request.
/// A list's `metadata`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListMeta {
    /// `resourceVersion`.
    pub(crate) rv: u64,
    /// `continue`.
    pub(crate) cont: Option<String>,
    /// `remainingItemCount`.
    pub(crate) remaining: Option<u64>,
    /// `shardInfo.selector`: the shard selector applied, canonically.
    pub(crate) shard: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct View {
    /// The resource type.
    pub(crate) rt: Arc<ResourceType>,
    /// The requested version.
    pub(crate) version: String,
    /// The output form.
    pub(crate) output: Output,
    /// Table object inclusion.
    pub(crate) include: Include,
    /// Table columns (empty unless `output` is `Table`).
    pub(crate) columns: Vec<PrinterColumn>,
}

impl View {
    /// A view.
    pub(crate) fn new(
        rt: Arc<ResourceType>,
        version: &str,
        output: Output,
        include: Include,
    ) -> Self {
        let columns = if output == Output::Table {
            rt.columns(version)
        } else {
            Vec::new()
        };
        Self {
            rt,
            version: version.to_owned(),
            output,
            include,
            columns,
        }
    }

    /// Whether objects are served exactly as stored.
    fn plain(&self) -> bool {
        self.rt.stored_as.is_none() && !self.needs_rewrite()
    }

    fn needs_rewrite(&self) -> bool {
        self.rt.custom && self.rt.versions.len() > 1
    }

    /// The object in the requested version.
    pub(crate) fn object(&self, obj: &Stored) -> Bytes {
        if self.rt.stored_as.is_some() {
            return match obj.value() {
                Ok(v) => Bytes::from(crate::convert::event_from_core(v).to_string()),
                Err(_) => obj.bytes(),
            };
        }
        if !self.needs_rewrite() {
            return obj.bytes();
        }
        let want = self.rt.api_version(&self.version);
        match obj.value() {
            Ok(mut v) if v["apiVersion"] != want.as_str() => {
                v["apiVersion"] = Value::String(want);
                Bytes::from(v.to_string())
            }
            _ => obj.bytes(),
        }
    }

    /// The object as an item of a list: custom resources keep `apiVersion` and `kind`,
    /// built-in kinds leave them out as kube-apiserver's typed lists do.
    fn list_item(&self, obj: &Stored) -> Bytes {
        if self.rt.custom {
            return self.object(obj);
        }
        match serde_json::from_slice::<Value>(&self.object(obj)) {
            Ok(Value::Object(mut m)) => {
                m.remove("apiVersion");
                m.remove("kind");
                Bytes::from(Value::Object(m).to_string())
            }
            _ => self.object(obj),
        }
    }

    /// The object as a value in the requested version.
    fn object_value(&self, obj: &Stored) -> Value {
        serde_json::from_slice(&self.object(obj)).unwrap_or(Value::Null)
    }

    /// A Table row for one object.
    pub(crate) fn row(&self, obj: &Stored) -> Value {
        let v = self.object_value(obj);
        let included = match self.include {
            Include::None => Value::Null,
            Include::Metadata => {
                serde_json::from_slice(&obj.partial_metadata()).unwrap_or(Value::Null)
            }
            Include::Object => v.clone(),
        };
        table::row(&self.columns, &v, included)
    }

    /// One object as a response body (a single-row Table when a Table was asked for).
    pub(crate) fn one(&self, obj: &Stored) -> Bytes {
        match self.output {
            Output::Object => self.object(obj),
            Output::Partial => obj.partial_metadata(),
            Output::Table => Bytes::from(
                table::table(&self.columns, vec![self.row(obj)], obj.meta.rv, None, None)
                    .to_string(),
            ),
        }
    }

    /// A list response body.
    pub(crate) fn list(&self, items: Vec<Arc<Stored>>, meta: &ListMeta) -> Body {
        let ListMeta {
            rv,
            cont,
            remaining,
            shard,
        } = meta.clone();
        if self.output == Output::Table {
            let rows = items.iter().map(|o| self.row(o)).collect();
            return Body::from(table::table(&self.columns, rows, rv, cont, remaining).to_string());
        }
        let (kind, api_version) = match self.output {
            Output::Partial => (
                "PartialObjectMetadataList".to_owned(),
                "meta.k8s.io/v1".to_owned(),
            ),
            _ => (
                format!("{}List", self.rt.kind),
                self.rt.api_version(&self.version),
            ),
        };
        let mut meta = json!({"resourceVersion": rv.to_string()});
        // A custom resource list is unstructured in kube-apiserver: it
        // always carries `continue`, and has no `shardInfo` to set (the
        // shard selector still filters it).
        match cont {
            Some(c) => meta["continue"] = json!(c),
            None if self.rt.custom => meta["continue"] = json!(""),
            None => {}
        }
        if let Some(n) = remaining {
            meta["remainingItemCount"] = json!(n);
        }
        if let Some(selector) = shard.filter(|_| !self.rt.custom) {
            meta["shardInfo"] = json!({"selector": selector});
        }
        let head = format!(
            "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
            json!(kind),
            json!(api_version),
            meta
        );
        let view = self.clone();
        let mut iter = items.into_iter().enumerate();
        let mut head = Some(head);
        let mut done = false;
        let stream = futures::stream::iter(std::iter::from_fn(move || {
            if done {
                return None;
            }
            let mut buf = BytesMut::with_capacity(CHUNK + 8192);
            if let Some(h) = head.take() {
                buf.extend_from_slice(h.as_bytes());
            }
            while buf.len() < CHUNK {
                match iter.next() {
                    Some((i, o)) => {
                        if i > 0 {
                            buf.extend_from_slice(b",");
                        }
                        match view.output {
                            Output::Partial => buf.extend_from_slice(&o.partial_metadata()),
                            _ if view.plain() && view.rt.custom => o.write_to(&mut buf),
                            _ if view.plain() => o.write_untyped_to(&mut buf),
                            _ => buf.extend_from_slice(&view.list_item(&o)),
                        }
                    }
                    None => {
                        buf.extend_from_slice(b"]}");
                        done = true;
                        break;
                    }
                }
            }
            Some(Ok::<_, Infallible>(buf.freeze()))
        }));
        Body::from_stream(stream)
    }

    /// A watch event line: `{"type":"ADDED","object":...}\n`.
    pub(crate) fn event(&self, kind: &str, obj: &Stored) -> Bytes {
        let body = self.one(obj);
        let mut buf = BytesMut::with_capacity(body.len() + 32);
        buf.extend_from_slice(b"{\"type\":\"");
        buf.extend_from_slice(kind.as_bytes());
        buf.extend_from_slice(b"\",\"object\":");
        buf.extend_from_slice(&body);
        buf.extend_from_slice(b"}\n");
        buf.freeze()
    }

    /// A BOOKMARK event at `rv`, optionally marking the end of the initial events.
    pub(crate) fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let (kind, api_version) = match self.output {
            Output::Object => (self.rt.kind.clone(), self.rt.api_version(&self.version)),
            Output::Partial => (
                "PartialObjectMetadata".to_owned(),
                "meta.k8s.io/v1".to_owned(),
            ),
            Output::Table => ("Table".to_owned(), "meta.k8s.io/v1".to_owned()),
        };
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": kind, "apiVersion": api_version, "metadata": meta});
        Bytes::from(format!("{}\n", json!({"type": "BOOKMARK", "object": obj})))
    }
}

/// An ERROR watch event carrying a `Status`.
pub(crate) fn error_event(status: &Value) -> Bytes {
    Bytes::from(format!("{}\n", json!({"type": "ERROR", "object": status})))
}
