//! A registry that lies on demand, for the pull's bad-input tests: it
//! serves one component artifact honestly, or answers with a manifest or
//! component that is not the one asked for, another layout, a size over
//! any cap, a redirect elsewhere, an error, or nothing at all.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use policyhost::oci::artifact::{self, Manifest};
use policyhost::runtime::Digest;

use super::https::{Body, Reset, Server};

/// The repository it serves.
pub const REPOSITORY: &str = "policies/fanout";

/// How it answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Lie {
    /// The truth.
    #[default]
    None,
    /// A manifest that is not the one its digest names.
    ManifestAltered,
    /// Component bytes that are not the ones the layer's digest names.
    LayerAltered,
    /// A manifest whose config is this media type (an image, say).
    ConfigType(String),
    /// A manifest list.
    Index,
    /// A layer declared larger than any host takes.
    DeclaresHuge,
    /// The declared size, then a hundred times more bytes.
    SendsMore,
    /// The component is a redirect to this origin.
    RedirectTo(String),
    /// Every request is refused with a Bearer challenge naming a token
    /// service at this origin.
    TokenAt(String),
    /// Basic auth asked for, and the component redirected to this origin
    /// (another name of this server), whose requests are recorded.
    AuthThenRedirectTo(String),
    /// No answer, ever.
    Stall,
    /// 503 to everything.
    Unavailable,
}

#[derive(Default)]
struct State {
    lie: Lie,
    requests: u64,
    /// `Authorization` headers received by host name.
    authorizations: Vec<(String, bool)>,
}

/// A running hostile registry.
pub struct HostileRegistry {
    server: Server,
    state: Arc<Mutex<State>>,
    manifest: Vec<u8>,
}

impl HostileRegistry {
    /// Serves `component` as `REPOSITORY`'s artifact.
    pub fn start(component: Vec<u8>) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let manifest = manifest(&component, |_| {});
        let shared = (Arc::clone(&state), Arc::new(component));
        let server = Server::start("policyhost hostile registry CA", move |request| {
            let (state, component) = shared.clone();
            async move { answer(&request, &state, &component).await }
        });
        Self {
            server,
            state,
            manifest,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        self.server.address().to_string()
    }

    /// The CA of its certificate.
    pub fn ca(&self) -> rustls::pki_types::CertificateDer<'static> {
        self.server.ca()
    }

    /// The honest artifact's reference, pinned by its manifest's digest.
    pub fn reference(&self) -> String {
        format!(
            "{}/{REPOSITORY}@sha256:{}",
            self.host(),
            Digest::of(&self.manifest)
        )
    }

    /// Answers as `lie` says from now on.
    pub fn lie(&self, lie: Lie) {
        self.with(|state| state.lie = lie);
    }

    /// Each request's `Host` name and whether it carried `Authorization`.
    pub fn authorizations(&self) -> Vec<(String, bool)> {
        self.with(|state| state.authorizations.clone())
    }

    /// Requests received.
    pub fn requests(&self) -> u64 {
        self.with(|state| state.requests)
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The artifact manifest of `component`, changed by `edit`, as JSON.
fn manifest(component: &[u8], edit: impl FnOnce(&mut Manifest)) -> Vec<u8> {
    let mut manifest = Manifest::of_component(&artifact::config_for(component), component);
    edit(&mut manifest);
    serde_json::to_vec(&manifest).expect("a manifest")
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()).boxed())
        .expect("a response")
}

async fn answer(
    request: &Request<Incoming>,
    state: &Mutex<State>,
    component: &[u8],
) -> Result<Response<Body>, Reset> {
    let lie = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.requests += 1;
        let host = request
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let authorized = request.headers().contains_key(http::header::AUTHORIZATION);
        state.authorizations.push((host, authorized));
        state.lie.clone()
    };
    match lie {
        Lie::Stall => std::future::pending().await,
        Lie::Unavailable => {
            return Ok(full(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "down"));
        }
        Lie::TokenAt(origin) => {
            let mut challenge = full(StatusCode::UNAUTHORIZED, "application/json", "{}");
            let header = format!(r#"Bearer realm="{origin}/token",service="registry""#);
            challenge.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                header.parse().expect("a header value"),
            );
            return Ok(challenge);
        }
        _ => {}
    }
    let path = request.uri().path();
    if let Lie::AuthThenRedirectTo(origin) = &lie {
        let host = request
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let elsewhere = origin.ends_with(host);
        if !elsewhere && !request.headers().contains_key(http::header::AUTHORIZATION) {
            let mut challenge = full(StatusCode::UNAUTHORIZED, "application/json", "{}");
            challenge.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                r#"Basic realm="hostile""#.parse().expect("a header value"),
            );
            return Ok(challenge);
        }
        if !elsewhere && path.starts_with(&format!("/v2/{REPOSITORY}/blobs/")) {
            return Ok(Response::builder()
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header(http::header::LOCATION, format!("{origin}{path}"))
                .body(Full::new(Bytes::new()).boxed())
                .expect("a redirect"));
        }
    }
    if path == "/v2/" {
        return Ok(full(StatusCode::OK, "application/json", "{}"));
    }
    if path.starts_with(&format!("/v2/{REPOSITORY}/manifests/")) {
        let body = match &lie {
            Lie::ManifestAltered => manifest(component, |m| {
                m.annotations.insert("altered".into(), "yes".into());
            }),
            Lie::ConfigType(media_type) => manifest(component, |m| {
                m.config.media_type.clone_from(media_type);
            }),
            Lie::DeclaresHuge => manifest(component, |m| m.layers[0].size = 1 << 40),
            Lie::Index => {
                return Ok(full(
                    StatusCode::OK,
                    "application/vnd.oci.image.index.v1+json",
                    r#"{"schemaVersion":2,"manifests":[]}"#,
                ));
            }
            _ => manifest(component, |_| {}),
        };
        return Ok(full(StatusCode::OK, artifact::MANIFEST_TYPE, body));
    }
    if path.starts_with(&format!("/v2/{REPOSITORY}/blobs/")) {
        return Ok(match lie {
            Lie::RedirectTo(origin) => Response::builder()
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header(http::header::LOCATION, format!("{origin}{path}"))
                .body(Full::new(Bytes::new()).boxed())
                .expect("a redirect"),
            Lie::LayerAltered => {
                let mut altered = component.to_vec();
                altered[0] ^= 0xff;
                full(StatusCode::OK, "application/octet-stream", altered)
            }
            Lie::SendsMore => hundredfold(component),
            _ => full(
                StatusCode::OK,
                "application/octet-stream",
                component.to_vec(),
            ),
        });
    }
    Ok(full(
        StatusCode::NOT_FOUND,
        "application/json",
        r#"{"errors":[]}"#,
    ))
}

/// A hundred copies of `component`, without a length.
fn hundredfold(component: &[u8]) -> Response<Body> {
    let chunk = Bytes::copy_from_slice(component);
    let frames = futures::stream::iter(
        (0..100).map(move |_| Ok::<_, std::convert::Infallible>(Frame::data(chunk.clone()))),
    );
    Response::builder()
        .status(StatusCode::OK)
        .body(StreamBody::new(frames).boxed())
        .expect("a response")
}
