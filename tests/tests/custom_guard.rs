//! A guard written outside idem with its public guard-building API
//! (`idem_axum::guard::GuardContext`), on `MemoryStore` and on a real Redis: it lets each
//! client run one export at a time. It shares the runtime's client identity, refuses
//! through the runtime's responder and follows its store-failure policy, as idem's own
//! guards do.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem_axum::guard::GuardContext;
use idem_axum::identity::{ClientHeader, ClientRequest};
use idem_axum::store::{Acquire, Fencing, LockStore, Owner, Store};
use idem_axum::{Idem, Rejection, RejectionKind, StoreFailure};
use idem_tests::{Backend, Shop, all_at_once, body_text, send, shop_on, unreachable_redis_store};
use tokio::task::JoinHandle;

idem_tests::on_every_store!(
    two_hundred_concurrent_exports_of_one_client_run_once,
    a_finished_export_frees_the_client,
);

const USER: HeaderName = HeaderName::from_static("x-user");
/// The header the application's responder marks its answers with.
const RENDERED_BY_APP: HeaderName = HeaderName::from_static("x-rendered-by-app");

/// The guard: one export per client at a time.
async fn one_at_a_time(request: Request, next: Next) -> Response {
    let (guard, client) = match GuardContext::open(&ClientRequest::from_request(&request)) {
        Ok(opened) => opened,
        Err(refusal) => return refusal,
    };
    let key = guard.key(&[b"one-export-at-a-time", client.as_bytes()]);
    let owner = Owner::random();
    let lease = Duration::from_secs(60);
    match guard
        .store()
        .acquire(&key, &owner, lease, Fencing::Off)
        .await
    {
        Ok(Acquire::Acquired { .. }) => {}
        Ok(Acquire::Held { remaining } | Acquire::Reentered { remaining, .. }) => {
            let busy = Rejection::new(RejectionKind::Duplicate, "your export is still running")
                .with_retry_after(remaining);
            return guard.refuse(busy);
        }
        Err(error) => {
            return match guard.on_store_error(&error, "one export at a time") {
                Err(refusal) => refusal,
                Ok(()) => next.run(request).await,
            };
        }
    }
    let response = next.run(request).await;
    guard
        .store()
        .release(&key, &owner)
        .await
        .expect("the store answers");
    response
}

async fn export(State(exports): State<Shop>) -> StatusCode {
    exports.ran();
    exports.pass_gate().await;
    StatusCode::OK
}

fn app(idem: &Idem, exports: &Shop) -> Router {
    Router::new()
        .route("/exports", post(export))
        .route_layer(middleware::from_fn(one_at_a_time))
        .with_state(exports.clone())
        .layer(idem.layer())
}

/// A runtime whose responder marks every refusal it renders.
/// The app on `store`, its runtime failing closed: how most cases run it.
fn failing_closed<S: Store>(store: S, exports: &Shop) -> Router {
    app(&idem_on(store, StoreFailure::FailClosed), exports)
}

fn idem_on<S: Store>(store: S, store_failure: StoreFailure) -> Idem {
    Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(USER))
        .with_store_failure(store_failure)
        .with_responder(|rejection| {
            let mut response = (rejection.status(), rejection.detail().to_owned()).into_response();
            response
                .headers_mut()
                .insert(RENDERED_BY_APP, "yes".parse().expect("a header value"));
            response
        })
        .build()
}

fn export_by(user: Option<&str>) -> Request {
    let request = Request::post("/exports");
    let request = match user {
        Some(user) => request.header(USER, user),
        None => request,
    };
    request.body(Body::empty()).expect("a request")
}

/// Starts `user`'s export in a task of its own, and waits until the handler runs it (its
/// `run`-th run); the export's answer comes once the gate lets it through.
async fn export_running(
    app: &Router,
    exports: &Shop,
    user: &'static str,
    run: usize,
) -> JoinHandle<Response> {
    let export = {
        let app = app.clone();
        tokio::spawn(async move { send(&app, export_by(Some(user))).await })
    };
    let what = format!("{user}'s export runs");
    idem_tests::eventually(Duration::from_secs(5), &what, || {
        let runs = exports.runs();
        async move { runs == run }
    })
    .await;
    export
}

async fn two_hundred_concurrent_exports_of_one_client_run_once<B: Backend>() {
    let (_backend, exports, app) = shop_on::<B>(failing_closed).await;
    let first = export_running(&app, &exports, "alice", 1).await;

    let answers = all_at_once(200, |_| {
        let app = app.clone();
        async move { send(&app, export_by(Some("alice"))).await }
    })
    .await;
    for answer in &answers {
        assert_eq!(answer.status(), StatusCode::CONFLICT);
        assert_eq!(
            answer.headers()[RENDERED_BY_APP],
            "yes",
            "the app's responder"
        );
    }
    assert_eq!(exports.runs(), 1, "refused before the handler ran");

    // Another client is not held up by alice's export.
    let bob = export_running(&app, &exports, "bob", 2).await;
    exports.open_gate_for(2);
    assert_eq!(first.await.expect("no panic").status(), StatusCode::OK);
    assert_eq!(bob.await.expect("no panic").status(), StatusCode::OK);
}

async fn a_finished_export_frees_the_client<B: Backend>() {
    let (_backend, exports, app) = shop_on::<B>(failing_closed).await;
    exports.open_gate_for(3);
    for round in 1..=3 {
        let answer = send(&app, export_by(Some("alice"))).await;
        assert_eq!(answer.status(), StatusCode::OK, "export {round}");
        assert_eq!(exports.runs(), round);
    }
}

#[tokio::test]
async fn a_client_it_cannot_tell_is_refused_by_the_runtime() {
    let exports = Shop::new();
    let app = failing_closed(idem_axum::MemoryStore::new(), &exports);
    let answer = send(&app, export_by(None)).await;
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    assert_eq!(answer.headers()[RENDERED_BY_APP], "yes");
    assert_eq!(exports.runs(), 0);
}

#[tokio::test]
async fn without_the_runtime_it_names_the_missing_layer() {
    let exports = Shop::new();
    let app = Router::new()
        .route("/exports", post(export))
        .route_layer(middleware::from_fn(one_at_a_time))
        .with_state(exports.clone());
    let answer = send(&app, export_by(Some("alice"))).await;
    assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = body_text(answer).await;
    assert!(body.contains("idem.layer()"), "{body}");
    assert_eq!(exports.runs(), 0);
}

/// The app on a Redis store with nothing at its address (each operation fails within
/// 100 ms), its runtime failing as `policy` says.
fn app_on_unreachable_store(policy: StoreFailure, exports: &Shop) -> Router {
    app(
        &idem_on(unreachable_redis_store(Duration::from_millis(100)), policy),
        exports,
    )
}

#[tokio::test]
async fn a_store_outage_follows_the_runtimes_policy() {
    let exports = Shop::new();
    exports.open_gate_for(1);
    let closed = app_on_unreachable_store(StoreFailure::FailClosed, &exports);
    let answer = send(&closed, export_by(Some("alice"))).await;
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.headers()[RENDERED_BY_APP], "yes");
    assert_eq!(exports.runs(), 0, "failing closed, nothing runs");

    let open = app_on_unreachable_store(StoreFailure::FailOpen, &exports);
    let answer = send(&open, export_by(Some("alice"))).await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(exports.runs(), 1, "failing open, the export runs unguarded");
}
