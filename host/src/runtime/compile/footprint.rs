//! What a component asks of the compiler, read with wasmparser without
//! compiling it, and the static limits it is held to.
//!
//! Cranelift's time and memory grow with what it is given: the number and
//! size of function bodies (each is compiled on its own, its IR, register
//! allocation and machine code held at once), the locals of a function (one
//! SSA variable each), the modules, instances and canonical functions of a
//! component (each lift and lower is a compiled trampoline), and the tables,
//! memories, globals and segments the compiled code describes. A few KiB of
//! gzip'd WebAssembly can ask for gigabytes, so these are counted before a
//! single function is compiled.

use std::fmt;

use wasmparser::{ElementItems, Encoding, Parser, Payload};

/// One thing the static limits count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Measure {
    /// Functions defined (not imported) by all core modules.
    Functions,
    /// Bytes of all code sections.
    CodeBytes,
    /// Bytes of one function body.
    FunctionBytes,
    /// Locals of one function.
    Locals,
    /// Core modules, nested ones included.
    Modules,
    /// Components, the outer one and nested ones.
    Components,
    /// Levels of component and module nesting.
    Nesting,
    /// Type definitions, core and component.
    Types,
    /// Core and component instances.
    Instances,
    /// Canonical functions (lift, lower and resource built-ins).
    Canonicals,
    /// Tables defined by all core modules.
    Tables,
    /// Initial elements of one table.
    TableElements,
    /// Memories defined by all core modules.
    Memories,
    /// Globals defined by all core modules.
    Globals,
    /// Data segments of all core modules.
    DataSegments,
    /// Items of all element segments.
    ElementItems,
}

impl fmt::Display for Measure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Functions => "defined functions",
            Self::CodeBytes => "bytes of code",
            Self::FunctionBytes => "bytes of code in one function",
            Self::Locals => "locals in one function",
            Self::Modules => "core modules",
            Self::Components => "components",
            Self::Nesting => "levels of nesting",
            Self::Types => "type definitions",
            Self::Instances => "instances",
            Self::Canonicals => "canonical functions",
            Self::Tables => "tables",
            Self::TableElements => "initial elements in one table",
            Self::Memories => "memories",
            Self::Globals => "globals",
            Self::DataSegments => "data segments",
            Self::ElementItems => "element segment items",
        })
    }
}

/// The figures of a component for each [`Measure`] (totals, or for the
/// per-function and per-table measures the largest), or the limits on them.
///
/// As limits, the defaults are what the host compiles within its memory and
/// time caps with room to spare: every policy under `policies/` stays below
/// a tenth of each (a quarter of the nesting depth). `fanout`, the largest,
/// has 349 functions, 238 KiB of code, a largest body of 25 KiB and 43
/// locals at most (`every_example_policy_is_far_below_every_static_limit`
/// in `tests/all/compilation.rs` prints every figure). One function body at
/// the limit (1 MiB of straight-line code) compiles in about 1.4 s within
/// 116 MiB of address space (debug build, loaded machine), well inside the
/// compile process's default caps. Data segments are the exception to the
/// tenth: an interpreter's memory snapshot is made of them (QuickJS's, taken
/// by Wizer, has about 10,000), and each costs only its bytes in the memory
/// image, so their limit is the engines' own implementation limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Footprint {
    /// [`Measure::Functions`].
    pub functions: u64,
    /// [`Measure::CodeBytes`].
    pub code_bytes: u64,
    /// [`Measure::FunctionBytes`] (the largest body).
    pub function_bytes: u64,
    /// [`Measure::Locals`] (the function with the most).
    pub locals: u64,
    /// [`Measure::Modules`].
    pub modules: u64,
    /// [`Measure::Components`].
    pub components: u64,
    /// [`Measure::Nesting`] (the deepest).
    pub nesting: u64,
    /// [`Measure::Types`].
    pub types: u64,
    /// [`Measure::Instances`].
    pub instances: u64,
    /// [`Measure::Canonicals`].
    pub canonicals: u64,
    /// [`Measure::Tables`].
    pub tables: u64,
    /// [`Measure::TableElements`] (the largest table).
    pub table_elements: u64,
    /// [`Measure::Memories`].
    pub memories: u64,
    /// [`Measure::Globals`].
    pub globals: u64,
    /// [`Measure::DataSegments`].
    pub data_segments: u64,
    /// [`Measure::ElementItems`].
    pub element_items: u64,
}

impl Footprint {
    /// The default static limits (see the type's documentation).
    pub const LIMITS: Self = Self {
        functions: 50_000,
        code_bytes: 32 << 20,
        function_bytes: 1 << 20,
        locals: 10_000,
        modules: 64,
        components: 64,
        nesting: 8,
        types: 100_000,
        instances: 1_000,
        canonicals: 10_000,
        tables: 64,
        table_elements: 100_000,
        memories: 64,
        globals: 10_000,
        data_segments: 100_000,
        element_items: 100_000,
    };

