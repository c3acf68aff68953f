//! Entry points of the fuzz targets in `fuzz/` over devcluster's parsers of request
//! bodies, replayed from their corpus by the test suite. An input is a selector byte, the
//! current object (JSON) and the request body, separated by the first NUL byte.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::patch::{self, Context, PatchType};
use crate::schema;

/// The kinds whose merge rules a patch is read with: an untyped object and built-in
/// kinds with keyed lists, sets and maps.
const KINDS: [(&str, &str, &str); 4] = [
    ("", "v1", "ConfigMap"),
    ("", "v1", "Pod"),
    ("apps", "v1", "Deployment"),
    ("", "", ""),
];

/// An input: the patch type, the kind, the current object and the body.
struct Input<'a> {
    ty: PatchType,
    ctx: Context,
    current: Value,
    body: &'a [u8],
}

fn input(data: &[u8]) -> Option<Input<'_>> {
    let (&selector, rest) = data.split_first()?;
    let split = rest.iter().position(|&b| b == 0)?;
    let (current, body) = (&rest[..split], &rest[split + 1..]);
    let ty = [
        PatchType::Json,
        PatchType::Merge,
        PatchType::Strategic,
        PatchType::Apply,
    ][usize::from(selector % 4)];
    let (group, version, kind) = KINDS[usize::from(selector / 4) % KINDS.len()];
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let mut current: Value = serde_json::from_slice(current).ok()?;
    if !current.is_object() {
        return None;
    }
    current["apiVersion"] = json!(api_version);
    current["kind"] = json!(kind);
    let schema = crate::kinds::schema(group, version, kind)
        .cloned()
        .unwrap_or_else(schema::Schema::untyped);
    let ctx = Context {
        field_manager: Some("fuzz".into()),
        force: selector & 0x80 != 0,
        schema: Some(Arc::new(schema)),
        api_version,
        subresource: None,
        time: "2026-01-01T00:00:00Z".into(),
    };
    Some(Input {
        ty,
        ctx,
        current,
        body,
    })
}

/// Patches and applies `data` (see the module doc). None may panic; a merge patch and an
/// apply that succeed change nothing when sent again, as their definitions promise.
pub fn patch(data: &[u8]) {
    let Some(Input {
        ty,
        ctx,
        current,
        body,
    }) = input(data)
    else {
        return;
    };
    let Ok(once) = patch::apply(ty, current, body, &ctx) else {
        return;
    };
    if matches!(ty, PatchType::Merge | PatchType::Apply) && once.is_object() {
        let twice = patch::apply(ty, once.clone(), body, &ctx);
        assert_eq!(twice.ok().as_ref(), Some(&once), "{ty:?} twice differs");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(selector: u8, current: &Value, body: &str) -> Vec<u8> {
        let mut data = vec![selector];
        data.extend(current.to_string().into_bytes());
        data.push(0);
        data.extend(body.as_bytes());
        data
    }

    #[test]
    fn an_input_names_the_type_the_kind_the_object_and_the_body() {
        let current = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        let bytes = data(4 + 3, &current, "{}");
        let read = input(&bytes).unwrap();
        assert_eq!(read.ty, PatchType::Apply);
        assert_eq!(read.current["kind"], "Pod");
        assert_eq!(read.body, b"{}");
        assert!(input(b"\x01{}").is_none(), "no NUL: no body");
        assert!(input(b"\x01[]\x00{}").is_none(), "the object must be one");
    }

    #[test]
    fn a_merge_patch_applied_twice_is_checked_for_a_second_change() {
        let current = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        patch(&data(1, &current, r#"{"data": {"a": null, "b": "2"}}"#));
        patch(&data(
            3,
            &current,
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2"}}"#,
        ));
    }
}
