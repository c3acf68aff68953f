//! Decoding the Kubernetes protobuf request encoding for the few built-in kinds that
//! kubectl's generators send that way (`kubectl create namespace|configmap|secret`):
//! client-go's typed clients write protobuf and do not fall back to JSON on a 415.

use serde_json::{Map, Value, json};

use crate::clock;

/// Why a protobuf body could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The `k8s\0` envelope is missing.
    #[error("the protobuf body does not start with the Kubernetes envelope")]
    Envelope,
    /// The bytes are not valid protobuf.
    #[error("malformed protobuf")]
    Malformed,
    /// This kind is only accepted as JSON.
    #[error("protobuf bodies are not supported for kind {0}")]
    UnsupportedKind(String),
}

/// Results of protobuf decoding.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The media type.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Iterates `(field number, value)` over one message.
fn fields(mut buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>> {
    fn varint(buf: &mut &[u8]) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = buf.split_first().ok_or(Error::Malformed)?;
            *buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::Malformed)
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let value = match key & 7 {
            0 => Wire::Varint(varint(&mut buf)?),
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                buf = buf.get(n..).ok_or(Error::Malformed)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|_| Error::Malformed)?;
                let (v, rest) = (buf.get(..len).ok_or(Error::Malformed)?, &buf[len..]);
                buf = rest;
                Wire::Bytes(v)
            }
            _ => return Err(Error::Malformed),
        };
        out.push((key >> 3, value));
    }
    Ok(out)
}

fn string(b: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(b).into_owned())
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A `map<string, string>` (or bytes, base64-encoded as JSON does) entry.
fn map_entry(b: &[u8], bytes: bool, into: &mut Map<String, Value>) -> Result<()> {
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    for (n, w) in fields(b)? {
        match (n, w) {
            (1, Wire::Bytes(x)) => k = String::from_utf8_lossy(x).into_owned(),
            (2, Wire::Bytes(x)) => {
                v = if bytes {
                    Value::String(base64(x))
                } else {
                    string(x)
                }
            }
            _ => {}
        }
    }
    into.insert(k, v);
    Ok(())
}

fn time(b: &[u8]) -> Result<Option<Value>> {
    let mut secs = 0i64;
    for (n, w) in fields(b)? {
        if let (1, Wire::Varint(v)) = (n, w) {
            secs = v as i64;
        }
    }
    Ok((secs > 0).then(|| Value::String(clock::format_rfc3339(secs))))
}

fn object_meta(b: &[u8]) -> Result<Value> {
    let mut m = Map::new();
    let (mut labels, mut annotations, mut finalizers, mut owners) =
        (Map::new(), Map::new(), Vec::new(), Vec::new());
    for (n, w) in fields(b)? {
        match (n, w) {
            // Empty strings are how the Go encoder writes unset optional fields.
            (_, Wire::Bytes([])) => {}
            (1, Wire::Bytes(x)) => drop(m.insert("name".into(), string(x))),
            (2, Wire::Bytes(x)) => drop(m.insert("generateName".into(), string(x))),
            (3, Wire::Bytes(x)) => drop(m.insert("namespace".into(), string(x))),
            (5, Wire::Bytes(x)) => drop(m.insert("uid".into(), string(x))),
            (6, Wire::Bytes(x)) => drop(m.insert("resourceVersion".into(), string(x))),
            (8, Wire::Bytes(x)) => {
                if let Some(t) = time(x)? {
                    m.insert("creationTimestamp".into(), t);
                }
            }
            (11, Wire::Bytes(x)) => map_entry(x, false, &mut labels)?,
            (12, Wire::Bytes(x)) => map_entry(x, false, &mut annotations)?,
            (13, Wire::Bytes(x)) => {
                let mut o = Map::new();
                for (f, w) in fields(x)? {
                    match (f, w) {
                        (1, Wire::Bytes(y)) => drop(o.insert("kind".into(), string(y))),
                        (3, Wire::Bytes(y)) => drop(o.insert("name".into(), string(y))),
                        (4, Wire::Bytes(y)) => drop(o.insert("uid".into(), string(y))),
                        (5, Wire::Bytes(y)) => drop(o.insert("apiVersion".into(), string(y))),
                        (6, Wire::Varint(y)) => drop(o.insert("controller".into(), json!(y != 0))),
                        (7, Wire::Varint(y)) => {
                            drop(o.insert("blockOwnerDeletion".into(), json!(y != 0)))
                        }
                        _ => {}
                    }
                }
                owners.push(Value::Object(o));
            }
            (14, Wire::Bytes(x)) => finalizers.push(string(x)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), Value::Array(finalizers));
    }
    if !owners.is_empty() {
        m.insert("ownerReferences".into(), Value::Array(owners));
    }
    Ok(Value::Object(m))
}