    /// No limit at all.
    pub const UNLIMITED: Self = Self {
        functions: u64::MAX,
        code_bytes: u64::MAX,
        function_bytes: u64::MAX,
        locals: u64::MAX,
        modules: u64::MAX,
        components: u64::MAX,
        nesting: u64::MAX,
        types: u64::MAX,
        instances: u64::MAX,
        canonicals: u64::MAX,
        tables: u64::MAX,
        table_elements: u64::MAX,
        memories: u64::MAX,
        globals: u64::MAX,
        data_segments: u64::MAX,
        element_items: u64::MAX,
    };

    /// Measures `bytes` (a component or a core module), without limits.
    pub fn of(bytes: &[u8]) -> crate::runtime::Result<Self> {
        match measure(bytes, &Self::UNLIMITED) {
            Ok(footprint) => Ok(footprint),
            Err(Refused::Malformed(error)) => {
                Err(crate::runtime::Error::Corrupt(wasmtime::Error::new(error)))
            }
            Err(Refused::Over(over)) => Err(crate::runtime::Error::Corrupt(wasmtime::format_err!(
                "{over}"
            ))),
        }
    }

    const ZERO: Self = Self {
        functions: 0,
        code_bytes: 0,
        function_bytes: 0,
        locals: 0,
        modules: 0,
        components: 0,
        nesting: 0,
        types: 0,
        instances: 0,
        canonicals: 0,
        tables: 0,
        table_elements: 0,
        memories: 0,
        globals: 0,
        data_segments: 0,
        element_items: 0,
    };

    /// Every measure with its figure: the one list of them.
    #[must_use]
    pub fn figures(&self) -> [(Measure, u64); 16] {
        [
            (Measure::Functions, self.functions),
            (Measure::CodeBytes, self.code_bytes),
            (Measure::FunctionBytes, self.function_bytes),
            (Measure::Locals, self.locals),
            (Measure::Modules, self.modules),
            (Measure::Components, self.components),
            (Measure::Nesting, self.nesting),
            (Measure::Types, self.types),
            (Measure::Instances, self.instances),
            (Measure::Canonicals, self.canonicals),
            (Measure::Tables, self.tables),
            (Measure::TableElements, self.table_elements),
            (Measure::Memories, self.memories),
            (Measure::Globals, self.globals),
            (Measure::DataSegments, self.data_segments),
            (Measure::ElementItems, self.element_items),
        ]
    }

    fn get_mut(&mut self, measure: Measure) -> &mut u64 {
        match measure {
            Measure::Functions => &mut self.functions,
            Measure::CodeBytes => &mut self.code_bytes,
            Measure::FunctionBytes => &mut self.function_bytes,
            Measure::Locals => &mut self.locals,
            Measure::Modules => &mut self.modules,
            Measure::Components => &mut self.components,
            Measure::Nesting => &mut self.nesting,
            Measure::Types => &mut self.types,
            Measure::Instances => &mut self.instances,
            Measure::Canonicals => &mut self.canonicals,
            Measure::Tables => &mut self.tables,
            Measure::TableElements => &mut self.table_elements,
            Measure::Memories => &mut self.memories,
            Measure::Globals => &mut self.globals,
            Measure::DataSegments => &mut self.data_segments,
            Measure::ElementItems => &mut self.element_items,
        }
    }
}

impl Default for Footprint {
    /// [`Footprint::LIMITS`].
    fn default() -> Self {
        Self::LIMITS
    }
}

/// A static limit a component is over.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Over {
    /// What was counted.
    pub measure: Measure,
    /// Where: `the component`, or `function body 17 of core module 2`.
    pub at: String,
    /// The count, as far as it was counted (counting stops at the limit).
    pub actual: u64,
    /// The limit.
    pub limit: u64,
}

impl fmt::Display for Over {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            measure,
            at,
            actual,
            limit,
        } = self;
        write!(f, "{at} has {actual} {measure}, the limit is {limit}")
    }
}

/// Why [`measure`] stopped.
#[derive(Debug)]
pub(crate) enum Refused {
    /// A limit is exceeded.
    Over(Over),
    /// The bytes do not parse.
    Malformed(wasmparser::BinaryReaderError),
}

