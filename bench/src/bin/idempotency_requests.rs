//! First requests of `benches/idempotency.rs` on `MemoryStore`, without criterion, to
//! count what they cost under `valgrind --tool=callgrind`: `n` requests, each with a new
//! `Idempotency-Key`, to the guarded route (or the bare one). Run it for two values of `n`
//! and divide the difference by theirs, so start-up and shut-down cancel out.
//!
//! `idempotency_requests <bare|guarded> <n>`

use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::StatusCode;
use idem_axum::MemoryStore;
use idem_bench::{idempotency_app, idempotency_request};
use tower::ServiceExt;

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: idempotency_requests <bare|guarded> <n>";
    let path = format!("/{}", args.next().expect(usage));
    let n: u64 = args.next().and_then(|n| n.parse().ok()).expect(usage);
    let app = idempotency_app(MemoryStore::builder().with_capacity(20_000_000).build());
    let next = AtomicU64::new(0);
    idem_bench::one_worker_runtime().block_on(async {
        for _ in 0..n {
            let key = format!("\"key-{}\"", next.fetch_add(1, Ordering::Relaxed));
            let request = idempotency_request("POST", &path, &key);
            let response = app.clone().oneshot(request).await.expect("infallible");
            assert_eq!(response.status(), StatusCode::CREATED, "{path}");
            axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("a body");
        }
    });
}
