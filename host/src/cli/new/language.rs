//! What `policy new` does differently per language: the templates, the
//! SDK a policy depends on, the words a name may not be, and the commands
//! that test and build it.

use super::{Error, Result, Scaffold, Sdk};

/// The language of a new policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Language {
    /// A crate depending on the crate `policyhost-sdk`, built with cargo
    /// for `wasm32-wasip2`.
    Rust,
    /// A module depending on the Python package `policyhost-sdk`, built
    /// with componentize-py.
    Python,
    /// A module depending on the npm package `@policyhost/sdk`, built with
    /// componentize-qjs.
    Typescript,
}

/// The Rust crate's files: each one's path (a template too) and its template.
const RUST_FILES: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../../templates/policy/Cargo.toml.tmpl"),
    ),
    (
        ".cargo/config.toml",
        include_str!("../../../templates/policy/.cargo/config.toml.tmpl"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/policy/.gitignore.tmpl"),
    ),
    (
        "README.md",
        include_str!("../../../templates/policy/README.md.tmpl"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../templates/policy/src/lib.rs.tmpl"),
    ),
    (
        "tests/golden.rs",
        include_str!("../../../templates/policy/tests/golden.rs.tmpl"),
    ),
    (GOLDEN_PATH, GOLDEN),
];

/// The Python policy's files.
const PYTHON_FILES: &[(&str, &str)] = &[
    (
        "{{module}}.py",
        include_str!("../../../templates/policy-python/policy.py.tmpl"),
    ),
    (
        "conftest.py",
        include_str!("../../../templates/policy-python/conftest.py.tmpl"),
    ),
    (
        "requirements.txt",
        include_str!("../../../templates/policy-python/requirements.txt.tmpl"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/policy-python/.gitignore.tmpl"),
    ),
    (
        "README.md",
        include_str!("../../../templates/policy-python/README.md.tmpl"),
    ),
    (
        "tests/test_{{module}}.py",
        include_str!("../../../templates/policy-python/tests/test_policy.py.tmpl"),
    ),
    (GOLDEN_PATH, GOLDEN),
];

/// The TypeScript policy's files.
const TYPESCRIPT_FILES: &[(&str, &str)] = &[
    (
        "{{name}}.ts",
        include_str!("../../../templates/policy-typescript/policy.ts.tmpl"),
    ),
    (
        "{{name}}.test.ts",
        include_str!("../../../templates/policy-typescript/policy.test.ts.tmpl"),
    ),
    (
        "package.json",
        include_str!("../../../templates/policy-typescript/package.json.tmpl"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/policy-typescript/.gitignore.tmpl"),
    ),
    (
        "README.md",
        include_str!("../../../templates/policy-typescript/README.md.tmpl"),
    ),
    (GOLDEN_PATH, GOLDEN),
];

/// The golden case every language's template passes: the policies of the
/// three templates give the same answers.
const GOLDEN_PATH: &str = "tests/golden/reconcile-01-first-call.json";
const GOLDEN: &str =
    include_str!("../../../templates/policy/tests/golden/reconcile-01-first-call.json.tmpl");

/// Python's keywords and the modules the template imports: a module of
/// that name could not be imported, or would shadow one.
const PYTHON_RESERVED: &[&str] = &[
    "false",
    "none",
    "true",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "conftest",
    "policyhost_sdk",
    "typing",
    "pathlib",
    "pytest",
    "sys",
    "json",
    "re",
    "enum",
    "copy",
    "dataclasses",
    "abc",
    "types",
    "test",
    "tests",
];

/// JavaScript's reserved words: the policy's identifier cannot be one.
const TYPESCRIPT_RESERVED: &[&str] = &[
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "package",
    "private",
    "protected",
    "public",
    "return",
    "static",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
];

impl Language {
    /// The files of a new policy: paths and texts, both templates.
    pub(super) fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Rust => RUST_FILES,
            Self::Python => PYTHON_FILES,
            Self::Typescript => TYPESCRIPT_FILES,
        }
    }

    /// The SDK's manifest, and the line of it that names the SDK's package.
    pub(super) fn sdk_manifest(self) -> (&'static str, &'static str) {
        match self {
            Self::Rust | Self::Python => {
                let file = if self == Self::Rust {
                    "Cargo.toml"
                } else {
                    "pyproject.toml"
                };
                (file, r#"name = "policyhost-sdk""#)
            }
            Self::Typescript => ("package.json", r#""name": "@policyhost/sdk","#),
        }
    }

    /// The SDK's package, as the language's package manager names it.
    pub(super) fn sdk_package(self) -> &'static str {
        match self {
            Self::Rust | Self::Python => "policyhost-sdk",
            Self::Typescript => "@policyhost/sdk",
        }
    }

    /// The dependency on the SDK, as the policy's manifest writes it: the
    /// line of `Cargo.toml`, of `requirements.txt`, or the value in
    /// `package.json`.
    pub(super) fn sdk_dependency(self, sdk: &Sdk) -> Result<String> {
        let path = |dir: &std::path::Path| {
            dir.to_str()
                .map(str::to_owned)
                .ok_or_else(|| Error::SdkPathNotUtf8(dir.to_path_buf()))
        };
        Ok(match (self, sdk) {
            (Self::Rust, Sdk::Version(version)) => format!(r#"policyhost-sdk = "{version}""#),
            (Self::Rust, Sdk::Checkout(dir)) => format!(
                r#"policyhost-sdk = {{ path = "{}" }}"#,
                super::toml_escape(&path(dir)?)
            ),
            (Self::Python, Sdk::Version(version)) => {
                format!("policyhost-sdk[build,test]=={version}")
            }
            (Self::Python, Sdk::Checkout(dir)) => {
                let dir = path(dir)?;
                if dir.contains(['\n', '\r']) || dir.starts_with('-') {
                    return Err(Error::SdkPathUnwritable(dir.into(), "requirements.txt"));
                }
                format!("-e {dir}[build,test]")
            }
            (Self::Typescript, Sdk::Version(version)) => format!("\"{version}\""),
            (Self::Typescript, Sdk::Checkout(dir)) => {
                serde_json::Value::String(format!("file:{}", path(dir)?)).to_string()
            }
        })
    }

    /// What a name turns into that must not be a reserved word, e.g. `a crate`.
    pub(super) fn what(self) -> &'static str {
        match self {
            Self::Rust => "a crate",
            Self::Python => "a Python module",
            Self::Typescript => "a TypeScript identifier",
        }
    }

    /// Whether `scaffold`'s identifier in this language is reserved.
    pub(super) fn is_reserved(self, scaffold: &Scaffold) -> bool {
        match self {
            Self::Rust => super::RESERVED.contains(&scaffold.crate_name.as_str()),
            Self::Python => PYTHON_RESERVED.contains(&scaffold.crate_name.as_str()),
            Self::Typescript => TYPESCRIPT_RESERVED.contains(&scaffold.camel_name.as_str()),
        }
    }

    /// The commands that test and build the new policy, from its directory.
    pub(super) fn next_commands(self, scaffold: &Scaffold) -> Vec<String> {
        match self {
            Self::Rust => {
                let wasm = format!("target/wasm32-wasip2/release/{}.wasm", scaffold.crate_name);
                vec![
                    "cargo test".to_owned(),
                    "cargo build --release --target wasm32-wasip2".to_owned(),
                    format!("policyhost policy test {wasm} tests/golden"),
                ]
            }
            Self::Python => {
                let module = &scaffold.crate_name;
                vec![
                    "python3 -m venv .venv && . .venv/bin/activate".to_owned(),
                    "pip install -r requirements.txt".to_owned(),
                    "pytest".to_owned(),
                    format!(
                        "python -m policyhost_sdk.componentize {module}:{} -o {module}.wasm",
                        scaffold.type_name
                    ),
                    format!("policyhost policy test {module}.wasm tests/golden"),
                ]
            }
            Self::Typescript => {
                let name = &scaffold.name;
                vec![
                    "npm install".to_owned(),
                    "npm test".to_owned(),
                    "npm run build".to_owned(),
                    format!("policyhost policy test {name}.wasm tests/golden"),
                ]
            }
        }
    }
}