/// Counts what `bytes` ask of the compiler, stopping at the first figure
/// over `limits`: the walk is linear in the size of the input, and reads no
/// instruction (only section headers, counts and local declarations).
pub(crate) fn measure(bytes: &[u8], limits: &Footprint) -> Result<Footprint, Refused> {
    let mut walk = Walk {
        limits,
        seen: Footprint::ZERO,
        scopes: Vec::new(),
    };
    for payload in Parser::new(0).parse_all(bytes) {
        walk.payload(payload.map_err(Refused::Malformed)?)?;
    }
    Ok(walk.seen)
}

struct Walk<'a> {
    limits: &'a Footprint,
    seen: Footprint,
    /// The modules and components being read, innermost last.
    scopes: Vec<Scope>,
}

enum Scope {
    Component,
    /// A core module: its number (1-based, in reading order) and the
    /// functions whose bodies were read so far.
    Module {
        number: u64,
        bodies: u64,
    },
}

impl Walk<'_> {
    fn payload(&mut self, payload: Payload<'_>) -> Result<(), Refused> {
        match payload {
            Payload::Version { encoding, .. } => {
                let scope = match encoding {
                    Encoding::Module => {
                        self.add(Measure::Modules, 1)?;
                        Scope::Module {
                            number: self.seen.modules,
                            bodies: 0,
                        }
                    }
                    Encoding::Component => {
                        self.add(Measure::Components, 1)?;
                        Scope::Component
                    }
                };
                self.scopes.push(scope);
                self.largest(Measure::Nesting, self.scopes.len() as u64)?;
            }
            Payload::End(_) => {
                self.scopes.pop();
            }
            Payload::TypeSection(r) => self.add(Measure::Types, r.count().into())?,
            Payload::CoreTypeSection(r) => self.add(Measure::Types, r.count().into())?,
            Payload::ComponentTypeSection(r) => self.add(Measure::Types, r.count().into())?,
            Payload::FunctionSection(r) => self.add(Measure::Functions, r.count().into())?,
            Payload::TableSection(r) => {
                self.add(Measure::Tables, r.count().into())?;
                for table in r {
                    let table = table.map_err(Refused::Malformed)?;
                    self.largest(Measure::TableElements, table.ty.initial)?;
                }
            }
            Payload::MemorySection(r) => self.add(Measure::Memories, r.count().into())?,
            Payload::GlobalSection(r) => self.add(Measure::Globals, r.count().into())?,
            Payload::DataSection(r) => self.add(Measure::DataSegments, r.count().into())?,
            Payload::ElementSection(r) => {
                for element in r {
                    let items = match element.map_err(Refused::Malformed)?.items {
                        ElementItems::Functions(items) => items.count(),
                        ElementItems::Expressions(_, items) => items.count(),
                    };
                    self.add(Measure::ElementItems, items.into())?;
                }
            }
            Payload::CodeSectionStart { size, .. } => self.add(Measure::CodeBytes, size.into())?,
            Payload::CodeSectionEntry(body) => {
                if let Some(Scope::Module { bodies, .. }) = self.scopes.last_mut() {
                    *bodies += 1;
                }
                self.largest(Measure::FunctionBytes, body.range().len() as u64)?;
                let mut locals = 0u64;
                let mut reader = body.get_locals_reader().map_err(Refused::Malformed)?;
                for _ in 0..reader.get_count() {
                    let (count, _) = reader.read().map_err(Refused::Malformed)?;
                    locals += u64::from(count);
                    if locals > self.limits.locals {
                        break;
                    }
                }
                self.largest(Measure::Locals, locals)?;
            }
            Payload::InstanceSection(r) => self.add(Measure::Instances, r.count().into())?,
            Payload::ComponentInstanceSection(r) => {
                self.add(Measure::Instances, r.count().into())?;
            }
            Payload::ComponentCanonicalSection(r) => {
                self.add(Measure::Canonicals, r.count().into())?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Adds to a total.
    fn add(&mut self, measure: Measure, n: u64) -> Result<(), Refused> {
        let total = self.seen.get_mut(measure);
        *total = total.saturating_add(n);
        let total = *total;
        self.check(measure, total, "the component".to_owned())
    }

    /// Raises a largest-of figure.
    fn largest(&mut self, measure: Measure, n: u64) -> Result<(), Refused> {
        let largest = self.seen.get_mut(measure);
        *largest = (*largest).max(n);
        let at = match (measure, self.scopes.last()) {
            (Measure::FunctionBytes | Measure::Locals, Some(Scope::Module { number, bodies })) => {
                format!("function body {bodies} of core module {number}")
            }
            (Measure::TableElements, Some(Scope::Module { number, .. })) => {
                format!("core module {number}")
            }
            _ => "the component".to_owned(),
        };
        self.check(measure, n, at)
    }

    fn check(&self, measure: Measure, actual: u64, at: String) -> Result<(), Refused> {
        let limit = self
            .limits
            .figures()
            .into_iter()
            .find(|(m, _)| *m == measure)
            .map_or(u64::MAX, |(_, limit)| limit);
        if actual > limit {
            return Err(Refused::Over(Over {
                measure,
                at,
                actual,
                limit,
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two core modules (one in a nested component), three functions, a
    /// table of 10 elements, a memory, two globals, a data segment, two
    /// element items, 5 locals in the largest function.
    const COMPONENT: &str = r#"(component
        (core module $a
            (table 10 funcref)
            (memory 1)
            (global i32 (i32.const 0))
            (global i32 (i32.const 1))
            (func $f (local i32 i32) (local i64 i64 i64))
            (func $g)
            (elem (i32.const 0) func $f $g)
            (data (i32.const 0) "x"))
        (component
            (core module $b (func (param i32) (result i32) local.get 0)))
        (core instance (instantiate $a)))"#;

    fn footprint(wat: &str, limits: &Footprint) -> Result<Footprint, Refused> {
        measure(&wat::parse_str(wat).unwrap(), limits)
    }

    fn over(wat: &str, limits: Footprint) -> Over {
        match footprint(wat, &limits) {
            Err(Refused::Over(over)) => over,
            other => panic!("expected a limit, got {other:?}"),
        }
    }

    #[test]
    fn a_component_is_counted_through_its_nested_modules_and_components() {
        let seen = footprint(COMPONENT, &Footprint::LIMITS).unwrap();
        assert_eq!(seen.functions, 3);
        assert_eq!(seen.modules, 2);
        assert_eq!(seen.components, 2);
        assert_eq!(seen.nesting, 3);
        assert_eq!(seen.locals, 5);
        assert_eq!(seen.tables, 1);
        assert_eq!(seen.table_elements, 10);
        assert_eq!(seen.memories, 1);
        assert_eq!(seen.globals, 2);
        assert_eq!(seen.data_segments, 1);
        assert_eq!(seen.element_items, 2);
        assert_eq!(seen.instances, 1);
        assert!(seen.types >= 2, "{seen:?}");
        assert!(seen.code_bytes >= seen.function_bytes && seen.function_bytes > 0);
    }

    #[test]
    fn a_figure_over_its_limit_is_refused_naming_where() {
        let limits = Footprint {
            locals: 4,
            ..Footprint::LIMITS
        };
        assert_eq!(
            over(COMPONENT, limits),
            Over {
                measure: Measure::Locals,
                at: "function body 1 of core module 1".into(),
                actual: 5,
                limit: 4,
            }
        );
        let limits = Footprint {
            functions: 2,
            ..Footprint::LIMITS
        };
        let refused = over(COMPONENT, limits);
        assert_eq!((refused.measure, refused.actual), (Measure::Functions, 3));
        assert_eq!(
            refused.to_string(),
            "the component has 3 defined functions, the limit is 2"
        );
        let limits = Footprint {
            table_elements: 9,
            ..Footprint::LIMITS
        };
        assert_eq!(
            over(COMPONENT, limits).to_string(),
            "core module 1 has 10 initial elements in one table, the limit is 9"
        );
        let limits = Footprint {
            nesting: 2,
            ..Footprint::LIMITS
        };
        assert_eq!(over(COMPONENT, limits).measure, Measure::Nesting);
    }

    #[test]
    fn every_measure_has_a_limit_that_stops_the_walk() {
        for (measure, figure) in footprint(COMPONENT, &Footprint::LIMITS).unwrap().figures() {
            if figure == 0 {
                continue;
            }
            let mut limits = Footprint::LIMITS;
            *limits.get_mut(measure) = figure - 1;
            assert_eq!(over(COMPONENT, limits).measure, measure);
        }
    }

    #[test]
    fn an_interpreters_memory_snapshot_is_within_the_data_segment_limit() {
        // A TypeScript policy's QuickJS snapshot has 10,002 segments.
        let segments: String = (0..10_002)
            .map(|i| format!("(data (i32.const {}) \"x\")", i * 2))
            .collect();
        let module = format!("(module (memory 1) {segments})");
        let seen = footprint(&module, &Footprint::LIMITS).unwrap();
        assert_eq!(seen.data_segments, 10_002);
        let limits = Footprint {
            data_segments: 10_001,
            ..Footprint::LIMITS
        };
        assert_eq!(over(&module, limits).measure, Measure::DataSegments);
    }

    #[test]
    fn bytes_that_do_not_parse_are_malformed() {
        let mut bytes = wat::parse_str(COMPONENT).unwrap();
        bytes.truncate(bytes.len() - 10);
        assert!(matches!(
            measure(&bytes, &Footprint::LIMITS),
            Err(Refused::Malformed(_))
        ));
    }
}
