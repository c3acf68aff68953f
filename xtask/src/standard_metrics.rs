//! The reference of controller-runtime's standard metrics:
//! `tools/standard-metrics/`, two Go programs, `families` (on controller-runtime
//! and client-go) and `dashboards` (on Prometheus' own scrape parser and
//! PromQL engine), built into `<target>/standard-metrics/{families,dashboards}/`,
//! and beside them kubebuilder's Grafana dashboards, the Go templates of its
//! grafana plugin, copied into `<target>/standard-metrics/kubebuilder/`. The
//! tests hold the controller-runtime names policyhost exports against the
//! families the real controller-runtime registers and against the queries of
//! the dashboards kubebuilder scaffolds, so that neither is a copy kept by
//! hand.
//!
//! The program is checked and built as every Go program of the repository
//! is ([`crate::go_program`]); the templates are copied at each run (from
//! Go's module cache, a few milliseconds).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::go_program::GoProgram;
use crate::{target_dir, workspace_root};

/// The kubebuilder release whose Grafana dashboards the tests check against:
/// it scaffolds projects on controller-runtime v0.25 (v0.25.0), the minor
/// release `tools/standard-metrics/families/go.mod` pins (v0.25.3). Its module is
/// fetched into Go's module cache by `go mod download`, not required by the
/// tool: the tool reads the templates it is given.
pub const KUBEBUILDER: &str = "v4.16.0";

/// The dashboards' templates in kubebuilder's module: the controller-runtime
/// metrics' dashboard and the resources' (CPU, memory) one.
const TEMPLATES_DIR: &str = "pkg/plugins/optional/grafana/v1alpha/scaffolds/internal/templates";
const TEMPLATES: [&str; 2] = ["runtime.go", "resources.go"];

/// The directory of the binary, its stamp and the templates.
fn dir() -> PathBuf {
    target_dir().join("standard-metrics")
}

/// The copied templates: `runtime.go` and `resources.go`.
pub fn templates_dir() -> PathBuf {
    dir().join("kubebuilder")
}

/// Checks and builds the two programs unless their stamps say they are
/// current, and copies kubebuilder's templates beside them: `families`, a
/// module pinned as `bench/peers` is, so that its build is mostly the
/// peers' cache, and `dashboards`, on Prometheus alone (whose newer
/// client_golang and golang.org/x would make the k8s.io packages compile
/// again if both were one module). Returns the directory holding both.
pub fn build() -> Result<PathBuf, String> {
    let program = |name: &'static str, module: &'static str, also: String| GoProgram {
        module,
        name,
        dir: dir().join(name),
        also,
    };
    program("families", "tools/standard-metrics/families", String::new()).build()?;
    let dashboards = program(
        "dashboards",
        "tools/standard-metrics/dashboards",
        format!("kubebuilder {KUBEBUILDER}"),
    );
    dashboards.build()?;
    copy_templates(&workspace_root().join(dashboards.module))?;
    Ok(dir())
}

/// Copies the dashboards' templates of kubebuilder [`KUBEBUILDER`] from Go's
/// module cache, where `go mod download` (run in `module`, so with its
/// GOPROXY and GOFLAGS) puts the module if it is not there yet.
fn copy_templates(module: &Path) -> Result<(), String> {
    let wanted = format!("sigs.k8s.io/kubebuilder/v4@{KUBEBUILDER}");
    let out = Command::new("go")
        .current_dir(module)
        .args(["mod", "download", "-json", &wanted])
        .output()
        .map_err(|e| format!("cannot run go mod download {wanted}: {e}"))?;
    let json = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "go mod download {wanted} failed with {}:\n{}{}",
            out.status,
            json.trim_end(),
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    let module_root = json_string_field(&json, "Dir")
        .ok_or_else(|| format!("go mod download -json {wanted} names no Dir:\n{json}"))?;
    let from = Path::new(&module_root).join(TEMPLATES_DIR);
    let to = templates_dir();
    fs::create_dir_all(&to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    for name in TEMPLATES {
        // Read and written rather than `fs::copy`, which would carry over the
        // module cache's read-only mode and so stop the next copy.
        let source = from.join(name);
        let bytes = fs::read(&source).map_err(|e| {
            format!(
                "cannot read {} (kubebuilder {KUBEBUILDER}'s dashboard template): {e}",
                source.display()
            )
        })?;
        let target = to.join(name);
        fs::write(&target, bytes).map_err(|e| format!("cannot write {}: {e}", target.display()))?;
    }
    Ok(())
}

/// The value of the string field `name` of the JSON object `go mod download
/// -json` prints, one field a line. A value with an escape (a module cache
/// path has none) is not read.
fn json_string_field(json: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\":");
    json.lines().find_map(|line| {
        let value = line.trim().strip_prefix(&key)?.trim();
        let value = value.strip_suffix(',').unwrap_or(value);
        let inner = value.strip_prefix('"')?.strip_suffix('"')?;
        (!inner.contains('\\')).then(|| inner.to_owned())
    })
}
