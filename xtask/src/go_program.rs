//! A Go program of this repository (`bench/peers/`, `tools/standard-metrics/`):
//! checked (a file `gofmt -l` lists or a finding of `go vet` fails the
//! build, so that Go code stays as clean as the Rust code), built with
//! `-trimpath` into a directory of its own under the target directory, and
//! remembered by a stamp of what decides it: the module's `go.mod` and
//! `go.sum`, every `.go` file (tests too: vet reads them) and the Go
//! version, so that a second run costs a few file reads.
//!
//! `-trimpath`, as the control plane's build: the packages a program shares
//! with it (and vet with the build) are the same entries of Go's cache, not
//! a second copy of every dependency.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::kube::Fnv;
use crate::{run, workspace_root};

/// One program: its module and where it is built.
pub struct GoProgram {
    /// The module, relative to the workspace root (`bench/peers`).
    pub module: &'static str,
    /// The binary's name.
    pub name: &'static str,
    /// Its directory: the binary and the stamp.
    pub dir: PathBuf,
    /// Anything else the build depends on, put in the stamp.
    pub also: String,
}

impl GoProgram {
    /// The built binary.
    pub fn binary(&self) -> PathBuf {
        self.dir.join(self.name)
    }

    fn module_dir(&self) -> PathBuf {
        workspace_root().join(self.module)
    }

    /// Checks and builds the program unless the stamp says the binary is
    /// current.
    pub fn build(&self) -> Result<PathBuf, String> {
        let bin = self.binary();
        let stamp_file = self.dir.join(".stamp");
        let stamp = self.stamp()?;
        if fs::read_to_string(&stamp_file).is_ok_and(|old| old == stamp) && bin.is_file() {
            return Ok(bin);
        }
        let module = self.module_dir();
        println!("xtask: checking and building {}", self.module);
        self.check_formatted(&module)?;
        run(Command::new("go")
            .current_dir(&module)
            .args(["vet", "-trimpath", "./..."]))?;
        fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        run(Command::new("go")
            .current_dir(&module)
            .args(["build", "-trimpath", "-ldflags", "-s -w", "-o"])
            .arg(&bin)
            .arg("."))?;
        fs::write(&stamp_file, stamp)
            .map_err(|e| format!("cannot write {}: {e}", stamp_file.display()))?;
        Ok(bin)
    }

    /// Fails, naming them, if `gofmt -l` lists files of `module`. gofmt
    /// comes with Go, beside the `go` command (`go env GOROOT`).
    fn check_formatted(&self, module: &Path) -> Result<(), String> {
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
                "gofmt -l lists files of {} (run `gofmt -w .` there):\n{}{}",
                self.module,
                listed.trim_end(),
                String::from_utf8_lossy(&out.stderr).trim_end()
            ));
        }
        Ok(())
    }

    /// What decides the build: the Go version, [`also`](Self::also),
    /// `go.mod`, `go.sum` and every `.go` file of the module, each with
    /// its path, hashed.
    fn stamp(&self) -> Result<String, String> {
        let go = Command::new("go")
            .arg("version")
            .output()
            .map_err(|e| format!("cannot run go (Go 1.26 or newer is needed): {e}"))?;
        let module = self.module_dir();
        let mut files = vec![module.join("go.mod"), module.join("go.sum")];
        go_files(&module, &mut files)?;
        let mut hash = Fnv::default();
        hash.write(&go.stdout);
        hash.write(self.also.as_bytes());
        for file in &files {
            let relative = file.strip_prefix(&module).unwrap_or(file);
            hash.write(relative.as_os_str().as_encoded_bytes());
            hash.write(&[0]);
            let bytes =
                fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            hash.write(&(bytes.len() as u64).to_le_bytes());
            hash.write(&bytes);
        }
        Ok(format!(
            "{} {:016x}\n{}",
            self.name,
            hash.0,
            String::from_utf8_lossy(&go.stdout)
        ))
    }
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
