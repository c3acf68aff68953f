//! Server-side printing: `meta.k8s.io/v1` `Table` columns and rows, as `kubectl get` asks for.

use std::borrow::Cow;

use serde_json::{Value, json};

use crate::clock;

/// A column's words: written into the code for built-in kinds, read from
/// the CRD for custom resources.
pub(crate) type Text = Cow<'static, str>;

/// A column of a `Table`: a CRD's `additionalPrinterColumns` entry, or one
/// a built-in kind prints.
#[derive(Debug, Clone)]
pub(crate) struct PrinterColumn {
    /// Column header.
    pub(crate) name: Text,
    /// OpenAPI type (`string`, `integer`, `date`, ...); cells of `date` show an age.
    pub(crate) kind: Text,
    /// The type the Table declares: a custom resource's own, while built-in tables
    /// declare their ages `string`.
    pub(crate) declared: Text,
    /// OpenAPI format.
    pub(crate) format: Text,
    /// Description.
    pub(crate) description: Text,
    /// 0 shows by default, higher only with `-o wide`.
    pub(crate) priority: i64,
    /// What fills the column's cells.
    pub(crate) cell: Cell,
}

/// What fills a column's cells.
#[derive(Debug, Clone)]
pub(crate) enum Cell {
    /// A simple JSONPath into the object.
    Path(Text),
    /// Computed from the whole object, as kube-apiserver's printers compute
    /// what no path reaches (a Pod's ready containers, a claim's access modes).
    Computed(fn(&Value) -> Value),
}

impl PrinterColumn {
    /// The column every table starts with.
    pub(crate) const NAME: Self = Self::new(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        Cell::Path(Cow::Borrowed(".metadata.name")),
    );

    /// The object's age, which built-in tables declare a `string`.
    pub(crate) const AGE: Self = Self::new(
        "Age",
        "date",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        Cell::Path(Cow::Borrowed(".metadata.creationTimestamp")),
    );

    /// A built-in kind's column of the text at `path`.
    pub(crate) const fn path(
        name: &'static str,
        description: &'static str,
        path: &'static str,
    ) -> Self {
        let cell = Cell::Path(Cow::Borrowed(path));
        Self::new(name, "string", "", description, cell)
    }

    /// A built-in kind's column computed by `cell`.
    pub(crate) const fn computed(
        name: &'static str,
        description: &'static str,
        cell: fn(&Value) -> Value,
    ) -> Self {
        Self::new(name, "string", "", description, Cell::Computed(cell))
    }

    /// A built-in kind's column; its ages are declared `string`.
    const fn new(
        name: &'static str,
        kind: &'static str,
        format: &'static str,
        description: &'static str,
        cell: Cell,
    ) -> Self {
        Self {
            name: Cow::Borrowed(name),
            kind: Cow::Borrowed(kind),
            declared: Cow::Borrowed("string"),
            format: Cow::Borrowed(format),
            description: Cow::Borrowed(description),
            priority: 0,
            cell,
        }
    }

    /// The column, shown only with `-o wide`.
    pub(crate) const fn wide(mut self) -> Self {
        self.priority = 1;
        self
    }
}

/// Evaluates the simple JSONPath forms printer columns use: `.a.b`, `.a[0].b`,
/// `.a[?(@.type=="Ready")].status`.
pub(crate) fn json_path<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    let mut cur = v;
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|e| e.get(field.trim()).and_then(Value::as_str) == Some(want))?;
            } else {
                cur = cur.get(inner.trim().parse::<usize>().ok()?)?;
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

fn cell(v: &Value, c: &PrinterColumn) -> Value {
    let path = match &c.cell {
        Cell::Path(path) => path,
        Cell::Computed(compute) => return compute(v),
    };
    match (c.kind.as_ref(), json_path(v, path)) {
        (_, None) | (_, Some(Value::Null)) => Value::Null,
        ("date", Some(Value::String(s))) => json!(clock::age(Some(s))),
        (_, Some(x @ (Value::String(_) | Value::Number(_) | Value::Bool(_)))) => x.clone(),
        (_, Some(other)) => json!(other.to_string()),
    }
}

/// The `columnDefinitions` array.
pub(crate) fn definitions(cols: &[PrinterColumn]) -> Value {
    Value::Array(
        cols.iter()
            .map(|c| {
                json!({
                    "name": c.name, "type": c.declared,
                    "format": c.format, "description": c.description, "priority": c.priority,
                })
            })
            .collect(),
    )
}

/// One row; `object` is what `includeObject` asked for (or null for `None`).
pub(crate) fn row(cols: &[PrinterColumn], v: &Value, object: Value) -> Value {
    let cells: Vec<Value> = cols.iter().map(|c| cell(v, c)).collect();
    let mut r = json!({"cells": cells});
    if !object.is_null() {
        r["object"] = object;
    }
    r
}

/// A whole `Table`.
pub(crate) fn table(
    cols: &[PrinterColumn],
    rows: Vec<Value>,
    rv: u64,
    cont: Option<String>,
    remaining: Option<u64>,
) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(n) = remaining {
        meta["remainingItemCount"] = json!(n);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": definitions(cols),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_follows_fields_indexes_and_filters() {
        let v = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}, "a": [1, 2]});
        assert_eq!(
            json_path(&v, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(json_path(&v, ".a[1]"), Some(&json!(2)));
        assert_eq!(json_path(&v, ".missing.x"), None);
    }
}
