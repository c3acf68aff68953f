//! An HTTPS server for the tests' own services (the storage cloud, the
//! hostile registry): 127.0.0.1 on a free port, a certificate of a CA of
//! its own, its own runtime thread, every request answered by a function.
//! Stopped when dropped.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;

/// A response body of any kind.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Dropping the connection: hyper closes it when the service fails.
#[derive(Debug)]
pub struct Reset;

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reset by the test server")
    }
}

impl std::error::Error for Reset {}

/// A running server.
pub struct Server {
    address: SocketAddr,
    ca: CertificateDer<'static>,
    ca_pem: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts a server whose CA is named `name`, answering with `answer`.
    pub fn start<F, A>(name: &str, answer: F) -> Self
    where
        F: Fn(Request<Incoming>) -> A + Clone + Send + Sync + 'static,
        A: Future<Output = Result<Response<Body>, Reset>> + Send + 'static,
    {
        let super::tls::Issued {
            ca,
            ca_pem,
            server,
            key,
            ..
        } = super::tls::issue(name);
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![server], key)
        .expect("server certificate");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the server");
        listener.set_nonblocking(true).expect("nonblocking");
        let address = listener.local_addr().expect("server address");
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("server runtime");
            runtime.block_on(serve(listener, acceptor, answer, stopped));
        });
        Self {
            address,
            ca,
            ca_pem,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Its address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The CA its certificate is signed by.
    pub fn ca(&self) -> CertificateDer<'static> {
        self.ca.clone()
    }

    /// That CA, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve<F, A>(
    listener: std::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    answer: F,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) where
    F: Fn(Request<Incoming>) -> A + Clone + Send + Sync + 'static,
    A: Future<Output = Result<Response<Body>, Reset>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    loop {
        let (tcp, _) = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => continue,
            },
        };
        let acceptor = acceptor.clone();
        let answer = answer.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), hyper::service::service_fn(answer))
                .await;
        });
    }
}
