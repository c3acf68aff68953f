//! The operator's HTTP endpoints: `/metrics` (Prometheus), `/healthz`
//! (the process serves), `/readyz` (caches synced and policies loaded).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Tells whether the operator is ready to serve.
pub type Readiness = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Clone)]
struct Endpoints {
    metrics: Arc<Metrics>,
    ready: Readiness,
}

/// Binds `addr`; the listener's local address tells the port when `addr`'s is 0.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves the endpoints on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Endpoints { metrics, ready });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn render_metrics(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        endpoints.metrics.render(),
    )
}

async fn readyz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    if (endpoints.ready)() {
        (StatusCode::OK, "ready")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: caches syncing or policies loading",
        )
    }
}
