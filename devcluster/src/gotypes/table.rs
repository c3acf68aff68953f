//! The Go types of a set of kinds, read once from the schemas of the
//! k8s-openapi structs that mirror them.

use std::collections::HashMap;

use k8s_openapi::schemars::{Schema, SchemaGenerator};
use serde_json::{Map, Value};

use super::time::Layout;

/// An index into [`Registry::types`].
pub(super) type TypeId = usize;

/// A Go type, as far as decoding tells types apart.
#[derive(Debug)]
pub(super) enum Type {
    /// `string`, and the named string types (`v1.Protocol`, ...).
    String,
    /// `[]byte`: base64 text.
    Bytes,
    Int32,
    Int64,
    Float64,
    Bool,
    /// `interface{}`, or a type whose decoder takes any JSON (apiextensions'
    /// `JSON`, `FieldsV1`), by its Go name.
    Any(&'static str),
    Struct(Struct),
    /// `[]T`.
    Slice(TypeId),
    /// `map[string]T`.
    Map(TypeId),
    /// `intstr.IntOrString`: a string, or else an `int32`.
    IntOrString,
    /// `resource.Quantity`: its own text format.
    Quantity,
    /// `metav1.Time` or `metav1.MicroTime`: a string in the layout.
    Time(Layout),
    /// apiextensions' `JSONSchemaPropsOr*`: the `JSONSchemaProps` at the id,
    /// or the alternative.
    SchemaOr(Alternative, TypeId),
}

/// What a `JSONSchemaPropsOr*` takes besides a schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Alternative {
    /// `JSONSchemaPropsOrBool`.
    Bool,
    /// `JSONSchemaPropsOrArray`: a list of schemas.
    Array,
    /// `JSONSchemaPropsOrStringArray`: a list of strings.
    StringArray,
}

/// A Go struct: its package-qualified name and its fields by JSON name.
#[derive(Debug)]
pub(super) struct Struct {
    /// `v1.PodSpec`.
    pub(super) go_name: String,
    pub(super) fields: HashMap<String, TypeId>,
}

impl Struct {
    /// The name without its package (`PodSpec`), as Go's errors name the
    /// struct holding a field.
    pub(super) fn name(&self) -> &str {
        self.go_name
            .split_once('.')
            .map_or(self.go_name.as_str(), |(_, name)| name)
    }
}

/// Where a kind's Go type is read from: the schema of the k8s-openapi struct
/// that mirrors it (`SchemaGenerator::subschema_for::<Pod>`).
pub(crate) type Mirror = fn(&mut SchemaGenerator) -> Schema;

/// The Go types of some kinds, each named type once.
#[derive(Debug)]
pub(crate) struct Registry {
    types: Vec<Type>,
    /// The root type of each kind, in the order they were given.
    roots: Vec<TypeId>,
}

// The types every schema shares, at fixed ids.
/// `string`.
pub(super) const STRING: TypeId = 0;
const BYTES: TypeId = 1;
const INT32: TypeId = 2;
const INT64: TypeId = 3;
const FLOAT64: TypeId = 4;
const BOOL: TypeId = 5;
const ANY: TypeId = 6;

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";
const APIEXTENSIONS: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1";

impl Registry {
    /// The Go types of the kinds `mirrors` read, built once for all of them.
    pub(crate) fn new(mirrors: impl IntoIterator<Item = Mirror>) -> Self {
        let mut generator = SchemaGenerator::default();
        let names: Vec<String> = mirrors
            .into_iter()
            .map(|mirror| {
                let reference = mirror(&mut generator);
                reference
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.rsplit('/').next())
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        let definitions = generator.take_definitions(false);
        let mut builder = Builder {
            definitions: &definitions,
            types: vec![
                Type::String,
                Type::Bytes,
                Type::Int32,
                Type::Int64,
                Type::Float64,
                Type::Bool,
                Type::Any("interface {}"),
            ],
            named: HashMap::new(),
        };
        let roots = names.iter().map(|name| builder.named(name)).collect();
        Self {
            types: builder.types,
            roots,
        }
    }

    /// The root type of the `index`th kind given to [`Registry::new`].
    pub(super) fn root(&self, index: usize) -> TypeId {
        self.roots[index]
    }

    pub(super) fn get(&self, id: TypeId) -> &Type {
        &self.types[id]
    }

    /// The name Go's errors give the type (`[]v1.Container`).
    pub(super) fn go_name(&self, id: TypeId) -> String {
        match self.get(id) {
            Type::String => "string".to_owned(),
            Type::Bytes => "[]uint8".to_owned(),
            Type::Int32 => "int32".to_owned(),
            Type::Int64 => "int64".to_owned(),
            Type::Float64 => "float64".to_owned(),
            Type::Bool => "bool".to_owned(),
            Type::Any(name) => (*name).to_owned(),
            Type::Struct(s) => s.go_name.clone(),
            Type::Slice(item) => format!("[]{}", self.go_name(*item)),
            Type::Map(item) => format!("map[string]{}", self.go_name(*item)),
            Type::IntOrString => "intstr.IntOrString".to_owned(),
            Type::Quantity => "resource.Quantity".to_owned(),
            Type::Time(layout) => layout.go_type().to_owned(),
            Type::SchemaOr(Alternative::Bool, _) => "v1.JSONSchemaPropsOrBool".to_owned(),
            Type::SchemaOr(Alternative::Array, _) => "v1.JSONSchemaPropsOrArray".to_owned(),
            Type::SchemaOr(Alternative::StringArray, _) => {
                "v1.JSONSchemaPropsOrStringArray".to_owned()
            }
        }
    }
}

/// Turns schemas into types, each named definition once.
struct Builder<'d> {
    definitions: &'d Map<String, Value>,
    types: Vec<Type>,
    named: HashMap<String, TypeId>,
}

