//! The test control plane's credentials, made with `openssl`: a CA, the API
//! server's serving certificate (127.0.0.1 and localhost), an admin client
//! certificate (group `system:masters`) and the service-account signing key.
//! They are valid for two days: a cluster lives for one test run.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The files [`Certificates::generate`] writes.
pub struct Certificates {
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub service_account_key: PathBuf,
}

impl Certificates {
    /// The set [`generate`](Self::generate) wrote into `dir`, if it is all
    /// there (a stopped cluster's, to resume it).
    pub fn existing(dir: &Path) -> Option<Self> {
        let certs = Self::in_dir(dir);
        [
            &certs.ca_cert,
            &certs.server_cert,
            &certs.server_key,
            &certs.admin_cert,
            &certs.admin_key,
            &certs.service_account_key,
        ]
        .iter()
        .all(|file| file.is_file())
        .then_some(certs)
    }

    fn in_dir(dir: &Path) -> Self {
        let file = |name: &str| dir.join(name);
        Self {
            ca_cert: file("ca.crt"),
            server_cert: file("server.crt"),
            server_key: file("server.key"),
            admin_cert: file("admin.crt"),
            admin_key: file("admin.key"),
            service_account_key: file("service-account.key"),
        }
    }

    /// Writes a fresh set into `dir`.
    pub fn generate(dir: &Path) -> Result<Self, String> {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let file = |name: &str| dir.join(name);
        let certs = Self::in_dir(dir);
        let ca_key = file("ca.key");
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=policyhost-test-ca",
            "-keyout",
            &path(&ca_key),
            "-out",
            &path(&certs.ca_cert),
        ])?;
        let signed = |key: &Path, cert: &Path, subject: &str, extensions: &str| {
            let csr = cert.with_extension("csr");
            let ext = cert.with_extension("ext");
            fs::write(&ext, extensions)
                .map_err(|e| format!("cannot write {}: {e}", ext.display()))?;
            openssl(&[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                subject,
                "-keyout",
                &path(key),
                "-out",
                &path(&csr),
            ])?;
            openssl(&[
                "x509",
                "-req",
                "-in",
                &path(&csr),
                "-CA",
                &path(&certs.ca_cert),
                "-CAkey",
                &path(&ca_key),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &path(&ext),
                "-out",
                &path(cert),
            ])
        };
        signed(
            &certs.server_key,
            &certs.server_cert,
            "/CN=kube-apiserver",
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n",
        )?;
        signed(
            &certs.admin_key,
            &certs.admin_cert,
            "/O=system:masters/CN=admin",
            "extendedKeyUsage=clientAuth\n",
        )?;
        openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &path(&certs.service_account_key),
        ])?;
        Ok(certs)
    }
}

fn path(path: &Path) -> String {
    path.display().to_string()
}

fn openssl(args: &[&str]) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run openssl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
