//! `policyhost policy new`: a policy, in Rust, Python or TypeScript
//! ([`Language`]), that builds and passes its tests as generated.
//!
//! Its files are the templates under `host/templates/policy/` (Rust),
//! `policy-python/` and `policy-typescript/`, with a few placeholders filled
//! in, in paths too: `{{name}}` (the policy and package name), `{{crate}}`
//! and `{{module}}` (the name as a Rust or Python identifier), `{{camel}}`
//! (as a TypeScript one), `{{Type}}` (the policy type), `{{sdk}}` (the
//! dependency on the SDK, as the manifest writes it: by version, or with
//! `--sdk` by the path of a checkout) and the versions of serde and
//! serde_json. Those versions are the workspace's own (a unit test holds
//! them to `Cargo.lock`), so a machine that built this workspace has every
//! dependency in its cargo cache and the new crate builds `--offline`.
//!
//! The SDK's version is this binary's: the SDKs and the host are released
//! together, and an SDK's version names the world it builds for (0.1.z:
//! `policyhost:reconcile@0.1.0`), so a generated policy is one this host
//! serves.
//!
//! The golden case in the templates, the same for the three languages, is
//! what the generated policy returns:
//! it was written by the SDK's harness (`POLICYHOST_BLESS=1 cargo test` in a
//! generated crate) and checked in; `tests/all/scaffold.rs` generates a
//! crate and runs its tests, builds its component and publishes it.

mod language;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use policyhost::policies::configmap;

use super::terminal::println;

pub(crate) use language::Language;

/// Arguments of `policy new`.
#[derive(Debug, Args)]
pub(crate) struct NewArgs {
    /// The policy's name, as DataJobs name it in `spec.policy`; also the
    /// crate's name (`-` becomes `_` in the `.wasm` file's name).
    name: String,
    /// The directory to create the crate in; default `./NAME`. It must not
    /// exist or be empty: nothing is overwritten.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Depend on the SDK in this directory of a policyhost checkout (its
    /// `guest-sdk/`, `guest-sdk-python/` or `guest-sdk-typescript/`), to
    /// work on the SDK and a policy together; default: the SDK's package
    /// of this binary's version, from the language's registry.
    #[arg(long, value_name = "PATH")]
    sdk: Option<PathBuf>,
    /// The policy's language.
    #[arg(long, value_enum, default_value_t = Language::Rust)]
    lang: Language,
}

/// The SDKs' version a new policy depends on: this binary's.
pub(crate) const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The serde the generated crate depends on: the workspace's, from `Cargo.lock`.
const SERDE_VERSION: &str = "1.0.229";
/// The serde_json its tests depend on: the workspace's, from `Cargo.lock`.
const SERDE_JSON_VERSION: &str = "1.0.154";

/// Names a crate cannot take: Rust's keywords (strict and reserved, as of
/// edition 2024), the crates of Rust's standard library, and the crates the
/// generated code names (a policy crate called `serde` could not name serde).
/// Compared after `-` becomes `_`.
const RESERVED: &[&str] = &[
    "abstract",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "const",
    "continue",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
    "alloc",
    "core",
    "proc_macro",
    "std",
    "test",
    "policyhost_sdk",
    "serde",
    "serde_json",
];

