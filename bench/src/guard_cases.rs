//! The routes of the HTTP bench server (`src/main.rs`), one per guarded case, which
//! `src/bin/guard_requests.rs` sends the same requests to in-process for CPU profiles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use idem_axum::{
    AvoidRepeatLayer, FormToken, FormTokenConfig, IdemStore, IdempotencyLayer,
    VerifyFormTokenLayer, avoid_repeat,
    lock::{Lease, Lock},
    store::{Key, Store},
};

use tower::util::MapRequestLayer;

use crate::{CLIENT, bench_idem};

async fn bare() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "2s")]
async fn avoid_repeat_expire() -> &'static str {
    "ok"
}

#[avoid_repeat(timeout = "2s", release = "finish")]
async fn avoid_repeat_finish() -> &'static str {
    "ok"
}

async fn issue_token(token: FormToken) -> String {
    token.value().to_owned()
}

#[derive(serde::Deserialize)]
struct Order {
    item: String,
}

async fn place_order(Form(order): Form<Order>) -> String {
    order.item
}

/// The form case's page without a token: a value as long as a token's, so the client's
/// next request posts the same bytes as in the guarded case.
async fn plain_form() -> String {
    static PAGES: AtomicU64 = AtomicU64::new(0);
    format!("{:022}", PAGES.fetch_add(1, Ordering::Relaxed))
}

/// Takes the lock named by the client and releases it: what a handler that serialises its
/// work on one resource pays, without the work.
async fn lock(State(store): State<IdemStore>, headers: HeaderMap) -> StatusCode {
    let Some(name) = headers.get(&CLIENT) else {
        return StatusCode::BAD_REQUEST;
    };
    let key = Key::hashed([b"bench-lock", name.as_bytes()]);
    let lock = Lock::new(store, key, Lease::Fixed(Duration::from_secs(2)));
    match lock.try_acquire().await {
        Ok(guard) => match guard.release().await {
            Ok(true) => StatusCode::OK,
            Ok(false) => StatusCode::CONFLICT,
            Err(_) => StatusCode::SERVICE_UNAVAILABLE,
        },
        Err(_) => StatusCode::CONFLICT,
    }
}

/// The unguarded baselines, with no store and no `Idem` layer: `POST /bare` (the trivial
/// handler every guarded case wraps), `POST /layered` (the same under a route layer that
/// does nothing: what axum charges any route layer, a guard's or a peer's), and
/// `GET /plain/form`, `POST /plain/order` (the form case's handlers without a token: a
/// 22-character value for a token, the same `Form` handler without the layer).
pub fn unguarded_routes() -> Router {
    Router::new()
        .route("/bare", post(bare))
        .route(
            "/layered",
            post(bare).route_layer(MapRequestLayer::new(|request: Request| request)),
        )
        .route("/plain/form", get(plain_form))
        .route("/plain/order", post(place_order))
}

/// The guarded cases over `store`, under `prefix`, behind an `Idem` layer on it that tells
/// clients apart by [`CLIENT`]:
///
/// | route | case |
/// |---|---|
/// | `POST {prefix}/avoid_repeat` | `#[avoid_repeat(timeout = "2s")]` (`expire`) |
/// | `POST {prefix}/avoid_repeat_layer` | `AvoidRepeatLayer` with a 2 s window |
/// | `POST {prefix}/avoid_repeat_finish` | `#[avoid_repeat(timeout = "2s", release = "finish")]` |
/// | `GET {prefix}/form` | issues a form token (`FormToken` extractor), answers its value |
/// | `POST {prefix}/order` | spends it: `VerifyFormTokenLayer` over a `Form` handler |
/// | `POST {prefix}/order_replay` | the same with `with_replay(true)` |
/// | `POST {prefix}/idempotency` | `IdempotencyLayer`, records kept 5 s |
/// | `POST {prefix}/lock` | a handler that takes and releases the `Lock` named by the client |
///
/// Mounted with full paths, to be merged, not nested: `nest` costs every request a
/// rewritten URI (ten allocations) that would be counted as the guard's. Windows and
/// retention are seconds, not the defaults (30 s, 24 h): at tens of thousands of new keys
/// a second, the defaults would fill `MemoryStore`'s million entries within a run and
/// time its capacity refusals instead of the guard. For the same reason the form case
/// keeps 64 live tokens per client, not 16: wrk cannot tell its connections apart, so its
/// one client stands for 32 connections each with a page open. That setting is a layer of
/// the form routes alone: over every route it would cost each guarded request an
/// extension (an allocation) that is the bench's, not the guard's.
pub fn guard_cases<S: Store>(prefix: &str, store: S) -> Router {
    let idem = bench_idem(store);
    let path = |case: &str| format!("{prefix}/{case}");
    let forms = Router::new()
        .route(&path("form"), get(issue_token))
        .route(
            &path("order"),
            post(place_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .route(
            &path("order_replay"),
            post(place_order).route_layer(VerifyFormTokenLayer::new().with_replay(true)),
        )
        .layer(Extension(FormTokenConfig::new().with_tokens_per_client(64)));
    Router::new()
        .route(&path("avoid_repeat"), post(avoid_repeat_expire))
        .route(
            &path("avoid_repeat_layer"),
            post(bare).route_layer(AvoidRepeatLayer::new(Duration::from_secs(2))),
        )
        .route(&path("avoid_repeat_finish"), post(avoid_repeat_finish))
        .route(
            &path("idempotency"),
            post(bare).route_layer(IdempotencyLayer::new().with_retention(Duration::from_secs(5))),
        )
        .route(&path("lock"), post(lock).with_state(idem.store().clone()))
        .merge(forms)
        .layer(idem.layer())
}
