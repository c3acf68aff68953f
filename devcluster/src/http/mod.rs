//! The HTTP face: one fallback handler that parses every path into a typed request and
//! dispatches it (Kubernetes paths do not fit a static router well).

mod admin;
pub(crate) mod render;
pub(crate) mod request;
mod resources;
mod watch;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::counters::Counters;
use crate::discovery;
use crate::faults::FaultControls;
use crate::rand::Rng;
use crate::resource::Registry;
use crate::status::ApiError;
use crate::store::Store;

/// Everything a request handler needs.
#[derive(Debug)]
pub(crate) struct App {
    /// Objects.
    pub(crate) store: Arc<Store>,
    /// Resource types.
    pub(crate) registry: Arc<Registry>,
    /// uids and generated names.
    pub(crate) rng: Arc<Rng>,
    /// Request counters.
    pub(crate) counters: Arc<Counters>,
    /// Fault injection.
    pub(crate) faults: Arc<FaultControls>,
    /// `host:port` clients reach the server at.
    pub(crate) server_addr: String,
    /// The feature gates.
    pub(crate) features: crate::Features,
}

/// The router serving `app`.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new().fallback(handle).with_state(app)
}

/// A JSON response.
pub(crate) fn json_response(code: StatusCode, body: impl Into<Body>) -> Response {
    (code, [("content-type", "application/json")], body.into()).into_response()
}

/// What kube-apiserver's mux answers for a path no handler serves, such as one under an
/// API group it does not have: plain text, not a `Status`.
pub(crate) fn page_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            ("content-type", "text/plain; charset=utf-8"),
            ("x-content-type-options", "nosniff"),
        ],
        "404 page not found\n",
    )
        .into_response()
}

fn json_value(v: &Value) -> Response {
    json_response(StatusCode::OK, v.to_string())
}

fn header<'h>(h: &'h HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if let Some(r) = admin::handle(&app, &path, req.method()) {
        return match r {
            admin::Route::Done(resp) => resp,
            admin::Route::Faults => admin::faults(&app, req).await,
        };
    }
    if app.faults.partitioned(&resources::identity(&req)) {
        return ApiError::unavailable("partitioned from the server (injected fault)")
            .into_response();
    }
    if req.method() == Method::GET
        && let Some(resp) = non_resource(&app, &path, req.headers())
    {
        return resp;
    }
    match resources::handle(app, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// Discovery, version, health and OpenAPI documents.
fn non_resource(app: &App, path: &str, headers: &HeaderMap) -> Option<Response> {
    let accept = header(headers, "accept");
    let reg = &app.registry;
    let trimmed = path.trim_end_matches('/');
    let resp = match trimmed {
        "/version" => json_value(&discovery::version()),
        "/healthz" | "/livez" | "/readyz" => (StatusCode::OK, "ok").into_response(),
        "/api" => match discovery::wants_aggregated(accept) {
            Some(v) => aggregated(&discovery::aggregated(reg, true, v)),
            None => json_value(&discovery::core_versions(&app.server_addr)),
        },
        "/apis" => match discovery::wants_aggregated(accept) {
            Some(v) => aggregated(&discovery::aggregated(reg, false, v)),
            None => json_value(&discovery::groups(reg)),
        },
        "/openapi/v3" => json_value(&discovery::openapi_index(reg)),
        "/openapi/v2" => ApiError::path_not_found().into_response(),
        _ => {
            if let Some(gv) = trimmed.strip_prefix("/openapi/v3/") {
                let doc = match gv.split('/').collect::<Vec<_>>().as_slice() {
                    ["api", v] => discovery::openapi_group_version(reg, "", v),
                    ["apis", g, v] => discovery::openapi_group_version(reg, g, v),
                    _ => None,
                };
                return Some(doc.map_or_else(
                    || ApiError::path_not_found().into_response(),
                    |d| json_value(&d),
                ));
            }
            let segs: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
            match segs.as_slice() {
                ["api", v] => discovery::resources(reg, "", v).map_or_else(
                    || ApiError::path_not_found().into_response(),
                    |d| json_value(&d),
                ),
                ["apis", g] => {
                    discovery::group(reg, g).map_or_else(page_not_found, |d| json_value(&d))
                }
                ["apis", g, _] if !reg.serves_group(g) => page_not_found(),
                ["apis", g, v] => discovery::resources(reg, g, v).map_or_else(
                    || ApiError::path_not_found().into_response(),
                    |d| json_value(&d),
                ),
                _ => return None,
            }
        }
    };
    Some(resp)
}

fn aggregated(doc: &Value) -> Response {
    let version = doc["apiVersion"]
        .as_str()
        .unwrap_or("apidiscovery.k8s.io/v2");
    let v = version.rsplit('/').next().unwrap_or("v2");
    let ct = format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList");
    (StatusCode::OK, [("content-type", ct)], doc.to_string()).into_response()
}
