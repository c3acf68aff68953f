//! An OCI registry for the tests: the CNCF distribution registry
//! (`cargo xtask registry` builds it into `<target>/registry/bin/`), on a
//! free port of 127.0.0.1 with TLS from a CA of its own and basic auth of
//! one user, storing in a scratch directory. Stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::process::free_port;

/// The user the registry lets in.
pub const USER: &str = "publisher";

/// A running registry.
pub struct Registry {
    child: Child,
    port: u16,
    ca: CertificateDer<'static>,
    ca_pem: String,
    password: String,
    dir: PathBuf,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The built registry program.
pub fn binary() -> PathBuf {
    let path = super::target_dir().join("registry/bin/registry");
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask registry` first",
        path.display()
    );
    path
}

impl Registry {
    /// Starts a registry and waits until it answers.
    pub async fn start() -> Self {
        let port = free_port();
        let dir = super::scratch().join(format!("registry-{port}"));
        std::fs::create_dir_all(dir.join("data")).expect("the registry's directory");
        let issued = super::tls::issue("policyhost test registry CA");
        let password = format!("pw-{port}-{}", std::process::id());
        let hash = bcrypt::hash(&password, 4).expect("bcrypt");
        for (file, text) in [
            ("server.pem", issued.server_pem.clone()),
            ("key.pem", issued.key_pem.clone()),
            ("htpasswd", format!("{USER}:{hash}\n")),
            ("config.yml", config(&dir, port)),
        ] {
            std::fs::write(dir.join(file), text).expect("write the registry's files");
        }
        let log = std::fs::File::create(dir.join("registry.log")).expect("the registry's log");
        let child = Command::new(binary())
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the registry");
        let registry = Self {
            child,
            port,
            ca: issued.ca,
            ca_pem: issued.ca_pem,
            password,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while registry.status("/v2/", None).await.is_none() {
            assert!(
                Instant::now() < deadline,
                "the registry did not answer within 30 s; its log: {}",
                std::fs::read_to_string(registry.dir.join("registry.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        registry
    }

    /// `127.0.0.1:PORT`, as an image reference names the registry.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The CA its certificate is signed by.
    pub fn ca(&self) -> CertificateDer<'static> {
        self.ca.clone()
    }

    /// That CA, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The password of [`USER`].
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The status of `GET path` over HTTPS, as `credentials` (user,
    /// password) if any; `None` when nothing answers.
    pub async fn status(&self, path: &str, credentials: Option<(&str, &str)>) -> Option<u16> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).ok()?;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        let name = ServerName::try_from("127.0.0.1").ok()?;
        let mut tls = connector.connect(name, tcp).await.ok()?;
        let authorization = credentials.map_or_else(String::new, |(user, password)| {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            format!("Authorization: Basic {token}\r\n")
        });
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{authorization}Connection: close\r\n\r\n",
            self.host()
        );
        tls.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer).await;
        let text = String::from_utf8_lossy(&answer);
        text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }
}

/// The registry's configuration: its storage under `dir`, TLS, htpasswd.
fn config(dir: &Path, port: u16) -> String {
    let dir = dir.display();
    format!(
        "version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {dir}/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  tls:
    certificate: {dir}/server.pem
    key: {dir}/key.pem
auth:
  htpasswd:
    realm: policyhost-test
    path: {dir}/htpasswd
"
    )
}
