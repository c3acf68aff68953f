//! Certificates for the tests' own TLS servers (the storage cloud, the OCI
//! registry): a CA of the test's own, and a server certificate for
//! 127.0.0.1 and localhost signed by it.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA and a server certificate it signed.
pub struct Issued {
    /// The CA's certificate (DER), for a client to trust.
    pub ca: CertificateDer<'static>,
    /// The same, PEM.
    pub ca_pem: String,
    /// The server's certificate (DER).
    pub server: CertificateDer<'static>,
    /// The same, PEM.
    pub server_pem: String,
    /// The server's key.
    pub key: PrivateKeyDer<'static>,
    /// The same, PEM.
    pub key_pem: String,
}

/// A new CA named `name`, and a server certificate for 127.0.0.1 and
/// localhost signed by it.
pub fn issue(name: &str) -> Issued {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
    let key = rcgen::KeyPair::generate().expect("server key");
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params");
    let server = params.signed_by(&key, &ca).expect("server certificate");
    Issued {
        ca: ca.der().clone(),
        ca_pem: ca.pem(),
        server: server.der().clone(),
        server_pem: server.pem(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        key_pem: key.serialize_pem(),
    }
}
