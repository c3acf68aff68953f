//! What Go's `encoding/json` (in kube-apiserver's case-sensitive fork)
//! says of a JSON value decoded into a Go type.
//!
//! The decoder walks the value in order. A value of the wrong JSON type is
//! skipped and remembered, and the first one is the error once the walk is
//! done; a type with a decoder of its own (a quantity, a time, an
//! int-or-string) stops the walk with its error. An error of the first
//! kind names the struct holding the field and the field's path from the
//! root, without list indices or map keys:
//! `json: cannot unmarshal number into Go struct field Container.spec.containers.image of type string`.
//! Unknown fields are skipped; `null` fits every type. The keys of an
//! object are walked in name order (serde_json keeps no other), so of two
//! wrongly typed fields of one object, the first by name is reported where
//! Go reports the first written.

use serde_json::{Number, Value};

use super::table::{Alternative, Registry, STRING, Type, TypeId};
use super::{Error, UnmarshalTypeError, base64, quantity, time};

/// Decodes `value` into the type `ty`, for the error Go would report.
pub(super) fn decode(registry: &Registry, ty: TypeId, value: &Value) -> Result<(), Error> {
    Decoder::new(registry).run(|d| d.value(ty, value))
}

/// How Go's errors name a JSON value of the wrong type.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether Go's `strconv.ParseInt` takes the literal (what serde_json read
/// as a float was no integer literal) and it fits an `int32`.
fn fits_int32(number: &Number) -> bool {
    number
        .as_i64()
        .is_some_and(|int| i32::try_from(int).is_ok())
}

/// Whether Go's `strconv.ParseInt` takes the literal.
fn fits_int64(number: &Number) -> bool {
    number.as_i64().is_some()
}

struct Decoder<'r, 'v> {
    registry: &'r Registry,
    /// The first value of the wrong type, with where it was.
    saved: Option<Error>,
    /// The struct holding the field being decoded (`Container`).
    holder: Option<&'r str>,
    /// The fields from the root to the one being decoded.
    fields: Vec<&'v str>,
}

impl<'r, 'v> Decoder<'r, 'v> {
    fn new(registry: &'r Registry) -> Self {
        Self {
            registry,
            saved: None,
            holder: None,
            fields: Vec::new(),
        }
    }

    /// Runs a walk: its own error, or else the first value it skipped.
    fn run(mut self, walk: impl FnOnce(&mut Self) -> Result<(), Error>) -> Result<(), Error> {
        walk(&mut self)?;
        self.saved.map_or(Ok(()), Err)
    }

    /// Go's `addErrorContext`: a type error learns the field it is in.
    fn in_context(&self, error: Error) -> Error {
        match error {
            Error::Unmarshal(mut e) if self.holder.is_some() || !self.fields.is_empty() => {
                e.holder = self.holder.unwrap_or_default().to_owned();
                let mut path = self.fields.join(".");
                if !e.field.is_empty() {
                    path.push('.');
                    path.push_str(&e.field);
                }
                e.field = path;
                Error::Unmarshal(e)
            }
            other => other,
        }
    }

    /// Remembers the first value of the wrong type; the walk goes on.
    fn save(&mut self, error: Error) {
        if self.saved.is_none() {
            self.saved = Some(self.in_context(error));
        }
    }

    fn type_error(&self, value: impl Into<String>, ty: TypeId) -> Error {
        UnmarshalTypeError::new(value, self.registry.go_name(ty)).into()
    }

    fn mismatch(&mut self, value: &Value, ty: TypeId) {
        let error = self.type_error(json_type(value), ty);
        self.save(error);
    }

