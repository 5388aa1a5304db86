//! The `Idempotency-Key` header: invalid and missing keys, methods left unguarded, and
//! headers named otherwise.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, Method, Request, StatusCode};
use axum::routing::post;
use idem_axum::identity::ClientHeader;
use idem_axum::{Idem, IdempotencyLayer};
use idem_tests::{Shop, send};

use crate::{CLIENT, KEY, REPLAYED, Seen, app, invalid_keys, pay, post_key, request};

idem_tests::on_every_store!(
    shop_on(app):
    invalid_keys_are_refused_before_the_handler,
    a_required_key_that_is_missing_is_400_and_an_optional_one_passes,
    unguarded_methods_pass_through_untouched,
);

async fn invalid_keys_are_refused_before_the_handler(shop: Shop, app: Router) {
    for bad in invalid_keys() {
        let request = Request::post("/pay")
            .header(&CLIENT, "alice")
            .header(&KEY, bad.clone())
            .body(Body::from("{}"))
            .unwrap();
        let seen = Seen::of(send(&app, request).await).await;
        assert_eq!(seen.status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(seen.problem(), "invalid-idempotency-key", "{bad:?}");
    }
    let twice = Request::post("/pay")
        .header(&CLIENT, "alice")
        .header(&KEY, "a")
        .header(&KEY, "b")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, twice).await.status(), StatusCode::BAD_REQUEST);
    assert_eq!(shop.runs(), 0);
    // A longest key is fine.
    let longest = format!("\"{}\"", "k".repeat(255));
    assert_eq!(
        post_key(&app, "/pay", &longest).await.status(),
        StatusCode::CREATED
    );
}

async fn a_required_key_that_is_missing_is_400_and_an_optional_one_passes(shop: Shop, app: Router) {
    let seen = Seen::of(send(&app, request("/required", "alice", None, "{}")).await).await;
    assert_eq!(seen.status, StatusCode::BAD_REQUEST);
    assert_eq!(seen.problem(), "missing-idempotency-key");
    assert!(
        seen.detail().contains("`Idempotency-Key`"),
        "{}",
        seen.detail()
    );
    assert_eq!(shop.runs(), 0);
    for run in 1..=2 {
        let seen = send(&app, request("/pay", "alice", None, "{}")).await;
        assert_eq!(
            seen.status(),
            StatusCode::CREATED,
            "not required: unguarded"
        );
        assert_eq!(shop.runs(), run);
    }
}

async fn unguarded_methods_pass_through_untouched(shop: Shop, app: Router) {
    for run in 1..=2 {
        let get = Request::get("/pay")
            .header(&CLIENT, "alice")
            .header(&KEY, "not a valid key, and ignored")
            .body(Body::empty())
            .unwrap();
        let seen = Seen::of(send(&app, get).await).await;
        assert_eq!(seen.status, StatusCode::CREATED);
        assert!(!seen.replayed());
        assert_eq!(shop.runs(), run);
    }
    let without = Router::new()
        .route("/pay", axum::routing::get(pay))
        .with_state(Shop::new());
    let plain =
        Seen::of(send(&without, Request::get("/pay").body(Body::empty()).unwrap()).await).await;
    let get = Request::get("/pay")
        .header(&CLIENT, "alice")
        .body(Body::empty())
        .unwrap();
    let mut guarded = Seen::of(send(&app, get).await).await;
    guarded.body = plain.body.clone(); // the run number differs; nothing else may
    assert_eq!(guarded, plain);
    assert_eq!(
        send(
            &app,
            Request::builder()
                .method(Method::PUT)
                .uri("/pay")
                .body(Body::empty())
                .unwrap()
        )
        .await
        .status(),
        StatusCode::METHOD_NOT_ALLOWED
    );
}

#[tokio::test]
async fn the_key_and_replay_headers_can_be_named_otherwise() {
    let shop = Shop::new();
    let key_header = HeaderName::from_static("x-idempotency-key");
    let layer = IdempotencyLayer::new()
        .with_key_header(key_header.clone())
        .with_replayed_header(HeaderName::from_static("x-replayed"))
        .with_required(true);
    let idem = Idem::builder()
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let app = Router::new()
        .route("/pay", post(pay).route_layer(layer))
        .with_state(shop.clone())
        .layer(idem.layer());
    let with_key = |name: &HeaderName| {
        Request::post("/pay")
            .header(&CLIENT, "alice")
            .header(name, "renamed-1")
            .body(Body::empty())
            .unwrap()
    };
    let first = Seen::of(send(&app, with_key(&key_header)).await).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let replay = send(&app, with_key(&key_header)).await;
    assert_eq!(replay.headers()["x-replayed"], "true");
    assert!(!replay.headers().contains_key(REPLAYED));
    assert_eq!(shop.runs(), 1);

    // The usual header is not the key here: the key this route requires is missing.
    let missing = Seen::of(send(&app, with_key(&KEY)).await).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert!(
        String::from_utf8_lossy(&missing.body).contains("x-idempotency-key"),
        "{missing:?}"
    );
    assert_eq!(shop.runs(), 1);
}
