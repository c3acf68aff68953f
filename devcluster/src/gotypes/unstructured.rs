//! What kube-apiserver's unstructured converter
//! (`runtime.DefaultUnstructuredConverter.FromUnstructured`) says of an
//! object that does not fit its kind's Go type. It reads the result of a
//! strategic merge patch, and of a server-side apply.
//!
//! It converts Go values, not JSON text: a number is an `int64` or a
//! `float64` ([`Numbers`]), and its errors speak of Go kinds
//! (`cannot convert float64 to int32`, `unrecognized type: string`,
//! `cannot restore struct from: string`), with no field path. The first
//! error ends the conversion. Types with a JSON decoder of their own
//! (quantities, times, int-or-strings) are given the value as JSON.

use serde_json::{Number, Value};

use super::print::{GoNumber, Numbers};
use super::table::{Registry, Type, TypeId};
use super::{Error, base64, json};

/// Converts `value` to the type `ty`, for the converter's error.
pub(super) fn convert(
    registry: &Registry,
    ty: TypeId,
    value: &Value,
    numbers: Numbers,
) -> Result<(), Error> {
    if value.is_null() {
        return Ok(());
    }
    match registry.get(ty) {
        Type::String => scalar(Scalar::String, value, numbers),
        Type::Int32 => scalar(Scalar::Int32, value, numbers),
        Type::Int64 => scalar(Scalar::Int64, value, numbers),
        Type::Float64 => scalar(Scalar::Float64, value, numbers),
        Type::Bool => scalar(Scalar::Bool, value, numbers),
        Type::Any(_) => Ok(()),
        Type::Bytes => match value {
            // Text is read back through Go's JSON decoder.
            Value::String(text) => match base64::corrupt_at(text.as_bytes()) {
                Some(offset) => Err(Error::Base64FromText(offset)),
                None => Ok(()),
            },
            Value::Array(items) => items
                .iter()
                .try_for_each(|item| scalar(Scalar::Uint8, item, numbers)),
            other => Err(Error::SliceFrom(go_kind(other, numbers))),
        },
        Type::Slice(item) => match value {
            Value::Array(items) => items
                .iter()
                .try_for_each(|v| convert(registry, *item, v, numbers)),
            other => Err(Error::SliceFrom(go_kind(other, numbers))),
        },
        Type::Struct(s) => match value {
            // In the object's order: Go's, the struct's, differs only in
            // which of several errors comes first.
            Value::Object(map) => map.iter().try_for_each(|(key, v)| {
                s.fields
                    .get(key)
                    .map_or(Ok(()), |field| convert(registry, *field, v, numbers))
            }),
            other => Err(Error::StructFrom(go_kind(other, numbers))),
        },
        Type::Map(item) => match value {
            Value::Object(map) => map
                .values()
                .try_for_each(|v| convert(registry, *item, v, numbers)),
            other => Err(Error::MapFrom(go_kind(other, numbers))),
        },
        Type::IntOrString | Type::Quantity | Type::Time(_) | Type::SchemaOr(..) => {
            json::decode(registry, ty, &marshalled(value, numbers))
        }
    }
}

/// The Go kinds a scalar is converted to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scalar {
    String,
    Int32,
    Int64,
    Float64,
    Bool,
    /// An item of a `[]byte`.
    Uint8,
}

impl Scalar {
    fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::Float64 => "float64",
            Self::Bool => "bool",
            Self::Uint8 => "uint8",
        }
    }
}

/// The converter's rules for scalars: Go's assignments and conversions,
/// without crossing between strings, booleans and numbers (an integer
/// "converts" to a string in Go, which the converter refuses by name).
fn scalar(to: Scalar, value: &Value, numbers: Numbers) -> Result<(), Error> {
    let number = |n: &Number| numbers.of(n);
    match (to, value) {
        (_, Value::Null) | (Scalar::String, Value::String(_)) | (Scalar::Bool, Value::Bool(_)) => {
            Ok(())
        }
        (Scalar::String, Value::Number(n)) => match number(n) {
            GoNumber::Int64(_) => Err(Error::Convert {
                from: "int64",
                to: to.name(),
            }),
            GoNumber::Float64(_) => Err(Error::Unrecognized(to.name())),
        },
        (Scalar::Int32 | Scalar::Int64 | Scalar::Float64 | Scalar::Uint8, Value::Number(n)) => {
            match number(n) {
                GoNumber::Float64(float) if to != Scalar::Float64 && float.fract() != 0.0 => {
                    Err(Error::Convert {
                        from: "float64",
                        to: to.name(),
                    })
                }
                _ => Ok(()),
            }
        }
        _ => Err(Error::Unrecognized(to.name())),
    }
}

/// `reflect.Kind` of the Go value holding `value`, as the converter names
/// what it cannot restore a struct, list or map from.
fn go_kind(value: &Value, numbers: Numbers) -> &'static str {
    match value {
        Value::Null => "invalid",
        Value::Bool(_) => "bool",
        Value::Number(n) => numbers.of(n).type_name(),
        Value::String(_) => "string",
        Value::Array(_) => "slice",
        Value::Object(_) => "map",
    }
}

/// `value` as Go's `json.Marshal` writes the Go value: a whole `float64`
/// is written without a fraction, so it reads back as an integer.
fn marshalled(value: &Value, numbers: Numbers) -> Value {
    match value {
        Value::Number(n) => match numbers.of(n) {
            // Below 2^63 a whole float64 is an int64 exactly.
            #[allow(clippy::cast_possible_truncation)]
            GoNumber::Float64(float) if float.fract() == 0.0 && float.abs() < 9.2e18 => {
                Value::from(float as i64)
            }
            _ => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| marshalled(v, numbers)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), marshalled(v, numbers)))
                .collect(),
        ),
        other => other.clone(),
    }
}
