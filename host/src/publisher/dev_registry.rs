//! A registry on loopback, for `policyhost dev --registry` and the tests:
//! the CNCF distribution registry (`cargo xtask registry` builds it) on a
//! free port of 127.0.0.1, with TLS from a CA of its own and basic auth of
//! one user, so that the dev loop and the tests take the production path
//! of a policy shipped as an OCI artifact. A development tool: built with
//! the `dev` feature, not in the production image.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use http::Method;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::grants::grant_name;
use crate::grants::keys;
use crate::grants::pull;
use crate::oci::client::{Call, Session};
use crate::oci::{self, Basic, Reference};
use crate::vocabulary::GRANT_LABEL;

/// The user the registry lets in.
pub const USER: &str = "policyhost";
/// The pull secret the dev grants name.
const PULL_SECRET: &str = "dev-registry-pull";
/// The field manager of the grants and the pull secret.
const MANAGER: &str = "policyhost-dev-registry";

/// Why the local registry could not start or be written to.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A file of its state.
    #[error("{path}: {source}")]
    File {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// Its certificates.
    #[error("cannot make the registry's certificates")]
    Certificate(#[from] rcgen::Error),
    /// Its password's hash.
    #[error("cannot hash the registry's password")]
    Hash(#[from] bcrypt::BcryptError),
    /// The client cannot trust its CA.
    #[error("cannot trust the registry's CA")]
    Trust(#[from] rustls::Error),
    /// It did not let its user in within 30 s.
    #[error("the registry did not answer within 30 s; see {0}")]
    NotReady(PathBuf),
    /// A push to it failed.
    #[error(transparent)]
    Push(#[from] oci::push::PushError),
    /// A reference or URL of it does not parse.
    #[error(transparent)]
    Reference(#[from] oci::reference::ParseError),
    /// The URL of its API does not parse.
    #[error(transparent)]
    Client(#[from] oci::client::ClientError),
    /// Writing the grant or the pull secret failed.
    #[error("cannot apply {what}")]
    Apply {
        /// The object.
        what: String,
        /// The API server's answer.
        source: kube::Error,
    },
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> LocalError + '_ {
    move |source| LocalError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// A running registry; stopped when dropped.
pub struct LocalRegistry {
    child: Child,
    host: String,
    ca: CertificateDer<'static>,
    ca_pem: String,
    login: Basic,
    client: oci::Client,
    dir: PathBuf,
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LocalRegistry {
    /// Starts `binary` with its state in `dir`, and waits until it lets its
    /// user in.
    ///
    /// # Errors
    ///
    /// [`LocalError`].
    pub async fn start(binary: &Path, dir: &Path) -> Result<Self, LocalError> {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).map_err(file_error(&data))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(file_error(dir))?
            .port();
        let (ca_pem, server_pem, key_pem) = certificates()?;
        let password = format!("{:032x}", rand::random::<u128>());
        // The registry checks the hash on every request; a random 128-bit
        // password needs no slow hash to resist guessing.
        let hash = bcrypt::hash(&password, 5)?;
        let host = format!("127.0.0.1:{port}");
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
        let docker_config = serde_json::json!({"auths": {&host: {"auth": auth}}}).to_string();
        for (file, text) in [
            ("ca.pem", ca_pem.as_str()),
            ("server.pem", server_pem.as_str()),
            ("key.pem", key_pem.as_str()),
            ("htpasswd", &format!("{USER}:{hash}\n")),
            ("config.json", docker_config.as_str()),
            ("config.yml", &config(dir, port)),
        ] {
            let path = dir.join(file);
            std::fs::write(&path, text).map_err(file_error(&path))?;
        }
        let log_path = dir.join("registry.log");
        let log = std::fs::File::create(&log_path).map_err(file_error(&log_path))?;
        let child = Command::new(binary)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(file_error(binary))?;
        let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes())
            .map_err(|_| LocalError::Trust(rustls::Error::General("the CA's PEM".into())))?;
        let client = oci::Client::new(&oci::ClientConfig {
            extra_roots: vec![ca.clone()],
            ..oci::ClientConfig::default()
        })?;
        let registry = Self {
            child,
            host,
            ca,
            ca_pem,
            login: Basic {
                username: USER.to_owned(),
                password,
            },
            client,
            dir: dir.to_path_buf(),
        };
        registry.wait_ready().await?;
        Ok(registry)
    }

    /// `127.0.0.1:PORT`, as a reference names the registry.
    #[must_use]
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Its user's credentials.
    #[must_use]
    pub fn login(&self) -> &Basic {
        &self.login
    }

    /// Its CA, PEM (also in `ca.pem` of its directory).
    #[must_use]
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Its directory: `ca.pem`, `config.json` (a Docker `config.json` for
    /// its user), `registry.log`.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA its certificate is signed by, for the operator to trust.
    #[must_use]
    pub fn ca(&self) -> CertificateDer<'static> {
        self.ca.clone()
    }

    /// Where an operator may keep what it pulls from it.
    #[must_use]
    pub fn artifact_cache(&self) -> PathBuf {
        self.dir.join("artifacts")
    }

    async fn wait_ready(&self) -> Result<(), LocalError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut session = Session::with(&self.host, Some(&self.login));
            let call = Call {
                method: Method::GET,
                uri: oci::client::url(&self.host, "/v2/")?,
                accept: &[],
                content_type: None,
                body: bytes::Bytes::new(),
                limit: 1 << 16,
            };
            if let Ok(answer) = self.client.send(&mut session, call).await
                && answer.status.is_success()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(LocalError::NotReady(self.dir.join("registry.log")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Pushes `component` as `policies/<name>:dev`: its reference, pinned.
    ///
    /// # Errors
    ///
    /// [`LocalError::Push`].
    pub async fn push(&self, name: &str, component: &[u8]) -> Result<Reference, LocalError> {
        let tagged: Reference = format!("{}/policies/{name}:dev", self.host).parse()?;
        let digest = oci::push::push(&self.client, &tagged, Some(&self.login), component).await?;
        Ok(tagged.with_digest(digest))
    }

    /// Writes what the platform team would for policy `name` in
    /// `namespace`: the pull secret, and the grant's registries half
    /// (its own fields only, beside whatever else the grant holds).
    ///
    /// # Errors
    ///
    /// [`LocalError::Apply`].
    pub async fn grant(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<(), LocalError> {
        let params = PatchParams::apply(MANAGER).force();
        let config_path = self.dir.join("config.json");
        let config = std::fs::read(&config_path).map_err(file_error(&config_path))?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(PULL_SECRET.to_owned()),
                ..ObjectMeta::default()
            },
            type_: Some(pull::SECRET_TYPE.to_owned()),
            data: Some([(pull::SECRET_KEY.to_owned(), ByteString(config))].into()),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(client.clone(), namespace)
            .patch(PULL_SECRET, &params, &Patch::Apply(&secret))
            .await
            .map_err(|source| LocalError::Apply {
                what: format!("Secret {PULL_SECRET}"),
                source,
            })?;
        let grant = grant_name(name);
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(grant.clone()),
                labels: Some([(GRANT_LABEL.to_owned(), name.to_owned())].into()),
                ..ObjectMeta::default()
            },
            data: Some(
                [
                    (
                        keys::REGISTRIES.to_owned(),
                        format!("{}/policies/", self.host),
                    ),
                    (keys::PULL_SECRET.to_owned(), PULL_SECRET.to_owned()),
                ]
                .into(),
            ),
            ..ConfigMap::default()
        };
        Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .patch(&grant, &params, &Patch::Apply(&map))
            .await
            .map_err(|source| LocalError::Apply {
                what: format!("ConfigMap {grant}"),
                source,
            })?;
        Ok(())
    }
}

/// A CA, and a certificate for 127.0.0.1 it signed, with its key (PEM).
fn certificates() -> Result<(String, String, String), rcgen::Error> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "policyhost dev registry CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
    let key = rcgen::KeyPair::generate()?;
    let server =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &ca)?;
    Ok((ca.pem(), server.pem(), key.serialize_pem()))
}

/// The registry's configuration: storage under `dir`, TLS, htpasswd.
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
http:
  addr: 127.0.0.1:{port}
  tls:
    certificate: {dir}/server.pem
    key: {dir}/key.pem
auth:
  htpasswd:
    realm: policyhost-dev
    path: {dir}/htpasswd
"
    )
}
