//! The Python and TypeScript SDKs and the policies written with them: their
//! toolchains installed into `<target>/polyglot/` (a virtualenv with
//! componentize-py and pytest; the TypeScript SDK's `node_modules`, from its
//! lock file), their native tests run, and every policy of
//! `policies/<name>/python/<module>.py` and `policies/<name>/typescript/<name>.ts`
//! built into `<target>/polyglot/<language>/<name>.wasm`.
//!
//! Each install and each component is remembered by a stamp of what it was
//! made from (the content of its inputs), so a second run rebuilds nothing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::kube::Fnv;
use crate::{run, target_dir, workspace_root};

/// Where the toolchains and components go.
pub fn dir() -> PathBuf {
    target_dir().join("polyglot")
}

/// A language: its SDK directory, the directory a policy keeps its source
/// in, and the extension of that source.
struct Language {
    name: &'static str,
    sdk: &'static str,
    source_ext: &'static str,
}

const PYTHON: Language = Language {
    name: "python",
    sdk: "guest-sdk-python",
    source_ext: "py",
};

const TYPESCRIPT: Language = Language {
    name: "typescript",
    sdk: "guest-sdk-typescript",
    source_ext: "ts",
};

/// Installs both toolchains, runs the SDKs' and the policies' native tests,
/// and builds every policy; returns the directory of the components.
pub fn build() -> Result<PathBuf, String> {
    let python = python_toolchain()?;
    let node_sdk = typescript_toolchain()?;
    let python_dirs = policy_dirs(&PYTHON)?;
    let typescript_dirs = policy_dirs(&TYPESCRIPT)?;
    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(workspace_root().join(PYTHON.sdk).join("tests"));
    for (_, dir) in &python_dirs {
        pytest.arg(dir);
    }
    run(pytest.current_dir(workspace_root()))?;
    run(Command::new("npm")
        .args(["test", "--silent"])
        .current_dir(&node_sdk))?;
    for (_, dir) in typescript_dirs.iter().filter(|(_, dir)| has_tests(dir)) {
        run(Command::new("node")
            .arg(node_sdk.join("dist/src/cli.js"))
            .arg("test")
            .arg(dir))?;
    }
    for (name, source) in &python_dirs {
        component(&PYTHON, name, source, |out| {
            Command::new(&python)
                .args(["-m", "policyhost_sdk.componentize"])
                .arg(format!("{}:{}", module(name), class(name)))
                .arg("-o")
                .arg(out)
                .current_dir(source)
                .status()
        })?;
    }
    for (name, source) in &typescript_dirs {
        component(&TYPESCRIPT, name, source, |out| {
            Command::new("node")
                .arg(node_sdk.join("dist/src/cli.js"))
                .arg("build")
                .arg(source.join(format!("{name}.ts")))
                .arg("-o")
                .arg(out)
                .status()
        })?;
    }
    println!(
        "xtask: built {} Python and {} TypeScript policies into {}",
        python_dirs.len(),
        typescript_dirs.len(),
        dir().display()
    );
    Ok(dir())
}

/// The virtualenv's Python, with the SDK installed (editable) with its
/// build and test extras.
pub(crate) fn python_toolchain() -> Result<PathBuf, String> {
    let venv = dir().join("venv");
    let python = venv.join("bin").join("python");
    let sdk = workspace_root().join(PYTHON.sdk);
    let stamp = stamp("python", &[sdk.join("pyproject.toml")])?;
    if fresh(&venv, &stamp) && python.is_file() {
        return Ok(python);
    }
    println!(
        "xtask: installing the Python SDK and componentize-py into {}",
        venv.display()
    );
    run(Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg("--clear")
        .arg(&venv))?;
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-e",
        ])
        .arg(format!("{}[build,test]", sdk.display())))?;
    write_stamp(&venv, &stamp)?;
    Ok(python)
}