/// Why `policy new` created nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The name is not a policy name: the rule `policy push` and the host
    /// apply ([`configmap::check_name`]).
    #[error(transparent)]
    PolicyName(#[from] configmap::Error),
    /// A policy name that starts with a digit, which no crate, module or
    /// identifier name may.
    #[error("`{0}` cannot name {1}: it starts with a digit")]
    LeadingDigit(String, &'static str),
    /// A policy name that is a keyword of the language or the name of a
    /// crate or module the policy or the language uses.
    #[error("`{0}` cannot name {1}: it is a keyword or the name of a package the policy uses")]
    Reserved(String, &'static str),
    /// The crate's directory exists and is not an empty directory.
    #[error("{} already exists and is not an empty directory; nothing was written", .0.display())]
    NotEmpty(PathBuf),
    /// `--sdk` names no SDK.
    #[error("{} is not the policyhost SDK: no {} of the package `{}` there", .0.display(), .1, .2)]
    NotSdk(PathBuf, &'static str, &'static str),
    /// The SDK's path cannot be written in a manifest.
    #[error("the SDK's path {} is not UTF-8, which the policy's manifest needs", .0.display())]
    SdkPathNotUtf8(PathBuf),
    /// The SDK's path cannot be written in this manifest (a line break, a
    /// leading `-` in `requirements.txt`).
    #[error("the SDK's path {} cannot be written in {}", .0.display(), .1)]
    SdkPathUnwritable(PathBuf, &'static str),
    /// Reading or writing the file system failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was being done: `read`, `create`, `write`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// An [`Error::Io`] maker for `map_err`.
    fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// The SDK a new policy depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sdk {
    /// The package of this version, from the language's registry.
    Version(&'static str),
    /// The SDK in this directory of a checkout (absolute).
    Checkout(PathBuf),
}

impl std::fmt::Display for Sdk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Version(version) => write!(f, "version {version}"),
            Self::Checkout(dir) => write!(f, "the checkout's {}", dir.display()),
        }
    }
}

pub(crate) fn run(args: &NewArgs) -> anyhow::Result<ExitCode> {
    let scaffold = Scaffold::new(&args.name, args.lang)?;
    let sdk = match &args.sdk {
        Some(dir) => Sdk::Checkout(checkout(dir, args.lang)?),
        None => Sdk::Version(SDK_VERSION),
    };
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let files = scaffold.files(&sdk)?;
    write(&dir, &files)?;
    println!("created the policy `{}` in {}:", args.name, dir.display());
    for (path, _) in &files {
        println!("  {path}");
    }
    println!("the SDK it depends on: {} {sdk}", args.lang.sdk_package());
    println!("next:");
    println!("  cd {}", dir.display());
    for command in args.lang.next_commands(&scaffold) {
        println!("  {command}");
    }
    println!("README.md has these and the commands to publish it.");
    Ok(ExitCode::SUCCESS)
}

/// The SDK's directory `given`, absolute, once its manifest names the
/// SDK's package.
fn checkout(given: &Path, language: Language) -> Result<PathBuf> {
    let (file, package_line) = language.sdk_manifest();
    let not_sdk = |dir: &Path| Error::NotSdk(dir.to_path_buf(), file, language.sdk_package());
    let dir = std::fs::canonicalize(given).map_err(|_| not_sdk(given))?;
    let text = std::fs::read_to_string(dir.join(file)).map_err(|_| not_sdk(&dir))?;
    if !text.lines().any(|line| line.trim() == package_line) {
        return Err(not_sdk(&dir));
    }
    Ok(dir)
}

/// A new policy's names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Scaffold {
    /// Its language.
    language: Language,
    /// The policy and package name, e.g. `my-policy`.
    name: String,
    /// The crate's Rust name, and the Python module's, e.g. `my_policy`.
    crate_name: String,
    /// The TypeScript identifier, e.g. `myPolicy`.
    camel_name: String,
    /// The policy type, e.g. `MyPolicy`.
    type_name: String,
}

impl Scaffold {
    /// Checks `name` and derives the others from it.
    fn new(name: &str, language: Language) -> Result<Self> {
        configmap::check_name(name)?;
        let type_name = type_name(name, language);
        let scaffold = Self {
            language,
            name: name.to_owned(),
            crate_name: crate_name(name),
            camel_name: camel_name(&type_name),
            type_name,
        };
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(Error::LeadingDigit(name.to_owned(), language.what()));
        }
        if language.is_reserved(&scaffold) {
            return Err(Error::Reserved(name.to_owned(), language.what()));
        }
        Ok(scaffold)
    }

    /// Every file of the policy, depending on `sdk`: its path in the
    /// policy's directory and its text.
    fn files(&self, sdk: &Sdk) -> Result<Vec<(String, String)>> {
        let sdk = self.language.sdk_dependency(sdk)?;
        let values = [
            ("name", self.name.as_str()),
            ("crate", self.crate_name.as_str()),
            ("module", self.crate_name.as_str()),
            ("camel", self.camel_name.as_str()),
            ("Type", self.type_name.as_str()),
            ("sdk", sdk.as_str()),
            ("serde", SERDE_VERSION),
            ("serde_json", SERDE_JSON_VERSION),
        ];
        Ok(self
            .language
            .files()
            .iter()
            .map(|&(path, template)| (render(path, &values), render(template, &values)))
            .collect())
    }
}

