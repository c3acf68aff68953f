//! `policyhost dev --registry BINARY`: the CNCF distribution registry
//! (`cargo xtask registry` builds it) on a free port of 127.0.0.1, with TLS
//! from a CA of its own and basic auth of one user, so that the dev loop
//! takes the production path of a policy shipped as an OCI artifact: each
//! `.wasm` of the policy directory is pushed there and published as a
//! ConfigMap naming it by digest, with the grant and pull secret a platform
//! team would write.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use http::Method;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use policyhost::oci::client::{Call, Session};
use policyhost::oci::{self, Basic, Reference};
use policyhost::outbound::grant::{GRANT_LABEL, keys};
use policyhost::policies::grants::grant_name;
use policyhost::policies::pull_grant;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// The user the registry lets in.
const USER: &str = "policyhost";
/// The pull secret the dev grants name.
const PULL_SECRET: &str = "dev-registry-pull";
/// The field manager of the grants and the pull secret.
const MANAGER: &str = "policyhost-dev-registry";

/// A running registry; stopped when dropped.
pub(crate) struct LocalRegistry {
    child: Child,
    host: String,
    ca: CertificateDer<'static>,
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
    pub(crate) async fn start(binary: &Path, dir: &Path) -> anyhow::Result<Arc<Self>> {
        std::fs::create_dir_all(dir.join("data"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .context("no free port")?
            .port();
        let (ca_pem, server_pem, key_pem) = certificates()?;
        let password = format!("{:032x}", rand::random::<u128>());
        // The registry checks the hash on every request; a random 128-bit
        // password needs no slow hash to resist guessing.
        let hash = bcrypt::hash(&password, 5).context("cannot hash")?;
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
            std::fs::write(dir.join(file), text)
                .with_context(|| format!("cannot write {}", dir.join(file).display()))?;
        }
        let log = std::fs::File::create(dir.join("registry.log")).context("the registry's log")?;
        let child = Command::new(binary)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).context("the CA")?;
        let client = oci::Client::new(&oci::ClientConfig {
            extra_roots: vec![ca.clone()],
            ..oci::ClientConfig::default()
        })?;
        let registry = Arc::new(Self {
            child,
            host,
            ca,
            login: Basic {
                username: USER.to_owned(),
                password,
            },
            client,
            dir: dir.to_path_buf(),
        });
        registry.wait_ready().await?;
        println!(
            "registry serving on https://{} (user {USER}; push with --oci {}/policies/NAME:TAG --registry-auth {} --registry-ca {})",
            registry.host,
            registry.host,
            dir.join("config.json").display(),
            dir.join("ca.pem").display()
        );
        Ok(registry)
    }

    /// The CA its certificate is signed by, for the operator to trust.
    pub(crate) fn ca(&self) -> CertificateDer<'static> {
        self.ca.clone()
    }

    /// Where the operator keeps what it pulls from it.
    pub(crate) fn artifact_cache(&self) -> PathBuf {
        self.dir.join("artifacts")
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let host = self.host.clone();
        let allowed = move |h: &str| h == host;
        loop {
            let mut session = Session {
                credentials: Some(&self.login),
                allowed: &allowed,
                authorization: None,
            };
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
                bail!(
                    "the registry did not answer within 30 s; see {}",
                    self.dir.join("registry.log").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Pushes `component` as `policies/<name>:dev`: its reference, pinned.
    pub(crate) async fn push(&self, name: &str, component: &[u8]) -> anyhow::Result<Reference> {
        let tagged: Reference = format!("{}/policies/{name}:dev", self.host).parse()?;
        let digest = oci::push::push(&self.client, &tagged, Some(&self.login), component)
            .await
            .with_context(|| format!("cannot push {tagged}"))?;
        Ok(tagged.with_digest(digest))
    }

    /// Writes what the platform team would for policy `name` in
    /// `namespace`: the pull secret, and the grant's registries half
    /// (its own fields only, beside whatever else the grant holds).
    pub(crate) async fn grant(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<()> {
        let params = PatchParams::apply(MANAGER).force();
        let config = std::fs::read(self.dir.join("config.json")).context("config.json")?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(PULL_SECRET.to_owned()),
                ..ObjectMeta::default()
            },
            type_: Some(pull_grant::SECRET_TYPE.to_owned()),
            data: Some([(pull_grant::SECRET_KEY.to_owned(), ByteString(config))].into()),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(client.clone(), namespace)
            .patch(PULL_SECRET, &params, &Patch::Apply(&secret))
            .await
            .context("cannot apply the pull secret")?;
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
            .with_context(|| format!("cannot apply {grant}"))?;
        Ok(())
    }
}

/// A CA, and a certificate for 127.0.0.1 it signed, with its key (PEM).
fn certificates() -> anyhow::Result<(String, String, String)> {
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