/// The TypeScript SDK's directory, its dependencies installed from its
/// lock file (componentize-qjs, jco, esbuild, TypeScript).
pub(crate) fn typescript_toolchain() -> Result<PathBuf, String> {
    let sdk = workspace_root().join(TYPESCRIPT.sdk);
    let modules = sdk.join("node_modules");
    let stamp = stamp("typescript", &[sdk.join("package-lock.json")])?;
    if !fresh(&modules, &stamp) {
        println!("xtask: installing the TypeScript SDK's dependencies (npm ci)");
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&sdk))?;
        write_stamp(&modules, &stamp)?;
    }
    Ok(sdk)
}

/// Whether a TypeScript policy's directory has tests (`*.test.ts`).
fn has_tests(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().ends_with(".test.ts"))
    })
}

/// Every `policies/<name>/<language>/` directory, by policy name.
fn policy_dirs(language: &Language) -> Result<Vec<(String, PathBuf)>, String> {
    let policies = workspace_root().join("policies");
    let mut dirs = Vec::new();
    for entry in
        fs::read_dir(&policies).map_err(|e| format!("cannot read {}: {e}", policies.display()))?
    {
        let policy = entry
            .map_err(|e| format!("cannot read {}: {e}", policies.display()))?
            .path();
        let source = policy.join(language.name);
        if source.is_dir() {
            let name = policy
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            dirs.push((name, source));
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Builds `<target>/polyglot/<language>/<name>.wasm` with `make` unless the
/// stamp of its sources and its SDK's says it is current.
fn component(
    language: &Language,
    name: &str,
    source: &Path,
    make: impl FnOnce(&Path) -> std::io::Result<std::process::ExitStatus>,
) -> Result<(), String> {
    let out_dir = dir().join(language.name);
    fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let out = out_dir.join(format!("{name}.wasm"));
    let mut inputs = source_files(source, language.source_ext)?;
    inputs.extend(source_files(
        &workspace_root().join(language.sdk).join("src"),
        language.source_ext,
    )?);
    inputs.push(workspace_root().join("wit").join("policy.wit"));
    let stamp = stamp(name, &inputs)?;
    let stamp_dir = out_dir.join(format!(".{name}"));
    if fresh(&stamp_dir, &stamp) && out.is_file() {
        return Ok(());
    }
    let status =
        make(&out).map_err(|e| format!("cannot build the {} policy {name}: {e}", language.name))?;
    if !status.success() {
        return Err(format!(
            "building the {} policy {name} failed ({status})",
            language.name
        ));
    }
    write_stamp(&stamp_dir, &stamp)
}

/// The files of `dir` (recursively, sorted) with extension `ext`, generated
/// and installed directories left out.
pub(crate) fn source_files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        let file_name = path.file_name().unwrap_or_default().to_string_lossy();
        if file_name.starts_with('.') || file_name == "__pycache__" || file_name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            files.extend(source_files(&path, ext)?);
        } else if path.extension().is_some_and(|e| e == ext) {
            files.push(path);
        }
    }
    Ok(files)
}

/// The Python module of a policy: its name with `_` for `-`.
fn module(name: &str) -> String {
    name.replace('-', "_")
}

/// The Python class of a policy: its name in UpperCamelCase.
fn class(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// A label and the content hash of `files` (names and bytes).
pub(crate) fn stamp(label: &str, files: &[PathBuf]) -> Result<String, String> {
    let mut hash = Fnv::default();
    for file in files {
        hash.write(file.as_os_str().as_encoded_bytes());
        hash.write(&[0]);
        let bytes = fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        hash.write(&(bytes.len() as u64).to_le_bytes());
        hash.write(&bytes);
    }
    Ok(format!("{label} {:016x}\n", hash.0))
}

/// Whether `dir/.stamp` holds `stamp`.
pub(crate) fn fresh(dir: &Path, stamp: &str) -> bool {
    fs::read_to_string(dir.join(".stamp")).is_ok_and(|old| old == stamp)
}

pub(crate) fn write_stamp(dir: &Path, stamp: &str) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let file = dir.join(".stamp");
    fs::write(&file, stamp).map_err(|e| format!("cannot write {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_name_gives_its_python_module_and_class() {
        assert_eq!(module("infinite-loop"), "infinite_loop");
        assert_eq!(class("infinite-loop"), "InfiniteLoop");
        assert_eq!(class("fanout"), "Fanout");
    }
}
