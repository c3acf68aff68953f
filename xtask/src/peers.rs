//! The peers of the benchmarks: `bench/peers/`, the `fanout` policy as a
//! controller-runtime operator, built with `go build` into
//! `<target>/kube/peers/peers`.
//!
//! As the control plane's programs ([`crate::kube`]), the build is
//! remembered by a stamp of what decides it: the module's `go.mod` and
//! `go.sum`, every `.go` file and the Go version; a second run costs a few
//! file reads. It shares Go's module and build caches with the control
//! plane's build (the same `k8s.io` modules, v0.37.2, built with the same
//! `-trimpath`), so only controller-runtime and the peers' own package are
//! compiled on top of it.
//!
//! A build is checked first: a file `gofmt -l` lists or a finding of `go vet`
//! fails it, so that the peers stay as clean as the Rust code.
//!
//! The binary has a directory of its own, not `<target>/kube/bin`: the test
//! run spares the programs there after its real pass, while the control plane
//! is still up, and a peers process a test left behind must be named then.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::kube::Fnv;
use crate::{run, target_dir, workspace_root};

/// The directory of the built binary and its stamp.
pub fn dir() -> PathBuf {
    target_dir().join("kube").join("peers")
}

/// The built binary.
pub fn binary() -> PathBuf {
    dir().join("peers")
}

/// The Go module.
fn module_dir() -> PathBuf {
    workspace_root().join("bench").join("peers")
}

/// Checks and builds the peers unless the stamp says the binary is current.
pub fn build() -> Result<PathBuf, String> {
    let bin = binary();
    let stamp_file = dir().join(".stamp");
    let stamp = stamp()?;
    if fs::read_to_string(&stamp_file).is_ok_and(|old| old == stamp) && bin.is_file() {
        return Ok(bin);
    }
    let module = module_dir();
    println!("xtask: checking and building the peers from bench/peers");
    check_formatted(&module)?;
    // With -trimpath, as the build and the control plane's build: the
    // packages vet compiles are then the same entries of Go's cache as
    // theirs, not a second copy of every dependency.
    run(Command::new("go")
        .current_dir(&module)
        .args(["vet", "-trimpath", "./..."]))?;
    fs::create_dir_all(dir()).map_err(|e| format!("cannot create {}: {e}", dir().display()))?;
    run(Command::new("go")
        .current_dir(&module)
        .args(["build", "-trimpath", "-ldflags", "-s -w", "-o"])
        .arg(&bin)
        .arg("."))?;
    fs::write(&stamp_file, stamp)
        .map_err(|e| format!("cannot write {}: {e}", stamp_file.display()))?;
    Ok(bin)
}

/// Fails, naming them, if `gofmt -l` lists files of `module`. gofmt comes
/// with Go, beside the `go` command (`go env GOROOT`).
fn check_formatted(module: &Path) -> Result<(), String> {
    let root = Command::new("go")
        .args(["env", "GOROOT"])
        .output()
        .map_err(|e| format!("cannot run go (Go 1.26 or newer is needed): {e}"))?;
    let gofmt = Path::new(String::from_utf8_lossy(&root.stdout).trim())
        .join("bin")
        .join("gofmt");
    let out = Command::new(&gofmt)
        .args(["-l", "."])
        .current_dir(module)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", gofmt.display()))?;
    let listed = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !listed.trim().is_empty() {
        return Err(format!(
            "gofmt -l lists files of bench/peers (run `gofmt -w .` there):\n{}{}",
            listed.trim_end(),
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    Ok(())
}

/// What decides the build: the Go version, `go.mod`, `go.sum` and every
/// `.go` file of the module (its tests too: vet reads them), each with its
/// path, hashed.
fn stamp() -> Result<String, String> {
    let go = Command::new("go")
        .arg("version")
        .output()
        .map_err(|e| format!("cannot run go (Go 1.26 or newer is needed): {e}"))?;
    let module = module_dir();
    let mut files = vec![module.join("go.mod"), module.join("go.sum")];
    go_files(&module, &mut files)?;
    let mut hash = Fnv::default();
    hash.write(&go.stdout);
    for file in &files {
        let relative = file.strip_prefix(&module).unwrap_or(file);
        hash.write(relative.as_os_str().as_encoded_bytes());
        hash.write(&[0]);
        let bytes = fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        hash.write(&(bytes.len() as u64).to_le_bytes());
        hash.write(&bytes);
    }
    Ok(format!(
        "peers {:016x}\n{}",
        hash.0,
        String::from_utf8_lossy(&go.stdout)
    ))
}

/// Appends the `.go` files under `dir`, sorted, to `files`.
fn go_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            go_files(&path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "go") {
            files.push(path);
        }
    }
    Ok(())
}
