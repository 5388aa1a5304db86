//! The router of the avoid-repeat benchmark, and the requests it sends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::post;
use idem_axum::store::Store;
use idem_axum::{AvoidRepeatLayer, avoid_repeat};

use crate::{CLIENT, behind_idem};

async fn bare() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "2s")]
async fn guarded() -> &'static str {
    "ok"
}

/// The router of the avoid-repeat benchmark (`benches/avoid_repeat.rs`) on `store`: one
/// trivial handler bare (`/bare`), under `#[avoid_repeat]` (`/macro`) and under
/// `AvoidRepeatLayer` (`/layer`), each with a 2 s window.
pub fn avoid_repeat_app<S: Store>(store: S) -> Router {
    let routes = Router::new()
        .route("/bare", post(bare))
        .route("/macro", post(guarded))
        .route(
            "/layer",
            post(bare).route_layer(AvoidRepeatLayer::new(Duration::from_secs(2))),
        );
    behind_idem(store, routes)
}

/// A request to `path` of [`avoid_repeat_app`] from a new client every time, so that each
/// guarded one takes the accept path (a new key), as a stream of distinct users would.
///
/// # Panics
///
/// When `path` is not a valid URI path.
pub fn avoid_repeat_request(path: &str) -> Request<Body> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let client = NEXT.fetch_add(1, Ordering::Relaxed);
    Request::post(path)
        .header(&CLIENT, client.to_string())
        .body(Body::empty())
        .expect("a valid request")
}