impl<'d> Builder<'d> {
    fn push(&mut self, ty: Type) -> TypeId {
        self.types.push(ty);
        self.types.len() - 1
    }

    /// The type an inline schema (or a `$ref` to a definition) describes.
    fn schema(&mut self, schema: &Value) -> TypeId {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let name = reference.rsplit('/').next().unwrap_or(reference);
            return self.named(name);
        }
        let text = |key: &str| schema.get(key).and_then(Value::as_str);
        match (text("type"), text("format")) {
            (Some("string"), Some("byte")) => BYTES,
            (Some("string"), _) => STRING,
            (Some("integer"), Some("int32")) => INT32,
            (Some("integer"), _) => INT64,
            (Some("number"), _) => FLOAT64,
            (Some("boolean"), _) => BOOL,
            (Some("array"), _) => {
                let item = schema.get("items").map_or(ANY, |items| self.schema(items));
                self.push(Type::Slice(item))
            }
            (Some("object"), _) => match schema.get("additionalProperties") {
                Some(values) if values.is_object() => {
                    let item = self.schema(values);
                    self.push(Type::Map(item))
                }
                _ => ANY,
            },
            _ => ANY,
        }
    }

    /// The type of a named definition: one of the types with a decoder of
    /// their own, or a struct.
    fn named(&mut self, name: &str) -> TypeId {
        if let Some(&id) = self.named.get(name) {
            return id;
        }
        // Reserved before its fields are read: definitions are recursive
        // (`JSONSchemaProps`).
        let id = self.push(Type::Any("interface {}"));
        self.named.insert(name.to_owned(), id);
        let (package, short) = name.rsplit_once('.').unwrap_or(("", name));
        let ty = match (package, short) {
            ("io.k8s.apimachinery.pkg.util.intstr", "IntOrString") => Type::IntOrString,
            ("io.k8s.apimachinery.pkg.api.resource", "Quantity") => Type::Quantity,
            (META, "Time") => Type::Time(Layout::Rfc3339),
            (META, "MicroTime") => Type::Time(Layout::Rfc3339Micro),
            (META, "FieldsV1") => Type::Any("v1.FieldsV1"),
            ("io.k8s.apimachinery.pkg.runtime", "RawExtension") => {
                Type::Any("runtime.RawExtension")
            }
            (APIEXTENSIONS, "JSON") => Type::Any("v1.JSON"),
            (APIEXTENSIONS, "JSONSchemaPropsOrBool") => self.schema_or(Alternative::Bool),
            (APIEXTENSIONS, "JSONSchemaPropsOrArray") => self.schema_or(Alternative::Array),
            (APIEXTENSIONS, "JSONSchemaPropsOrStringArray") => {
                self.schema_or(Alternative::StringArray)
            }
            _ => self.structure(name),
        };
        self.types[id] = ty;
        id
    }

    fn schema_or(&mut self, alternative: Alternative) -> Type {
        Type::SchemaOr(
            alternative,
            self.named(&format!("{APIEXTENSIONS}.JSONSchemaProps")),
        )
    }

    fn structure(&mut self, name: &str) -> Type {
        let mut segments = name.rsplit('.');
        let short = segments.next().unwrap_or(name);
        let package = segments.next().unwrap_or_default();
        let definitions: &'d Map<String, Value> = self.definitions;
        let properties = definitions
            .get(name)
            .and_then(|d| d.get("properties"))
            .and_then(Value::as_object);
        let fields = properties
            .into_iter()
            .flatten()
            .map(|(field, schema)| (field.clone(), self.schema(schema)))
            .collect();
        Type::Struct(Struct {
            go_name: format!("{package}.{short}"),
            fields,
        })
    }
}
