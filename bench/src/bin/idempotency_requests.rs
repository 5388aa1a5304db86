//! First requests of `benches/idempotency.rs` on `MemoryStore`, without criterion, to
//! count what they cost under `valgrind --tool=callgrind`: `n` requests, each with a new
//! `Idempotency-Key`, to the guarded route (or the bare one). Run it for two values of `n`
//! and divide the difference by theirs, so start-up and shut-down cancel out.
//!
//! `idempotency_requests <bare|guarded> <n>`

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{HeaderName, Request, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use idem_axum::client::ClientHeader;
use idem_axum::{Idem, IdempotencyLayer, MemoryStore};
use tower::ServiceExt;

const CLIENT: HeaderName = HeaderName::from_static("x-client");
const KEY: HeaderName = HeaderName::from_static("idempotency-key");
const BODY: &str = r#"{"amount":100,"currency":"EUR","reference":"order-42"}"#;

async fn create() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::CREATED,
        Json(serde_json::json!({ "id": "pay_1", "status": "succeeded" })),
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: idempotency_requests <bare|guarded> <n>";
    let path = format!("/{}", args.next().expect(usage));
    let n: u64 = args.next().and_then(|n| n.parse().ok()).expect(usage);
    let idem = Idem::builder()
        .with_store(MemoryStore::builder().with_capacity(20_000_000).build())
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let app = Router::new()
        .route("/bare", post(create))
        .route(
            "/guarded",
            post(create).route_layer(IdempotencyLayer::new()),
        )
        .layer(idem.layer());
    let next = AtomicU64::new(0);
    idem_bench::one_worker_runtime().block_on(async {
        for _ in 0..n {
            let key = format!("\"key-{}\"", next.fetch_add(1, Ordering::Relaxed));
            let request = Request::post(path.as_str())
                .header(&CLIENT, "client-1")
                .header(&KEY, key)
                .header("content-type", "application/json")
                .body(Body::from(BODY))
                .expect("a valid request");
            let response = app.clone().oneshot(request).await.expect("infallible");
            assert_eq!(response.status(), StatusCode::CREATED, "{path}");
            axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("a body");
        }
    });
}
