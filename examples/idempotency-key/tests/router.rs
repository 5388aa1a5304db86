//! The example through its router (no sockets), every case on `MemoryStore` and on a real
//! Redis the harness starts: statuses, headers, and the transfers made, counted.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use example_idempotency_key::IdempotencyKeyExample;
use idem_tests::{
    Answer, Backend, all_at_once, answer, assert_created_or_in_progress, from_loopback,
};
use serde_json::{Value, json};

idem_tests::on_every_store!(
    a_retry_gets_the_first_response_and_makes_no_transfer,
    a_retry_while_the_first_runs_is_409_with_retry_after,
    the_key_with_another_body_is_422,
    a_malformed_or_missing_key_is_400_and_makes_nothing,
    twenty_retries_at_once_make_one_transfer,
);

/// The example on `backend`'s store, its transfers taking `processing_time`.
fn app<B: Backend>(backend: &B, processing_time: Duration) -> Router {
    let example = IdempotencyKeyExample::new(backend.store()).with_processing_time(processing_time);
    from_loopback(example.router())
}

/// `POST /transfers` with `key` (as sent, if any) and `body`.
fn transfer(key: Option<&str>, body: &Value) -> Request<Body> {
    let mut request = Request::post("/transfers").header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body(Body::from(body.to_string())).unwrap()
}

fn alice_to_bob(amount: u64) -> Value {
    json!({ "from": "alice", "to": "bob", "amount": amount })
}

/// The transfers made.
async fn made(app: &Router) -> usize {
    let list = answer(app, Request::get("/transfers").body(Body::empty()).unwrap()).await;
    assert_eq!(list.status, StatusCode::OK, "a GET needs no key: {list:?}");
    list.json().as_array().expect("a list").len()
}

async fn a_retry_gets_the_first_response_and_makes_no_transfer<B: Backend>() {
    let backend = B::start().await;
    let app = app(&backend, Duration::ZERO);
    let first = answer(&app, transfer(Some("t-1"), &alice_to_bob(500))).await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    assert!(!first.replayed());
    assert_eq!(
        first.json(),
        json!({ "transfer_id": 1, "from": "alice", "to": "bob", "amount": 500 })
    );
    for _ in 0..3 {
        let retry = answer(&app, transfer(Some("t-1"), &alice_to_bob(500))).await;
        assert_eq!(retry.status, StatusCode::CREATED);
        assert!(retry.replayed(), "{retry:?}");
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(made(&app).await, 1);

    let other = answer(&app, transfer(Some("t-2"), &alice_to_bob(500))).await;
    assert_eq!(
        other.json()["transfer_id"],
        2,
        "another key, another transfer"
    );
    assert_eq!(made(&app).await, 2);
}

async fn a_retry_while_the_first_runs_is_409_with_retry_after<B: Backend>() {
    let backend = B::start().await;
    let app = app(&backend, Duration::from_millis(500));
    let first = tokio::spawn({
        let app = app.clone();
        async move { answer(&app, transfer(Some("t-1"), &alice_to_bob(100))).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let during = answer(&app, transfer(Some("t-1"), &alice_to_bob(100))).await;
    assert_eq!(during.status, StatusCode::CONFLICT, "{during:?}");
    assert!(
        during.headers.contains_key(header::RETRY_AFTER),
        "{during:?}"
    );
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    let after = answer(&app, transfer(Some("t-1"), &alice_to_bob(100))).await;
    assert!(after.replayed(), "{after:?}");
    assert_eq!(made(&app).await, 1);
}

async fn the_key_with_another_body_is_422<B: Backend>() {
    let backend = B::start().await;
    let app = app(&backend, Duration::ZERO);
    let first = answer(&app, transfer(Some("t-1"), &alice_to_bob(500))).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let other = answer(&app, transfer(Some("t-1"), &alice_to_bob(900))).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY, "{other:?}");
    assert_eq!(made(&app).await, 1);
}

async fn a_malformed_or_missing_key_is_400_and_makes_nothing<B: Backend>() {
    let backend = B::start().await;
    let app = app(&backend, Duration::ZERO);
    let long = "k".repeat(256);
    for key in [
        Some("not a token"),
        Some("\"unterminated"),
        Some(long.as_str()),
        None,
    ] {
        let refused: Answer = answer(&app, transfer(key, &alice_to_bob(1))).await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{key:?}: {refused:?}"
        );
    }
    assert_eq!(made(&app).await, 0);
}

async fn twenty_retries_at_once_make_one_transfer<B: Backend>() {
    let backend = B::start().await;
    let app = app(&backend, Duration::from_millis(50));
    let statuses = all_at_once(20, |_| {
        let app = app.clone();
        async move {
            answer(&app, transfer(Some("t-1"), &alice_to_bob(100)))
                .await
                .status
        }
    })
    .await;
    assert_created_or_in_progress(&statuses);
    assert_eq!(made(&app).await, 1);
}
