//! The Go types kube-apiserver decodes the built-in kinds into, and what
//! its decoders say of a body that does not fit them.
//!
//! kube-apiserver reads every write of a built-in kind into the kind's Go
//! struct before anything else, so a field of the wrong JSON type (a
//! ConfigMap's `data` holding a boolean) is refused and nothing is stored.
//! Which decoder reads the body depends on the write, and each words its
//! errors its own way:
//!
//! - a create, an update, a JSON patch's and a merge patch's result:
//!   `encoding/json` ([`GoType::decode_json`]);
//! - a strategic merge patch's result, and an apply's: the unstructured
//!   converter ([`GoType::convert_unstructured`]);
//! - an apply's configuration, before it is merged: structured-merge-diff's
//!   validation, in [`crate::apply`], which sees a type as an [`Atom`].
//!
//! The types come from the schemas of k8s-openapi's structs, which mirror
//! Go's for the Kubernetes version it is built for. OpenAPI keeps no Go
//! type names but the structs': a field of a named string type
//! (`v1.Protocol`) is a `string` here, and an error about it says `string`.

mod base64;
mod json;
mod print;
mod quantity;
mod table;
mod time;
mod unstructured;

use std::fmt;

use serde_json::Value;

pub(crate) use print::{Numbers, go_syntax, plain, quote, type_name};
pub(crate) use table::{Mirror, Registry};
use table::{Type, TypeId};

/// The Go type of a kind, or of a place inside one, in the registry that
/// holds it.
#[derive(Clone, Copy)]
pub(crate) struct GoType {
    registry: &'static Registry,
    id: TypeId,
}

impl Registry {
    /// The Go type of the `index`th kind given to [`Registry::new`].
    pub(crate) fn kind(&'static self, index: usize) -> GoType {
        GoType {
            registry: self,
            id: self.root(index),
        }
    }
}

/// Two places are one type when one registry gives them the same id.
impl PartialEq for GoType {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.registry, other.registry) && self.id == other.id
    }
}

impl Eq for GoType {}

/// By its Go name: the registry it points into is too large to print.
impl fmt::Debug for GoType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GoType({})", self.registry.go_name(self.id))
    }
}

/// What structured-merge-diff makes of a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Atom {
    /// A struct or a map.
    Map,
    List,
    /// A string (times and bytes are strings in JSON).
    String,
    /// An integer or a float.
    Numeric,
    Boolean,
    /// Any scalar: int-or-string, quantities.
    Scalar,
    /// Anything (`JSON`, `FieldsV1`, the schema-or-bool types).
    Any,
}

impl GoType {
    /// Decodes a body as Go's `encoding/json` would; the error is Go's.
    pub(crate) fn decode_json(self, body: &Value) -> Result<(), Error> {
        json::decode(self.registry, self.id, body)
    }

    /// Converts an object as kube-apiserver's unstructured converter would,
    /// its numbers held as `numbers` says; the error is the converter's.
    pub(crate) fn convert_unstructured(
        self,
        object: &Value,
        numbers: Numbers,
    ) -> Result<(), Error> {
        unstructured::convert(self.registry, self.id, object, numbers)
    }

    /// Another type of the same registry.
    fn at(self, id: TypeId) -> Self {
        Self { id, ..self }
    }

    /// The type of a struct's field or a map's entry `key`; `None` for a
    /// field the struct does not have, or a type that has no keys.
    pub(crate) fn child(self, key: &str) -> Option<GoType> {
        match self.registry.get(self.id) {
            Type::Struct(s) => s.fields.get(key).copied().map(|id| self.at(id)),
            Type::Map(item) => Some(self.at(*item)),
            _ => None,
        }
    }

    /// The type of a list's items.
    pub(crate) fn item(self) -> Option<GoType> {
        match self.registry.get(self.id) {
            Type::Slice(item) => Some(self.at(*item)),
            _ => None,
        }
    }

    /// What structured-merge-diff makes of the type.
    pub(crate) fn atom(self) -> Atom {
        match self.registry.get(self.id) {
            Type::Struct(_) | Type::Map(_) => Atom::Map,
            Type::Slice(_) => Atom::List,
            Type::String | Type::Bytes | Type::Time(_) => Atom::String,
            Type::Int32 | Type::Int64 | Type::Float64 => Atom::Numeric,
            Type::Bool => Atom::Boolean,
            Type::IntOrString | Type::Quantity => Atom::Scalar,
            Type::Any(_) | Type::SchemaOr(..) => Atom::Any,
        }
    }
}

/// What a Go decoder says of a value that does not fit its type, in Go's
/// words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    /// `encoding/json`'s error for a JSON value of the wrong type.
    #[error(transparent)]
    Unmarshal(#[from] UnmarshalTypeError),
    /// A `[]byte` field's text is not base64 (at this byte).
    #[error("illegal base64 data at input byte {0}")]
    Base64(usize),
    /// The converter's `[]byte` from text that is not base64 (at this
    /// byte): it decodes the text through JSON.
    #[error("error decoding from json: illegal base64 data at input byte {0}")]
    Base64FromText(usize),
    /// A `resource.Quantity` in no format Kubernetes reads.
    #[error(transparent)]
    Quantity(#[from] quantity::Error),
    /// A time in no RFC 3339 form Go reads.
    #[error(transparent)]
    Time(#[from] time::ParseError),
    /// apiextensions' `JSONSchemaPropsOrBool` given neither.
    #[error("boolean or JSON schema expected")]
    SchemaOrBool,
    /// The converter met a value it cannot make the scalar of this Go kind
    /// from (a boolean for a string).
    #[error("unrecognized type: {0}")]
    Unrecognized(&'static str),
    /// The converter refused a Go conversion (a fractional `float64` to an
    /// `int32`, an `int64` to a `string`).
    #[error("cannot convert {from} to {to}")]
    Convert {
        from: &'static str,
        to: &'static str,
    },
    /// The converter found a value of this Go kind where a struct belongs.
    #[error("cannot restore struct from: {0}")]
    StructFrom(&'static str),
    /// ... where a list belongs.
    #[error("cannot restore slice from {0}")]
    SliceFrom(&'static str),
    /// ... where a map belongs.
    #[error("cannot restore map from {0}")]
    MapFrom(&'static str),
}

/// Go's `json.UnmarshalTypeError`: a JSON value of the wrong type, and
/// where it was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) struct UnmarshalTypeError {
    /// The JSON value: `bool`, `string`, `number`, `number 1.5` (numbers
    /// read as numbers keep their text), `object`, `array`.
    value: String,
    /// The Go type it was to be (`int32`, `[]v1.Container`).
    go_type: String,
    /// The struct holding the field (`Container`), or "" outside a struct.
    holder: String,
    /// The field's path from the root (`spec.containers.image`).
    field: String,
}

impl UnmarshalTypeError {
    fn new(value: impl Into<String>, go_type: impl Into<String>) -> Self {
        Self {
            value: value.into(),
            go_type: go_type.into(),
            holder: String::new(),
            field: String::new(),
        }
    }
}

impl fmt::Display for UnmarshalTypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            value,
            go_type,
            holder,
            field,
        } = self;
        if holder.is_empty() && field.is_empty() {
            write!(
                f,
                "json: cannot unmarshal {value} into Go value of type {go_type}"
            )
        } else {
            write!(
                f,
                "json: cannot unmarshal {value} into Go struct field {holder}.{field} of type {go_type}"
            )
        }
    }
}

#[cfg(test)]
mod tests;