    fn value(&mut self, ty: TypeId, value: &'v Value) -> Result<(), Error> {
        if value.is_null() {
            return Ok(());
        }
        let registry = self.registry;
        match (registry.get(ty), value) {
            (Type::Any(_), _)
            | (Type::String, Value::String(_))
            | (Type::Bool, Value::Bool(_))
            | (Type::Float64, Value::Number(_))
            | (Type::IntOrString, Value::String(_)) => {}
            (Type::Int32, Value::Number(n)) if !fits_int32(n) => {
                self.save(self.type_error(format!("number {n}"), ty));
            }
            (Type::Int64, Value::Number(n)) if !fits_int64(n) => {
                self.save(self.type_error(format!("number {n}"), ty));
            }
            (Type::Int32 | Type::Int64, Value::Number(_)) => {}
            (Type::Bytes, Value::String(text)) => {
                if let Some(offset) = base64::corrupt_at(text.as_bytes()) {
                    self.save(Error::Base64(offset));
                }
            }
            (Type::Bytes, Value::Array(items)) => items.iter().for_each(|item| self.byte(item)),
            (Type::Struct(s), Value::Object(map)) => {
                for (key, field_value) in map {
                    let Some(&field) = s.fields.get(key) else {
                        continue;
                    };
                    let (holder, depth) = (self.holder, self.fields.len());
                    self.holder = Some(s.name());
                    self.fields.push(key);
                    self.value(field, field_value)?;
                    self.holder = holder;
                    self.fields.truncate(depth);
                }
            }
            (Type::Slice(item), Value::Array(items)) => {
                for v in items {
                    self.value(*item, v)?;
                }
            }
            (Type::Map(item), Value::Object(map)) => {
                for v in map.values() {
                    self.value(*item, v)?;
                }
            }
            (Type::IntOrString, _) => self.int_or_string(value)?,
            (Type::Quantity, _) => {
                let text = match value {
                    Value::String(s) => s.trim().to_owned(),
                    other => other.to_string(),
                };
                quantity::parse(&text)?;
            }
            (Type::Time(layout), Value::String(text)) => time::parse(*layout, text)?,
            (Type::Time(_), other) => {
                // The time types read a string first, and say so.
                return Err(self.in_context(self.type_error(json_type(other), STRING)));
            }
            (Type::SchemaOr(alternative, schema), _) => {
                self.schema_or(*alternative, *schema, value)?;
            }
            _ => self.mismatch(value, ty),
        }
        Ok(())
    }

    /// An item of a `[]byte` written as a list of numbers.
    fn byte(&mut self, item: &Value) {
        let error = match item {
            Value::Null => return,
            Value::Number(n) if n.as_u64().is_some_and(|b| b <= 255) => return,
            Value::Number(n) => format!("number {n}"),
            other => json_type(other).to_owned(),
        };
        self.save(UnmarshalTypeError::new(error, "uint8").into());
    }

    /// `IntOrString`'s decoder: anything but a string is read as an `int32`,
    /// and its error ends the walk.
    fn int_or_string(&self, value: &Value) -> Result<(), Error> {
        let read = match value {
            Value::Number(n) if fits_int32(n) => return Ok(()),
            Value::Number(n) => format!("number {n}"),
            other => json_type(other).to_owned(),
        };
        Err(self.in_context(UnmarshalTypeError::new(read, "int32").into()))
    }

    /// apiextensions' `JSONSchemaPropsOr*` decoders: a schema or list is
    /// decoded afresh, and its first error ends the walk (in this context).
    fn schema_or(
        &self,
        alternative: Alternative,
        schema: TypeId,
        value: &'v Value,
    ) -> Result<(), Error> {
        let nested = |walk: &dyn Fn(&mut Decoder<'r, 'v>) -> Result<(), Error>| {
            Decoder::new(self.registry)
                .run(walk)
                .map_err(|e| self.in_context(e))
        };
        match (alternative, value) {
            (_, Value::Object(_)) => nested(&|d| d.value(schema, value)),
            (Alternative::Bool, Value::Bool(_)) => Ok(()),
            (Alternative::Bool, _) => Err(Error::SchemaOrBool),
            (Alternative::Array, Value::Array(items)) => {
                nested(&|d| items.iter().try_for_each(|item| d.value(schema, item)))
            }
            (Alternative::StringArray, Value::Array(items)) => {
                nested(&|d| items.iter().try_for_each(|item| d.value(STRING, item)))
            }
            // Anything else is ignored.
            _ => Ok(()),
        }
    }
}