/// The Rust name of the crate `name`: `my-policy` is `my_policy`.
fn crate_name(name: &str) -> String {
    name.replace('-', "_")
}

/// The policy type of `name`, in UpperCamelCase (`my-policy` is `MyPolicy`),
/// with `Policy` appended while it is a word of the templates: `job` would
/// be `Job`, the SDK's type the template imports.
fn type_name(name: &str, language: Language) -> String {
    let mut type_name: String = name
        .split('-')
        .flat_map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase())
                .into_iter()
                .chain(chars)
        })
        .collect();
    let taken = template_words(language);
    while taken.contains(type_name.as_str()) || taken.contains(camel_name(&type_name).as_str()) {
        type_name.push_str("Policy");
    }
    type_name
}

/// The policy type as a TypeScript identifier: `MyPolicy` is `myPolicy`.
fn camel_name(type_name: &str) -> String {
    let mut chars = type_name.chars();
    chars
        .next()
        .map(|first| first.to_ascii_lowercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// Every word (identifier) of a language's templates.
fn template_words(language: Language) -> BTreeSet<&'static str> {
    language
        .files()
        .iter()
        .flat_map(|(_, template)| template.split(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
        .filter(|word| !word.is_empty())
        .collect()
}

/// `text` as the contents of a TOML basic string (`"..."`).
fn toml_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => escaped.push_str("\\\""),
            '\\' => escaped.push_str("\\\\"),
            c if c.is_control() => escaped.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => escaped.push(c),
        }
    }
    escaped
}

/// `template` with each `{{key}}` of `values` replaced by its value.
fn render(template: &str, values: &[(&str, &str)]) -> String {
    values
        .iter()
        .fold(template.to_owned(), |text, (key, value)| {
            text.replace(&format!("{{{{{key}}}}}"), value)
        })
}

