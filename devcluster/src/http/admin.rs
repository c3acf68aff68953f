//! The admin endpoint under `/devcluster/v1/`: faults, forced 410 Gone, and request counters.

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{App, json_response};
use crate::faults::Faults;

/// Where an admin request goes.
pub(crate) enum Route {
    /// Answered already.
    Done(Response),
    /// `PUT /devcluster/v1/faults` needs its body.
    Faults,
}

/// Routes `/devcluster/v1/...`; `None` for other paths.
pub(crate) fn handle(app: &App, path: &str, method: &Method) -> Option<Route> {
    let rest = path.strip_prefix("/devcluster/v1/")?;
    let r = match (method, rest.trim_end_matches('/')) {
        (&Method::GET, "faults") => Route::Done(json_response(
            StatusCode::OK,
            serde_json::to_string(&app.faults.get()).unwrap_or_default(),
        )),
        (&Method::PUT, "faults") => Route::Faults,
        (&Method::DELETE, "faults") => {
            app.faults.clear();
            Route::Done(StatusCode::NO_CONTENT.into_response())
        }
        (&Method::POST, "faults/gone") => {
            app.faults.force_gone();
            Route::Done(StatusCode::NO_CONTENT.into_response())
        }
        (&Method::GET, "counters") => {
            let counters: Vec<_> = app
                .counters
                .snapshot()
                .into_iter()
                .map(|(k, n)| json!({"key": k, "count": n}))
                .collect();
            Route::Done(json_response(StatusCode::OK, json!(counters).to_string()))
        }
        (&Method::GET, "requests") => Route::Done(json_response(
            StatusCode::OK,
            serde_json::to_string(&app.counters.requests()).unwrap_or_default(),
        )),
        (&Method::DELETE, "counters") => {
            app.counters.reset();
            Route::Done(StatusCode::NO_CONTENT.into_response())
        }
        _ => Route::Done((StatusCode::NOT_FOUND, "unknown admin endpoint").into_response()),
    };
    Some(r)
}

/// `PUT /devcluster/v1/faults` with a [`Faults`] JSON body.
pub(crate) async fn faults(app: &App, req: Request) -> Response {
    let body = match axum::body::to_bytes(req.into_body(), 1 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match serde_json::from_slice::<Faults>(&body) {
        Ok(f) => {
            app.faults.set(f);
            json_response(
                StatusCode::OK,
                serde_json::to_string(&app.faults.get()).unwrap_or_default(),
            )
        }
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}
