//! Redis failing under the layer: a response stored once Redis is back, the store-failure
//! policy, nothing left behind by refused requests.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_axum::identity::ClientHeader;
use idem_axum::{Idem, IdempotencyLayer, StoreFailure};
use idem_tests::{RedisServer, Shop, send};

use crate::{CLIENT, KEY, Seen, app, app_with, gated, invalid_keys, post_key, request};

/// The store's timeout in the outage test: every answer must come within it and a slack.
const TIMEOUT: Duration = Duration::from_millis(200);

const SLACK: Duration = Duration::from_millis(800);

/// The handler has run and committed when Redis crashes, so the response cannot be stored
/// then; Redis comes back from its append-only file. The response is stored once it is
/// back, so a retry replays it: the handler does not run a second time once the record's
/// lease would have run out, and its client was answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_response_redis_could_not_take_is_stored_once_it_is_back() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let lease = Duration::from_secs(3);
    let store = server.store_with(idem_axum::RedisStore::builder().with_timeout(TIMEOUT));
    let shop = Shop::new();
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    let app = Router::new()
        .route(
            "/gated",
            post(gated).route_layer(IdempotencyLayer::new().with_lease(lease)),
        )
        .with_state(shop.clone())
        .layer(idem.layer());

    let in_flight = tokio::spawn({
        let app = app.clone();
        async move { post_key(&app, "/gated", "crash-1").await }
    });
    shop.until_runs(1).await;
    server.stop();
    let stopped_at = Instant::now();
    shop.open_gate();
    let answered = in_flight.await.unwrap();
    assert_eq!(answered.status(), StatusCode::CREATED);
    assert!(
        stopped_at.elapsed() < TIMEOUT + SLACK,
        "the client is answered within the store's timeout: {:?}",
        stopped_at.elapsed()
    );

    server.start_again();
    // A second run, were there one, would not wait at the gate: it would answer.
    shop.open_gate();
    // Retries until the first attempt's lease would have run out three times over: each
    // is a replay or a 409 while the record is in progress, never a second run.
    let deadline = Instant::now() + 3 * lease;
    let replay = loop {
        let retry = Seen::of(post_key(&app, "/gated", "crash-1").await).await;
        if retry.replayed() {
            break retry;
        }
        assert_eq!(retry.status, StatusCode::CONFLICT, "{retry:?}");
        assert!(Instant::now() < deadline, "never replayed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(shop.runs(), 1, "the handler ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_failing_mid_test_follows_the_policy_without_hanging() {
    let server = RedisServer::start();
    let store = || server.store_with(idem_axum::RedisStore::builder().with_timeout(TIMEOUT));
    let shop = Shop::new();
    let closed = app_with(store(), &shop, StoreFailure::FailClosed);
    let open = app_with(store(), &shop, StoreFailure::FailOpen);
    assert_eq!(
        post_key(&closed, "/pay", "before").await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        post_key(&open, "/pay", "before").await.status(),
        StatusCode::CREATED
    );
    assert_eq!(shop.runs(), 1, "the second instance replayed");

    // A handler in flight when Redis stops answering: its client still gets its response,
    // and waits for the failed store no longer than the timeout.
    let in_flight = tokio::spawn({
        let closed = closed.clone();
        async move { post_key(&closed, "/gated", "in-flight").await }
    });
    shop.until_runs(2).await;
    server.command(&["CLIENT", "PAUSE", "3000", "ALL"]);
    let paused_at = Instant::now();
    shop.open_gate();
    let answered = in_flight.await.unwrap();
    assert_eq!(answered.status(), StatusCode::CREATED);

    // New requests: 503 when failing closed, unguarded when failing open; neither hangs.
    let started = Instant::now();
    let refused = Seen::of(post_key(&closed, "/pay", "during").await).await;
    assert!(
        started.elapsed() < TIMEOUT + SLACK,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.problem(), "store-unavailable");
    assert_eq!(refused.header("retry-after"), Some(b"1".as_slice()));
    let started = Instant::now();
    let let_through = post_key(&open, "/pay", "during").await;
    assert!(
        started.elapsed() < TIMEOUT + SLACK,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(let_through.status(), StatusCode::CREATED);
    assert_eq!(shop.runs(), 3);
    assert!(
        paused_at.elapsed() < Duration::from_secs(3),
        "the checks ran while Redis was paused"
    );

    // Redis gone for good: the same answers, as fast.
    drop(server);
    let started = Instant::now();
    assert_eq!(
        post_key(&closed, "/pay", "after").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(
        started.elapsed() < TIMEOUT + SLACK,
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_requests_leave_no_key_in_redis() {
    let server = RedisServer::start();
    let shop = Shop::new();
    let app = app(server.store(), &shop);
    for bad in invalid_keys() {
        let request = Request::post("/pay")
            .header(&CLIENT, "alice")
            .header(&KEY, bad)
            .body(Body::from("{}"))
            .unwrap();
        assert_eq!(send(&app, request).await.status(), StatusCode::BAD_REQUEST);
    }
    let missing = send(&app, request("/required", "alice", None, "{}")).await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    let large = format!(r#"{{"note":"{}"}}"#, "x".repeat(100));
    let too_large = send(&app, request("/limited", "alice", Some("k"), &large)).await;
    assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(server.keys(), Vec::<String>::new());

    // A server error's record is removed as well.
    post_key(&app, "/failing", "flaky").await;
    assert_eq!(server.keys(), Vec::<String>::new());
    assert_eq!(shop.runs(), 1);
}
