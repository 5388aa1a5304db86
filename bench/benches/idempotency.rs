//! What `IdempotencyLayer` adds to a request: the same trivial handler through a `Router`
//! with `oneshot`, bare and guarded, on `MemoryStore` and on a real Redis.
//!
//! - `bare`: the handler without the layer (the same request, key header and all).
//! - `first`: a first request — a **new key every iteration** — so each one begins a
//!   record, runs the handler (in place; in a task of its own only if it is still
//!   pending after its first poll, as on Redis), and stores the response.
//! - `replay`: a retry of a completed key: the stored response is decoded and sent; the
//!   handler does not run.
//! - `get`: a method the layer does not guard, passed through.
//!
//! The runtime has one worker, as in the `avoid_repeat` bench, and criterion drives each
//! iteration from a thread of its own: a task a first request hands its handler to goes
//! to the worker across threads, which a server — whose request already runs on a worker
//! — does not pay.
//!
//! `cargo bench -p idem-bench --bench idempotency`

use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use criterion::Criterion;
use idem_bench::{idempotency_app as app, idempotency_request as request};
use tower::ServiceExt;

const REPLAYED_KEY: &str = "\"the-replayed-key\"";

/// A key no earlier request of this process used.
fn fresh_key() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("\"key-{}\"", NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn send(app: &Router, request: Request<Body>) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::CREATED);
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a readable body");
}

fn run(c: &mut Criterion, backend: &str, app: Router, runtime: &tokio::runtime::Runtime) {
    runtime.block_on(send(&app, request("POST", "/guarded", REPLAYED_KEY)));
    let mut group = c.benchmark_group(format!("idempotency/{backend}"));
    group.bench_function("bare", |b| {
        b.to_async(runtime)
            .iter(|| send(&app, request("POST", "/bare", REPLAYED_KEY)));
    });
    group.bench_function("first", |b| {
        b.to_async(runtime)
            .iter(|| send(&app, request("POST", "/guarded", &fresh_key())));
    });
    group.bench_function("replay", |b| {
        b.to_async(runtime)
            .iter(|| send(&app, request("POST", "/guarded", REPLAYED_KEY)));
    });
    group.bench_function("get", |b| {
        b.to_async(runtime)
            .iter(|| send(&app, request("GET", "/guarded", REPLAYED_KEY)));
    });
    group.finish();
}

// Every first request leaves a record for 24 h: room for all of them.
idem_bench::http_bench_main!(idempotency, capacity = 50_000_000);
