//! The operator's HTTP endpoints: `/metrics` (Prometheus), `/healthz`
//! (the process serves), `/readyz` (caches synced and policies loaded),
//! `/leaderz` (this replica leads).
//!
//! A follower with synced caches is *ready*: it is a warm standby that can
//! take over within the lease duration. Reporting followers unready would
//! block a Deployment's rolling update (new Pods start as followers and
//! would never become ready) and make a PodDisruptionBudget count only the
//! leader as healthy, so no node drain could ever evict it. The role is in
//! `/readyz`'s body, in `/leaderz`'s status, and in the `policyhost_leader`
//! gauge.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::leader::{Leadership, Role};
use crate::metrics::Metrics;

/// Tells whether the operator is ready to serve.
pub type Readiness = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Clone)]
struct Endpoints {
    metrics: Arc<Metrics>,
    ready: Readiness,
    leadership: Leadership,
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
    leadership: Leadership,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/leaderz", get(leaderz))
        .with_state(Endpoints {
            metrics,
            ready,
            leadership,
        });
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
        (
            StatusCode::OK,
            format!("ready: {}", role_text(&endpoints.leadership)),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: caches syncing or policies loading".to_owned(),
        )
    }
}

async fn leaderz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    let code = match endpoints.leadership.role() {
        Role::Leader => StatusCode::OK,
        Role::Follower { .. } => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, role_text(&endpoints.leadership))
}

/// `leader`, `follower (leader: pod-a)` or `follower (no leader yet)`.
fn role_text(leadership: &Leadership) -> String {
    match leadership.role() {
        Role::Leader => "leader".to_owned(),
        Role::Follower {
            leader: Some(holder),
        } => format!("follower (leader: {holder})"),
        Role::Follower { leader: None } => "follower (no leader yet)".to_owned(),
    }
}
