//! An OCI registry for the tests: [`LocalRegistry`], the CNCF distribution
//! registry (`cargo xtask registry` builds it into `<target>/registry/bin/`)
//! on a free port of 127.0.0.1 with TLS from a CA of its own and basic auth
//! of one user, storing in a scratch directory, as `policyhost dev
//! --registry` runs it. Stopped when dropped.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use base64::Engine as _;
use policyhost::publisher::dev_registry::LocalRegistry;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The user the registry lets in.
pub const USER: &str = policyhost::publisher::dev_registry::USER;

/// A running registry.
pub struct Registry {
    local: LocalRegistry,
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
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let dir = super::scratch().join(format!(
            "registry-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let local = LocalRegistry::start(&binary(), &dir)
            .await
            .unwrap_or_else(|error| panic!("the test registry: {error}"));
        Self { local }
    }

    /// `127.0.0.1:PORT`, as an image reference names the registry.
    pub fn host(&self) -> String {
        self.local.host().to_owned()
    }

    /// The CA its certificate is signed by.
    pub fn ca(&self) -> CertificateDer<'static> {
        self.local.ca()
    }

    /// That CA, PEM.
    pub fn ca_pem(&self) -> &str {
        self.local.ca_pem()
    }

    /// The password of [`USER`].
    pub fn password(&self) -> &str {
        &self.local.login().password
    }

    /// The status of `GET path` over HTTPS, as `credentials` (user,
    /// password) if any; `None` when nothing answers.
    pub async fn status(&self, path: &str, credentials: Option<(&str, &str)>) -> Option<u16> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca()).ok()?;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(self.local.host())
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
