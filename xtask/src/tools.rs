//! The Go tools of the tests, each built from a Go wrapper module in
//! `tools/<name>/` (a `tool` directive pins its release) into
//! `<target>/<name>/bin/<name>`, and remembered by a stamp, as the control
//! plane is ([`crate::kube`]).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::kube::go_stamp;
use crate::{run, target_dir, workspace_root};

/// One tool: its directory under `tools/`, release and main package.
pub struct GoTool {
    /// `tools/<name>/`, and the binary's name.
    pub name: &'static str,
    /// The release its `go.mod` pins.
    pub version: &'static str,
    /// Its main package.
    pub package: &'static str,
}

/// The CNCF distribution registry: the OCI registry the tests push to.
pub const REGISTRY: GoTool = GoTool {
    name: "registry",
    version: "v3.1.2",
    package: "github.com/distribution/distribution/v3/cmd/registry",
};

/// cosign: signs and verifies beside the host, to show both read each
/// other's signatures.
pub const COSIGN: GoTool = GoTool {
    name: "cosign",
    version: "v2.6.4",
    package: "github.com/sigstore/cosign/v2/cmd/cosign",
};

/// Jaeger (v2): the trace collector and query service the tests send the
/// operator's spans to, and `policyhost dev --jaeger` runs.
pub const JAEGER: GoTool = GoTool {
    name: "jaeger",
    version: "v1.75.0",
    package: "github.com/jaegertracing/jaeger/cmd/jaeger",
};

impl GoTool {
    /// The built binary: `<target>/<name>/bin/<name>`.
    pub fn binary(&self) -> PathBuf {
        target_dir().join(self.name).join("bin").join(self.name)
    }

    /// Builds the tool unless the stamp says it is current.
    pub fn build(&self) -> Result<PathBuf, String> {
        let bin = self.binary();
        let dir = bin.parent().map(PathBuf::from).unwrap_or_default();
        let stamp_file = dir.join(".stamp");
        let module = workspace_root().join("tools").join(self.name);
        let stamp = go_stamp(self.version, std::slice::from_ref(&module))?;
        if fs::read_to_string(&stamp_file).is_ok_and(|old| old == stamp) && bin.is_file() {
            return Ok(bin);
        }
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        println!("xtask: building {} from tools/{}", self.package, self.name);
        run(Command::new("go")
            .current_dir(&module)
            .args(["build", "-trimpath", "-ldflags", "-s -w", "-o"])
            .arg(&bin)
            .arg(self.package))?;
        fs::write(&stamp_file, stamp)
            .map_err(|e| format!("cannot write {}: {e}", stamp_file.display()))?;
        Ok(bin)
    }
}
