//! Sizes: a request body over the limit, a response too large to store, a store with no
//! room for the record.

use axum::Router;
use axum::http::StatusCode;
use idem_tests::{Shop, send};

use crate::{Seen, app, post_key, request};

idem_tests::on_every_store!(
    shop_on(app):
    an_oversize_request_body_is_413_and_stores_nothing,
    a_response_too_large_to_store_reaches_its_client_and_never_runs_again,
);

async fn an_oversize_request_body_is_413_and_stores_nothing(shop: Shop, app: Router) {
    let large = format!(r#"{{"note":"{}"}}"#, "x".repeat(100));
    let seen = send(&app, request("/limited", "alice", Some("k"), &large)).await;
    assert_eq!(seen.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(shop.runs(), 0);
    // No record was left: the same key with a small body is a first request, not a 422.
    let small = send(&app, request("/limited", "alice", Some("k"), "{}")).await;
    assert_eq!(small.status(), StatusCode::CREATED);
    assert_eq!(shop.runs(), 1);
}

async fn a_response_too_large_to_store_reaches_its_client_and_never_runs_again(
    shop: Shop,
    app: Router,
) {
    let first = Seen::of(post_key(&app, "/big", "big-1").await).await;
    assert_whole_big_response(&first);
    for _ in 0..2 {
        let retry = Seen::of(post_key(&app, "/big", "big-1").await).await;
        assert_eq!(retry.status, StatusCode::CONFLICT);
        assert_eq!(retry.problem(), "response-not-replayable");
        assert_eq!(retry.header("retry-after"), None, "retrying will not help");
        assert!(retry.detail().contains("status 200"), "{}", retry.detail());
    }
    assert_eq!(shop.runs(), 1);
}

/// A `MemoryStore` out of bytes for a response keeps the "too large to replay" note: the
/// first client gets its response, and a retry is refused rather than run again.
#[tokio::test]
async fn a_response_the_store_has_no_room_for_never_runs_again() {
    let store = idem_axum::MemoryStore::builder()
        .with_max_bytes(2 * 1024)
        .build();
    let shop = Shop::new();
    let app = app(store, &shop);
    let first = Seen::of(post_key(&app, "/big/storable", "no-room").await).await;
    assert_whole_big_response(&first);
    let retry = Seen::of(post_key(&app, "/big/storable", "no-room").await).await;
    assert_eq!(retry.status, StatusCode::CONFLICT);
    assert_eq!(retry.problem(), "response-not-replayable");
    assert_eq!(shop.runs(), 1);
}

/// Checks that the first client got the whole response of `/big`: 4 KiB, answered 200.
fn assert_whole_big_response(first: &Seen) {
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.body.len(),
        4 * 1024,
        "the first client gets all of it"
    );
}
