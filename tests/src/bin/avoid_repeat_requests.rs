//! The requests of `benches/avoid_repeat.rs` on `MemoryStore`, without criterion: `n`
//! requests to one of its routes, to count what they cost under
//! `valgrind --tool=callgrind`, whose instruction counts do not move with the other work
//! on the machine as wall time does. Run it for two values of `n` and divide the
//! difference by theirs, so start-up and shut-down cancel out.
//!
//! `avoid_repeat_requests <bare|macro|layer> <n>`

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, Request};
use axum::routing::post;
use idem_axum::client::ClientHeader;
use idem_axum::{AvoidRepeatLayer, Idem, MemoryStore, avoid_repeat};
use tower::ServiceExt;

const CLIENT: HeaderName = HeaderName::from_static("x-client");

async fn bare() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "2s")]
async fn guarded() -> &'static str {
    "ok"
}

/// The bench's router, on a store with room for every key of the run.
fn app() -> Router {
    let idem = Idem::builder()
        .with_store(MemoryStore::builder().with_capacity(20_000_000).build())
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    Router::new()
        .route("/bare", post(bare))
        .route("/macro", post(guarded))
        .route(
            "/layer",
            post(bare).route_layer(AvoidRepeatLayer::new(Duration::from_secs(2))),
        )
        .layer(idem.layer())
}

/// A new client for every request, as in the bench.
fn request(path: &str) -> Request<Body> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let client = NEXT.fetch_add(1, Ordering::Relaxed);
    Request::post(path)
        .header(&CLIENT, client.to_string())
        .body(Body::empty())
        .expect("a valid request")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: avoid_repeat_requests <bare|macro|layer> <n>";
    let path = format!("/{}", args.next().expect(usage));
    let n: u64 = args.next().and_then(|n| n.parse().ok()).expect(usage);
    let runtime = idem_tests::one_worker_runtime();
    let app = app();
    runtime.block_on(async {
        for _ in 0..n {
            let response = app
                .clone()
                .oneshot(request(&path))
                .await
                .expect("infallible");
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
        }
    });
}
