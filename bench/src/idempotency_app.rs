//! The router of the idempotency benchmark, and the requests it sends.

use axum::body::Body;
use axum::http::{HeaderName, Request, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use idem_axum::IdempotencyLayer;
use idem_axum::store::Store;

use crate::{CLIENT, behind_idem};

const KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// A typical small API request body.
const BODY: &str = r#"{"amount":100,"currency":"EUR","reference":"order-42"}"#;

async fn create() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::CREATED,
        Json(serde_json::json!({ "id": "pay_1", "status": "succeeded" })),
    )
}

/// The router of the idempotency benchmark (`benches/idempotency.rs`) on `store`: one
/// trivial JSON handler answering 201, bare (`/bare`) and under `IdempotencyLayer`
/// (`/guarded`, where a `GET` passes through unguarded).
pub fn idempotency_app<S: Store>(store: S) -> Router {
    let routes = Router::new().route("/bare", post(create)).route(
        "/guarded",
        post(create)
            .get(create)
            .route_layer(IdempotencyLayer::new()),
    );
    behind_idem(store, routes)
}

/// A request to `path` of [`idempotency_app`] with `key` as its `Idempotency-Key`, from
/// one client, with a small JSON body.
///
/// # Panics
///
/// When `method`, `path` or `key` is not valid in a request.
pub fn idempotency_request(method: &str, path: &str, key: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(&CLIENT, "client-1")
        .header(&KEY, key)
        .header("content-type", "application/json")
        .body(Body::from(BODY))
        .expect("a valid request")
}
