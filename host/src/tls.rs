//! The TLS client setup of every connection the host opens on its own
//! account (a policy's granted requests, the pulls of its artifacts): the
//! web's roots and the platform team's extra authorities, ring, the safe
//! protocol versions, no client certificate. One setup, so that both
//! clients trust exactly the same.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use tokio_rustls::TlsConnector;

/// A connector trusting the web's roots and `extra_roots`.
///
/// # Errors
///
/// A root rustls does not take.
pub fn connector(extra_roots: &[CertificateDer<'static>]) -> Result<TlsConnector, rustls::Error> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for root in extra_roots {
        roots.add(root.clone())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}
