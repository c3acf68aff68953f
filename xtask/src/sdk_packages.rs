//! The three SDKs as the packages their ecosystems install, in
//! `<target>/sdk-packages/`:
//!
//! - `rust/`: the crates `policyhost-names` and `policyhost-sdk` (`.crate`
//!   files, and each unpacked beside it for a `[patch]` by path), made by
//!   `cargo package`, which packages them together and builds each from
//!   its package alone, and checked by `cargo publish --dry-run`;
//! - `python/`: the wheel and the sdist of `policyhost-sdk` (`python -m
//!   build`, in the virtualenv `polyglot` made);
//! - `typescript/`: the npm tarball of `@policyhost/sdk` (`npm pack` of
//!   its files, `dist/` built first).
//!
//! Each is made again only when a stamp of its inputs changed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::polyglot::{self, fresh, source_files, stamp, write_stamp};
use crate::{cargo, run, target_dir, workspace_root};

/// The crates the Rust SDK is published as, dependencies first.
const CRATES: &[(&str, &str)] = &[
    ("policyhost-names", "names"),
    ("policyhost-sdk", "guest-sdk"),
];

/// Where the packages go.
pub fn dir() -> PathBuf {
    target_dir().join("sdk-packages")
}

/// Builds the packages that are not current; returns [`dir`].
pub fn build() -> Result<PathBuf, String> {
    let python = polyglot::python_toolchain()?;
    let node_sdk = polyglot::typescript_toolchain()?;
    rust()?;
    python_package(&python)?;
    typescript(&node_sdk)?;
    println!("xtask: the SDKs' packages are in {}", dir().display());
    Ok(dir())
}

/// `rust/`: the `.crate` files and their contents.
fn rust() -> Result<(), String> {
    let out = dir().join("rust");
    let mut inputs = vec![workspace_root().join("Cargo.toml")];
    for (_, path) in CRATES {
        let crate_dir = workspace_root().join(path);
        inputs.push(crate_dir.join("Cargo.toml"));
        inputs.extend(source_files(&crate_dir.join("src"), "rs")?);
    }
    inputs.push(workspace_root().join("wit/policy.wit"));
    let stamp = stamp("rust-sdk", &inputs)?;
    if fresh(&out, &stamp) {
        return Ok(());
    }
    let crates: Vec<&str> = CRATES.iter().flat_map(|(name, _)| ["-p", name]).collect();
    // Packaged and built from their packages alone, then checked as
    // crates.io would take them (which leaves no `.crate` behind).
    cargo(&[&["package", "--allow-dirty", "--quiet"], &crates[..]].concat())?;
    cargo(
        &[
            &[
                "publish",
                "--dry-run",
                "--no-verify",
                "--allow-dirty",
                "--quiet",
            ],
            &crates[..],
        ]
        .concat(),
    )?;
    clear(&out)?;
    let version = workspace_version()?;
    for (name, _) in CRATES {
        let file = format!("{name}-{version}.crate");
        let packaged = target_dir().join("package").join(&file);
        fs::copy(&packaged, out.join(&file))
            .map_err(|e| format!("cannot copy {}: {e}", packaged.display()))?;
        run(Command::new("tar").arg("-xzf").arg(&file).current_dir(&out))?;
    }
    write_stamp(&out, &stamp)
}

/// `python/`: the wheel and the sdist.
fn python_package(python: &Path) -> Result<(), String> {
    let out = dir().join("python");
    let sdk = workspace_root().join("guest-sdk-python");
    let mut inputs = vec![sdk.join("pyproject.toml"), sdk.join("README.md")];
    inputs.extend(source_files(&sdk.join("src"), "py")?);
    inputs.push(workspace_root().join("wit/policy.wit"));
    let stamp = stamp("python-sdk", &inputs)?;
    if fresh(&out, &stamp) {
        return Ok(());
    }
    clear(&out)?;
    run(Command::new(python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "build==1.3.0",
    ]))?;
    run(Command::new(python)
        .args(["-m", "build", "--sdist", "--wheel", "--outdir"])
        .arg(&out)
        .arg(&sdk))?;
    write_stamp(&out, &stamp)
}

/// `typescript/`: the npm tarball. `npm pack` leaves symbolic links out,
/// and the package's WIT file and licence are links to the repository's:
/// the package's files are copied (links followed) into a staging
/// directory, after `npm run build`, and packed from there.
fn typescript(node_sdk: &Path) -> Result<(), String> {
    let out = dir().join("typescript");
    let mut inputs = vec![
        node_sdk.join("package.json"),
        node_sdk.join("package-lock.json"),
        node_sdk.join("README.md"),
    ];
    inputs.extend(source_files(&node_sdk.join("src"), "ts")?);
    inputs.push(workspace_root().join("wit/policy.wit"));
    let stamp = stamp("typescript-sdk", &inputs)?;
    if fresh(&out, &stamp) {
        return Ok(());
    }
    clear(&out)?;
    run(Command::new("npm")
        .args(["run", "build", "--silent"])
        .current_dir(node_sdk))?;
    let staging = dir().join("typescript-staging");
    clear(&staging)?;
    for file in ["package.json", "README.md", "LICENSE", "wit", "dist/src"] {
        copy_following_links(&node_sdk.join(file), &staging.join(file))?;
    }
    run(Command::new("npm")
        .args(["pack", "--silent", "--ignore-scripts", "--pack-destination"])
        .arg(&out)
        .current_dir(&staging))?;
    write_stamp(&out, &stamp)
}

/// Copies `from` (a file or a directory, recursively) to `to`, each link
/// replaced by what it points at.
fn copy_following_links(from: &Path, to: &Path) -> Result<(), String> {
    if from.is_dir() {
        fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
        let entries =
            fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", from.display()))?;
            copy_following_links(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// Empties `dir` (packages of another version must not linger there).
fn clear(dir: &Path) -> Result<(), String> {
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    }
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// The workspace's version, which both crates take.
fn workspace_version() -> Result<String, String> {
    let manifest = workspace_root().join("Cargo.toml");
    let text = fs::read_to_string(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    text.lines()
        .skip_while(|line| line.trim() != "[workspace.package]")
        .find_map(|line| {
            let value = line.trim().strip_prefix("version")?.trim_start();
            Some(value.strip_prefix('=')?.trim().trim_matches('"').to_owned())
        })
        .ok_or_else(|| {
            format!(
                "no version in [workspace.package] of {}",
                manifest.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_version_is_read_from_its_package_table() {
        let version = workspace_version().expect("a version");
        assert_eq!(version.split('.').count(), 3, "{version}");
        assert!(
            version.split('.').all(|n| n.parse::<u32>().is_ok()),
            "{version}"
        );
    }
}
