//! The OCI registry of the tests: the CNCF distribution registry
//! (`cmd/registry`), built from the Go wrapper module in `tools/registry/`
//! and remembered by a stamp, as the control plane is ([`crate::kube`]).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::kube::go_stamp;
use crate::{run, target_dir, workspace_root};

/// The release `tools/registry/go.mod` pins.
pub const VERSION: &str = "v3.1.2";

const PACKAGE: &str = "github.com/distribution/distribution/v3/cmd/registry";

/// The built registry: `<target>/registry/bin/registry`.
pub fn binary() -> PathBuf {
    target_dir().join("registry").join("bin").join("registry")
}

/// Builds the registry unless the stamp says it is current.
pub fn build() -> Result<PathBuf, String> {
    let bin = binary();
    let dir = bin.parent().map(PathBuf::from).unwrap_or_default();
    let stamp_file = dir.join(".stamp");
    let module = workspace_root().join("tools").join("registry");
    let stamp = go_stamp(VERSION, std::slice::from_ref(&module))?;
    if fs::read_to_string(&stamp_file).is_ok_and(|old| old == stamp) && bin.is_file() {
        return Ok(bin);
    }
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    println!("xtask: building {PACKAGE} from tools/registry");
    run(Command::new("go")
        .current_dir(&module)
        .args(["build", "-trimpath", "-ldflags", "-s -w", "-o"])
        .arg(&bin)
        .arg(PACKAGE))?;
    fs::write(&stamp_file, stamp)
        .map_err(|e| format!("cannot write {}: {e}", stamp_file.display()))?;
    Ok(bin)
}
