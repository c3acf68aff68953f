//! The real control plane's programs, built from the Go wrapper modules in
//! `tools/kube/`: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler, kubectl and kwok.
//!
//! A build is remembered by a stamp of what decides it (the modules' `go.mod`
//! and `go.sum` and the Go version), so a second run costs a file read; a
//! changed pin rebuilds, and Go's own build cache keeps that rebuild short.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{run, target_dir, workspace_root};

/// The Kubernetes release `tools/kube/kubernetes/go.mod` pins.
pub const KUBERNETES_VERSION: &str = "v1.37.2";

/// One program: its Go module directory under `tools/kube/` and its package.
struct Program {
    module: &'static str,
    package: &'static str,
    name: &'static str,
}

const PROGRAMS: &[Program] = &[
    Program {
        module: "etcd",
        package: "go.etcd.io/etcd/server/v3",
        name: "etcd",
    },
    Program {
        module: "kwok",
        package: "sigs.k8s.io/kwok/cmd/kwok",
        name: "kwok",
    },
    Program {
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kube-apiserver",
        name: "kube-apiserver",
    },
    Program {
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kube-controller-manager",
        name: "kube-controller-manager",
    },
    Program {
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kube-scheduler",
        name: "kube-scheduler",
    },
    Program {
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kubectl",
        name: "kubectl",
    },
];

/// The directory holding the built programs.
pub fn bin_dir() -> PathBuf {
    target_dir().join("kube").join("bin")
}

/// The path of one built program.
pub fn program(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Builds every program unless the stamp says they are current.
pub fn build() -> Result<PathBuf, String> {
    let bin = bin_dir();
    let stamp_file = bin.join(".stamp");
    let stamp = stamp()?;
    let current = fs::read_to_string(&stamp_file).is_ok_and(|old| old == stamp)
        && PROGRAMS.iter().all(|p| bin.join(p.name).is_file());
    if current {
        return Ok(bin);
    }
    fs::create_dir_all(&bin).map_err(|e| format!("cannot create {}: {e}", bin.display()))?;
    for module in ["etcd", "kwok", "kubernetes"] {
        let programs: Vec<&Program> = PROGRAMS.iter().filter(|p| p.module == module).collect();
        let packages: Vec<&str> = programs.iter().map(|p| p.package).collect();
        // `-o DIR/` names each binary after its package's last element,
        // which for etcd's `server/v3` is `server`: one program is named.
        let output = match programs.as_slice() {
            [one] => bin.join(one.name),
            _ => bin.join(""),
        };
        println!(
            "xtask: building {} from tools/kube/{module}",
            packages.join(" ")
        );
        let mut go = Command::new("go");
        go.current_dir(module_dir(module))
            .args(["build", "-trimpath", "-ldflags"])
            .arg(ldflags(module))
            .arg("-o")
            .arg(output)
            .args(&packages);
        run(&mut go)?;
    }
    fs::write(&stamp_file, stamp)
        .map_err(|e| format!("cannot write {}: {e}", stamp_file.display()))?;
    Ok(bin)
}

/// Linker flags: stripped binaries; Kubernetes' own version variables set the
/// way its release build sets them, since without them the programs report
/// v0.0.0, which clients such as kubectl warn about.
fn ldflags(module: &str) -> String {
    let mut flags = String::from("-s -w");
    if module == "kubernetes" {
        let minor = KUBERNETES_VERSION.split('.').nth(1).unwrap_or_default();
        for (variable, value) in [
            (
                "k8s.io/component-base/version.gitVersion",
                KUBERNETES_VERSION,
            ),
            ("k8s.io/component-base/version.gitMajor", "1"),
            ("k8s.io/component-base/version.gitMinor", minor),
            ("k8s.io/component-base/version.gitTreeState", "clean"),
            (
                "k8s.io/client-go/pkg/version.gitVersion",
                KUBERNETES_VERSION,
            ),
        ] {
            flags.push_str(&format!(" -X {variable}={value}"));
        }
    }
    flags
}

fn module_dir(module: &str) -> PathBuf {
    workspace_root().join("tools").join("kube").join(module)
}

/// What decides the build: the Go version and every module's `go.mod` and
/// `go.sum`, hashed.
fn stamp() -> Result<String, String> {
    let modules: Vec<PathBuf> = ["etcd", "kwok", "kubernetes"]
        .into_iter()
        .map(module_dir)
        .collect();
    go_stamp(KUBERNETES_VERSION, &modules)
}

/// The stamp of a build from Go modules: `label`, a hash of every module's
/// `go.mod` and `go.sum`, and the Go version. A changed pin or Go changes it.
pub fn go_stamp(label: &str, modules: &[PathBuf]) -> Result<String, String> {
    let go = Command::new("go")
        .arg("version")
        .output()
        .map_err(|e| format!("cannot run go (Go 1.26 or newer is needed): {e}"))?;
    let mut hash = Fnv::default();
    hash.write(&go.stdout);
    for module in modules {
        for file in ["go.mod", "go.sum"] {
            hash.write(&read(&module.join(file))?);
        }
    }
    Ok(format!(
        "{label} {:016x}\n{}",
        hash.0,
        String::from_utf8_lossy(&go.stdout)
    ))
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// 64-bit FNV-1a: enough to notice a changed pin, and no dependency.
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