/// Writes `files` into `dir`, which must not exist or be empty. Files are
/// created new, never overwritten.
fn write(dir: &Path, files: &[(String, String)]) -> Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::NotEmpty(dir.to_path_buf()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(Error::NotEmpty(dir.to_path_buf()));
        }
        Err(e) => return Err(Error::io("read", dir)(e)),
    }
    for (relative, text) in files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(Error::io("create", parent))?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut file| file.write_all(text.as_bytes()))
            .map_err(Error::io("write", &path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks of a Rust policy's name, alone.
    fn check_rust_name(name: &str) -> Result<()> {
        Scaffold::new(name, Language::Rust).map(|_| ())
    }

    fn scaffold(name: &str) -> Scaffold {
        Scaffold::new(name, Language::Rust).unwrap()
    }

    fn files(name: &str) -> Vec<(String, String)> {
        scaffold(name).files(&Sdk::Version(SDK_VERSION)).unwrap()
    }

    fn in_checkout(dir: &str) -> Sdk {
        Sdk::Checkout(PathBuf::from(dir))
    }

    /// The text of the file `name` of `files`.
    fn file<'a>(files: &'a [(String, String)], name: &str) -> &'a str {
        files
            .iter()
            .find(|(path, _)| path == name)
            .map(|(_, text)| text.as_str())
            .unwrap_or_else(|| panic!("no {name}"))
    }

    /// A directory of this test's own under cargo's `<target>/tmp` (a unit
    /// test has no CARGO_TARGET_TMPDIR; this binary is
    /// `<target>/<profile>/deps/<name>`).
    fn scratch(test: &str) -> PathBuf {
        let exe = std::env::current_exe().unwrap();
        let dir = exe
            .ancestors()
            .nth(3)
            .unwrap()
            .join("tmp")
            .join(format!("policyhost-new-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_name_the_host_refuses_is_refused_with_the_host_s_message() {
        for name in [
            "My-Policy",
            "my_policy",
            "-policy",
            "policy-",
            "",
            &"a".repeat(64),
        ] {
            let error = Scaffold::new(name, Language::Rust).unwrap_err();
            assert!(
                matches!(
                    error,
                    Error::PolicyName(configmap::Error::InvalidName(ref n)) if n == name
                ),
                "{name}: {error:?}"
            );
        }
        assert_eq!(
            Error::from(configmap::check_name("My-Policy").unwrap_err()).to_string(),
            "`My-Policy` is not a valid policy name (lowercase letters, digits and `-`, at most 63, starting and ending with a letter or digit)"
        );
    }

    #[test]
    fn a_policy_name_that_cannot_name_a_crate_is_refused() {
        let error = check_rust_name("7zip").unwrap_err();
        assert!(matches!(error, Error::LeadingDigit(ref n, _) if n == "7zip"));
        assert_eq!(
            error.to_string(),
            "`7zip` cannot name a crate: it starts with a digit"
        );
        for name in [
            "fn",
            "self",
            "gen",
            "test",
            "std",
            "proc-macro",
            "serde",
            "serde-json",
            "policyhost-sdk",
        ] {
            assert!(
                matches!(check_rust_name(name), Err(Error::Reserved(ref n, _)) if n == name),
                "{name}"
            );
        }
        assert_eq!(
            Error::Reserved("fn".into(), "a crate").to_string(),
            "`fn` cannot name a crate: it is a keyword or the name of a package the policy uses"
        );
        for name in ["my-policy", "a", "etl2", "x--y", "serde-tools", "function"] {
            assert!(check_rust_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn names_become_a_crate_name_and_a_type_the_templates_do_not_use() {
        let names = scaffold("my-policy");
        assert_eq!(
            (names.crate_name.as_str(), names.type_name.as_str()),
            ("my_policy", "MyPolicy")
        );
        assert_eq!(scaffold("etl2-x--y").type_name, "Etl2XY");
        // The SDK's `Job` and `Status` are imported by the template; `Policy`
        // is the trait, `PolicyPolicy` free.
        assert_eq!(scaffold("job").type_name, "JobPolicy");
        assert_eq!(scaffold("status").type_name, "StatusPolicy");
        assert_eq!(scaffold("policy").type_name, "PolicyPolicy");
    }

    #[test]
    fn every_placeholder_is_filled_in() {
        let files = files("my-policy");
        for (path, text) in &files {
            assert!(!text.contains("{{"), "{path} keeps a placeholder:\n{text}");
        }
        let file = |name: &str| file(&files, name);
        let manifest = file("Cargo.toml");
        assert!(manifest.contains("name = \"my-policy\"\n"), "{manifest}");
        assert!(
            manifest.contains(&format!("\npolicyhost-sdk = \"{SDK_VERSION}\"\n")),
            "{manifest}"
        );
        assert!(manifest.contains(&format!(r#"serde = {{ version = "{SERDE_VERSION}""#)));
        assert!(
            manifest.contains("\n[workspace]\n"),
            "a workspace of its own"
        );
        assert!(file("tests/golden.rs").contains("assert_golden_dir::<my_policy::MyPolicy>"));
        assert!(file("src/lib.rs").contains("policyhost_sdk::export!(MyPolicy);"));
        assert!(file("README.md").contains(
            "policyhost policy push target/wasm32-wasip2/release/my_policy.wasm --name my-policy --allowed-namespaces NS --wait\n"
        ));
    }

    #[test]
    fn every_language_fills_in_every_placeholder_of_its_paths_and_texts() {
        for language in [Language::Rust, Language::Python, Language::Typescript] {
            let scaffold = Scaffold::new("my-policy", language).unwrap();
            for (path, text) in scaffold.files(&in_checkout("/src/sdk")).unwrap() {
                assert!(
                    !path.contains("{{") && !text.contains("{{"),
                    "{language:?} {path}"
                );
            }
        }
        let python = Scaffold::new("my-policy", Language::Python).unwrap();
        let paths: Vec<String> = python
            .files(&in_checkout("/sdk"))
            .unwrap()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert!(paths.contains(&"my_policy.py".to_owned()), "{paths:?}");
        assert!(
            paths.contains(&"tests/test_my_policy.py".to_owned()),
            "{paths:?}"
        );
        let typescript = Scaffold::new("my-policy", Language::Typescript).unwrap();
        assert_eq!(typescript.camel_name, "myPolicy");
        let files = typescript.files(&in_checkout("/sdk")).unwrap();
        let source = files
            .iter()
            .find(|(p, _)| p == "my-policy.ts")
            .map(|(_, t)| t)
            .unwrap();
        assert!(
            source.contains("export const myPolicy: Policy<Params>"),
            "{source}"
        );
    }

    #[test]
    fn each_language_refuses_its_own_reserved_words() {
        let refused = |name, language| matches!(Scaffold::new(name, language), Err(Error::Reserved(ref n, _)) if n == name);
        assert!(refused("import", Language::Python));
        assert!(refused("policyhost-sdk", Language::Python));
        assert!(refused("delete", Language::Typescript));
        assert!(!refused("import", Language::Rust));
        assert!(refused("fn", Language::Rust));
        // A TypeScript name the template uses is taken: `build` is imported.
        let build = Scaffold::new("build", Language::Typescript).unwrap();
        assert_eq!(build.camel_name, "buildPolicy");
        assert_eq!(
            Error::LeadingDigit("7up".into(), Language::Python.what()).to_string(),
            "`7up` cannot name a Python module: it starts with a digit"
        );
    }

    #[test]
    fn render_replaces_each_placeholder_everywhere_and_nothing_else() {
        assert_eq!(
            render(
                "{{name}} {{crate}}.wasm {{name}} {{other}} {x}",
                &[("name", "a-b"), ("crate", "a_b")]
            ),
            "a-b a_b.wasm a-b {{other}} {x}"
        );
    }

    #[test]
    fn each_language_depends_on_the_sdk_by_this_version_or_a_checkout_s_path() {
        let dependency = |language: Language, sdk: &Sdk| {
            let files = Scaffold::new("p", language).unwrap().files(sdk).unwrap();
            let manifest = match language {
                Language::Rust => "Cargo.toml",
                Language::Python => "requirements.txt",
                Language::Typescript => "package.json",
            };
            file(&files, manifest).to_owned()
        };
        let version = Sdk::Version("9.8.7");
        assert!(dependency(Language::Rust, &version).contains("\npolicyhost-sdk = \"9.8.7\"\n"));
        assert!(
            dependency(Language::Python, &version)
                .lines()
                .any(|line| line == "policyhost-sdk[build,test]==9.8.7")
        );
        let package: serde_json::Value =
            serde_json::from_str(&dependency(Language::Typescript, &version)).unwrap();
        assert_eq!(package["devDependencies"]["@policyhost/sdk"], "9.8.7");
        assert_eq!(package["name"], "p");

        let sdk = in_checkout(r#"/home/a "b"\c"#);
        assert!(
            dependency(Language::Rust, &sdk)
                .contains(r#"policyhost-sdk = { path = "/home/a \"b\"\\c" }"#)
        );
        assert!(
            dependency(Language::Python, &sdk)
                .lines()
                .any(|line| line == r#"-e /home/a "b"\c[build,test]"#)
        );
        let package: serde_json::Value =
            serde_json::from_str(&dependency(Language::Typescript, &sdk)).unwrap();
        assert_eq!(
            package["devDependencies"]["@policyhost/sdk"],
            r#"file:/home/a "b"\c"#
        );
        assert_eq!(toml_escape("a\tb"), "a\\u0009b");
        for unwritable in ["/a\nb", "-r/etc/passwd"] {
            let error = Scaffold::new("p", Language::Python)
                .unwrap()
                .files(&in_checkout(unwritable))
                .unwrap_err();
            assert!(matches!(error, Error::SdkPathUnwritable(..)), "{error:?}");
        }
    }

    #[test]
    fn the_sdks_versions_are_this_binary_s() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
        assert!(
            read("guest-sdk-python/src/policyhost_sdk/__init__.py")
                .contains(&format!("\n__version__ = \"{SDK_VERSION}\"\n"))
        );
        let package: serde_json::Value =
            serde_json::from_str(&read("guest-sdk-typescript/package.json")).unwrap();
        assert_eq!(package["version"], SDK_VERSION);
        // The Rust SDK takes the workspace's version, as this binary does.
        assert!(read("guest-sdk/Cargo.toml").contains("\nversion.workspace = true\n"));
    }

    #[test]
    fn an_sdk_path_that_is_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStrExt as _;
        let sdk = Path::new(std::ffi::OsStr::from_bytes(b"/src/\xff/guest-sdk"));
        let error = scaffold("p")
            .files(&Sdk::Checkout(sdk.to_path_buf()))
            .unwrap_err();
        assert!(
            matches!(error, Error::SdkPathNotUtf8(ref p) if p == sdk),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "the SDK's path /src/\u{FFFD}/guest-sdk is not UTF-8, which the policy's manifest needs"
        );
    }

    #[test]
    fn a_file_system_error_names_what_was_done_to_which_path_and_keeps_its_cause() {
        let error = Error::io("write", Path::new("p/Cargo.toml"))(std::io::Error::from(
            std::io::ErrorKind::PermissionDenied,
        ));
        assert_eq!(error.to_string(), "cannot write p/Cargo.toml");
        let cause = std::error::Error::source(&error).unwrap();
        assert_eq!(cause.to_string(), "permission denied");
    }

    #[test]
    fn the_serde_versions_are_the_workspace_s_so_the_crate_builds_offline() {
        let lock = include_str!("../../../../Cargo.lock");
        for (name, version) in [("serde", SERDE_VERSION), ("serde_json", SERDE_JSON_VERSION)] {
            assert!(
                lock.contains(&format!("name = \"{name}\"\nversion = \"{version}\"\n")),
                "{name} {version} is not the version in Cargo.lock: set it in cli/new.rs"
            );
        }
    }

    #[test]
    fn every_template_file_is_generated() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/policy");
        let mut found = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let relative = path.strip_prefix(&root).unwrap().to_str().unwrap();
                    found.push(relative.strip_suffix(".tmpl").unwrap().to_owned());
                }
            }
        }
        found.sort();
        let mut listed: Vec<_> = Language::Rust
            .files()
            .iter()
            .map(|(path, _)| (*path).to_owned())
            .collect();
        listed.sort();
        assert_eq!(found, listed);
    }

    #[test]
    fn a_checkout_is_the_sdk_only_where_its_manifest_names_the_package() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (language, dir) in [
            (Language::Rust, "guest-sdk"),
            (Language::Python, "guest-sdk-python"),
            (Language::Typescript, "guest-sdk-typescript"),
        ] {
            let sdk = checkout(&root.join(dir), language).unwrap();
            assert!(sdk.is_absolute() && sdk.ends_with(dir), "{sdk:?}");
        }
        let elsewhere = Path::new(env!("CARGO_MANIFEST_DIR"));
        let error = checkout(elsewhere, Language::Rust).unwrap_err();
        assert!(matches!(error, Error::NotSdk(..)), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!(
                "{} is not the policyhost SDK: no Cargo.toml of the package `policyhost-sdk` there",
                elsewhere.display()
            )
        );
        assert!(matches!(
            checkout(Path::new("/nonexistent/guest-sdk"), Language::Typescript),
            Err(Error::NotSdk(_, "package.json", "@policyhost/sdk"))
        ));
    }

    #[test]
    fn an_existing_non_empty_directory_is_refused_and_left_as_it_was() {
        let dir = scratch("non-empty");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Cargo.toml"), "mine").unwrap();
        let error = write(&dir, &files("p")).unwrap_err();
        assert!(
            matches!(error, Error::NotEmpty(ref d) if *d == dir),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "{} already exists and is not an empty directory; nothing was written",
                dir.display()
            )
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("Cargo.toml")).unwrap(),
            "mine"
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);

        let file = dir.join("Cargo.toml");
        assert!(matches!(write(&file, &[]), Err(Error::NotEmpty(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_empty_or_missing_directory_gets_every_file() {
        let dir = scratch("empty");
        std::fs::create_dir_all(&dir).unwrap();
        let files = files("p");
        write(&dir, &files).unwrap();
        for (path, text) in &files {
            assert_eq!(&std::fs::read_to_string(dir.join(path)).unwrap(), text);
        }
        let nested = dir.join("a/b");
        write(&nested, &files).unwrap();
        assert!(nested.join("tests/golden.rs").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