/// Decodes a protobuf request body for `kind` into its JSON form.
pub(crate) fn decode(body: &[u8], api_version: &str, kind: &str) -> Result<Value> {
    let raw_envelope = body.strip_prefix(b"k8s\x00").ok_or(Error::Envelope)?;
    let raw = fields(raw_envelope)?
        .into_iter()
        .find_map(|(n, w)| match (n, w) {
            (2, Wire::Bytes(b)) => Some(b),
            _ => None,
        })
        .ok_or(Error::Malformed)?;
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    let (mut data, mut binary, mut string_data) = (Map::new(), Map::new(), Map::new());
    for (n, w) in fields(raw)? {
        match (kind, n, w) {
            (_, 1, Wire::Bytes(b)) => drop(obj.insert("metadata".into(), object_meta(b)?)),
            ("ConfigMap", 2, Wire::Bytes(b)) => map_entry(b, false, &mut data)?,
            ("ConfigMap", 3, Wire::Bytes(b)) => map_entry(b, true, &mut binary)?,
            ("ConfigMap", 4, Wire::Varint(v)) => {
                drop(obj.insert("immutable".into(), json!(v != 0)))
            }
            ("Secret", 2, Wire::Bytes(b)) => map_entry(b, true, &mut data)?,
            ("Secret", 3, Wire::Bytes(b)) => drop(obj.insert("type".into(), string(b))),
            ("Secret", 4, Wire::Bytes(b)) => map_entry(b, false, &mut string_data)?,
            ("Secret", 5, Wire::Varint(v)) => drop(obj.insert("immutable".into(), json!(v != 0))),
            ("Namespace", 2, Wire::Bytes(b)) => {
                let f: Vec<Value> = fields(b)?
                    .into_iter()
                    .filter_map(|(n, w)| match (n, w) {
                        (1, Wire::Bytes(x)) => Some(string(x)),
                        _ => None,
                    })
                    .collect();
                if !f.is_empty() {
                    obj.insert("spec".into(), json!({"finalizers": f}));
                }
            }
            ("ConfigMap" | "Secret" | "Namespace", _, _) => {}
            (other, _, _) => return Err(Error::UnsupportedKind(other.to_owned())),
        }
    }
    if !matches!(kind, "ConfigMap" | "Secret" | "Namespace") {
        return Err(Error::UnsupportedKind(kind.to_owned()));
    }
    for (k, m) in [
        ("data", data),
        ("binaryData", binary),
        ("stringData", string_data),
    ] {
        if !m.is_empty() {
            obj.insert(k.into(), Value::Object(m));
        }
    }
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u8, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![(n << 3) | 2, u8::try_from(bytes.len()).unwrap()];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn a_configmap_decodes_with_data_and_labels() {
        let entry = |k: &str, v: &[u8]| [field(1, k.as_bytes()), field(2, v)].concat();
        let meta = [field(1, b"cfg"), field(11, &entry("app", b"web"))].concat();
        let raw = [
            field(1, &meta),
            field(2, &entry("a", b"1")),
            field(3, &entry("bin", &[0xff, 0x00])),
        ]
        .concat();
        let body = [b"k8s\x00".to_vec(), field(2, &raw)].concat();
        let v = decode(&body, "v1", "ConfigMap").unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "labels": {"app": "web"}},
                   "data": {"a": "1"}, "binaryData": {"bin": "/wA="}})
        );
    }

    #[test]
    fn other_kinds_and_bad_envelopes_are_rejected() {
        assert_eq!(decode(b"nope", "v1", "ConfigMap"), Err(Error::Envelope));
        let body = [b"k8s\x00".to_vec(), field(2, &field(1, &field(1, b"p")))].concat();
        assert_eq!(
            decode(&body, "v1", "Pod"),
            Err(Error::UnsupportedKind("Pod".into()))
        );
    }

    #[test]
    fn base64_pads_like_the_standard_encoding() {
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }
}
