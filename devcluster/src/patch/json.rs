//! JSON patch (RFC 6902) with the semantics of the library kube-apiserver uses: `test`
//! against a missing member passes only for `null`, `-` appends, and any failed operation
//! fails the whole patch.

use serde_json::Value;

/// Why a JSON patch failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The body is not a JSON array of operations.
    #[error("invalid JSON patch document")]
    Decode,
    /// An operation has an unknown `op`.
    #[error("Unexpected kind: {0}")]
    UnknownOp(String),
    /// An operation lacks a field it needs.
    #[error("operation missing {0} field")]
    MissingField(&'static str),
    /// A path does not exist in the document.
    #[error("{op} operation does not apply: doc is missing path: {path:?}: missing value")]
    MissingPath {
        /// The operation.
        op: String,
        /// The path.
        path: String,
    },
    /// An array index is out of range or not a number.
    #[error("Unable to access invalid index: {0}")]
    InvalidIndex(String),
    /// A `test` operation did not hold.
    #[error("testing value {0} failed: test failed")]
    TestFailed(String),
}

/// Results of JSON patch application.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn tokens(path: &str) -> Option<Vec<String>> {
    if path.is_empty() {
        return Some(Vec::new());
    }
    let rest = path.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

/// The container holding the last token, and that token.
fn parent<'v>(doc: &'v mut Value, toks: &[String]) -> Option<(&'v mut Value, String)> {
    let (last, init) = toks.split_last()?;
    let mut cur = doc;
    for t in init {
        cur = match cur {
            Value::Object(m) => m.get_mut(t)?,
            Value::Array(a) => a.get_mut(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some((cur, last.clone()))
}

fn get<'v>(doc: &'v Value, toks: &[String]) -> Option<&'v Value> {
    let mut cur = doc;
    for t in toks {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn missing(op: &str, path: &str) -> Error {
    Error::MissingPath {
        op: op.to_owned(),
        path: path.to_owned(),
    }
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<()> {
    let toks = tokens(path).ok_or_else(|| missing("add", path))?;
    if toks.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (container, key) = parent(doc, &toks).ok_or_else(|| missing("add", path))?;
    match container {
        Value::Object(m) => {
            m.insert(key, value);
            Ok(())
        }
        Value::Array(a) => {
            if key == "-" {
                a.push(value);
                return Ok(());
            }
            let i = key
                .parse::<usize>()
                .map_err(|_| Error::InvalidIndex(key.clone()))?;
            if i > a.len() {
                return Err(Error::InvalidIndex(key));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(missing("add", path)),
    }
}

fn remove(doc: &mut Value, path: &str, op: &str) -> Result<Value> {
    let toks = tokens(path).ok_or_else(|| missing(op, path))?;
    let (container, key) = parent(doc, &toks).ok_or_else(|| missing(op, path))?;
    match container {
        Value::Object(m) => m.remove(&key).ok_or_else(|| missing(op, path)),
        Value::Array(a) => {
            let i = key
                .parse::<usize>()
                .map_err(|_| Error::InvalidIndex(key.clone()))?;
            if i >= a.len() {
                return Err(Error::InvalidIndex(key));
            }
            Ok(a.remove(i))
        }
        _ => Err(missing(op, path)),
    }
}

fn field<'o>(op: &'o Value, name: &'static str) -> Result<&'o str> {
    op.get(name)
        .and_then(Value::as_str)
        .ok_or(Error::MissingField(name))
}

/// Parses a patch document.
pub(crate) fn decode(body: &[u8]) -> Result<Vec<Value>> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(ops)) => Ok(ops),
        _ => Err(Error::Decode),
    }
}

/// Applies every operation in order to `doc`; on error `doc` may be partly changed and
/// must be dropped.
pub(crate) fn apply(doc: &mut Value, ops: &[Value]) -> Result<()> {
    for op in ops {
        let kind = field(op, "op")?;
        let path = field(op, "path")?;
        match kind {
            "add" => add(
                doc,
                path,
                op.get("value")
                    .cloned()
                    .ok_or(Error::MissingField("value"))?,
            )?,
            "remove" => {
                remove(doc, path, "remove")?;
            }
            "replace" => {
                let value = op
                    .get("value")
                    .cloned()
                    .ok_or(Error::MissingField("value"))?;
                let toks = tokens(path).ok_or_else(|| missing("replace", path))?;
                if toks.is_empty() {
                    *doc = value;
                } else {
                    let (container, key) =
                        parent(doc, &toks).ok_or_else(|| missing("replace", path))?;
                    let slot = match container {
                        Value::Object(m) => m.get_mut(&key),
                        Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
                        _ => None,
                    }
                    .ok_or_else(|| missing("replace", path))?;
                    *slot = value;
                }
            }
            "move" => {
                let from = field(op, "from")?;
                let v = remove(doc, from, "move")?;
                add(doc, path, v)?;
            }
            "copy" => {
                let from = field(op, "from")?;
                let toks = tokens(from).ok_or_else(|| missing("copy", from))?;
                let v = get(doc, &toks)
                    .cloned()
                    .ok_or_else(|| missing("copy", from))?;
                add(doc, path, v)?;
            }
            "test" => {
                let want = op.get("value").unwrap_or(&Value::Null);
                let toks = tokens(path).ok_or_else(|| missing("test", path))?;
                if toks.is_empty() {
                    if doc != want {
                        return Err(Error::TestFailed(path.to_owned()));
                    }
                    continue;
                }
                // The parent must exist; a missing member then equals only `null`.
                let mut probe = doc.clone();
                let (container, key) =
                    parent(&mut probe, &toks).ok_or_else(|| missing("test", path))?;
                let actual = match container {
                    Value::Object(m) => m.get(&key).cloned(),
                    Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i).cloned()),
                    _ => return Err(missing("test", path)),
                };
                let ok = match actual {
                    None | Some(Value::Null) => want.is_null(),
                    Some(v) => v == *want,
                };
                if !ok {
                    return Err(Error::TestFailed(path.to_owned()));
                }
            }
            other => return Err(Error::UnknownOp(other.to_owned())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Value, ops: Value) -> Result<Value> {
        let mut d = doc;
        let ops = decode(ops.to_string().as_bytes())?;
        apply(&mut d, &ops)?;
        Ok(d)
    }

    #[test]
    fn finalizer_add_with_null_test_passes_when_the_list_is_missing() {
        let out = run(
            json!({"metadata": {"name": "a"}}),
            json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                   {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}]),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["x"]));
    }

    #[test]
    fn finalizer_removal_test_fails_when_the_index_holds_another_value() {
        let err = run(
            json!({"metadata": {"finalizers": ["other", "x"]}}),
            json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "x"},
                   {"op": "remove", "path": "/metadata/finalizers/0"}]),
        )
        .unwrap_err();
        assert_eq!(err, Error::TestFailed("/metadata/finalizers/0".into()));
        assert_eq!(
            err.to_string(),
            "testing value /metadata/finalizers/0 failed: test failed"
        );
    }

    #[test]
    fn append_move_copy_and_replace_work() {
        let out = run(
            json!({"a": [1], "b": {"c": 2}}),
            json!([{"op": "add", "path": "/a/-", "value": 3},
                   {"op": "copy", "from": "/b/c", "path": "/d"},
                   {"op": "move", "from": "/b", "path": "/e"},
                   {"op": "replace", "path": "/a/0", "value": 0}]),
        )
        .unwrap();
        assert_eq!(out, json!({"a": [0, 3], "d": 2, "e": {"c": 2}}));
    }

    #[test]
    fn bad_paths_fail() {
        assert!(matches!(
            run(
                json!({}),
                json!([{"op": "add", "path": "/x/y", "value": 1}])
            ),
            Err(Error::MissingPath { .. })
        ));
        assert!(matches!(
            run(json!({}), json!([{"op": "remove", "path": "/x"}])),
            Err(Error::MissingPath { .. })
        ));
        assert!(matches!(
            run(
                json!({"a": []}),
                json!([{"op": "add", "path": "/a/5", "value": 1}])
            ),
            Err(Error::InvalidIndex(_))
        ));
        assert_eq!(decode(b"{}"), Err(Error::Decode));
    }
}
