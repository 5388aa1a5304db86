//! `IdempotencyLayer` over HTTP, on `MemoryStore` and on a real Redis. Every claim that a
//! handler ran once counts how often its body ran, not only the status codes.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::{HeaderName, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use idem_axum::client::ClientHeader;
use idem_axum::idempotency::{Idempotency, IdempotencyRecord, RecordScope};
use idem_axum::{Idem, IdempotencyLayer, StoreFailure, store::Store};
use idem_tests::{Backend, RedisServer, Shop, all_at_once, eventually, send};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;

idem_tests::on_every_store!(
    three_hundred_concurrent_requests_run_the_handler_once,
    a_replay_is_the_first_response_byte_for_byte,
    a_record_its_handler_completed_is_replayed_as_the_handler_stored_it,
    the_same_key_with_another_request_is_422,
    a_new_router_on_the_same_store_still_replays,
    a_handler_three_times_longer_than_its_lease_runs_once,
    a_client_that_disconnects_mid_handler_still_gets_its_response_stored,
    a_server_error_is_not_stored_and_a_retry_runs_again,
    a_panic_removes_the_record,
    invalid_keys_are_refused_before_the_handler,
    a_required_key_that_is_missing_is_400_and_an_optional_one_passes,
    unguarded_methods_pass_through_untouched,
    an_oversize_request_body_is_413_and_stores_nothing,
    a_response_too_large_to_store_reaches_its_client_and_never_runs_again,
    keys_are_scoped_by_client,
    a_key_function_dedupes_callbacks_from_any_address,
    the_same_key_on_another_nested_route_runs_that_route,
    a_key_reused_under_another_nest_prefix_is_422,
    outside_the_router_a_key_is_scoped_by_the_request_path,
    a_shared_key_never_replays_a_cookie_and_a_client_key_does,
    compression_outside_the_layer_compresses_each_replay_for_its_own_request,
    a_response_compressed_inside_the_layer_is_replayed_only_to_requests_that_accept_it,
);

/// A payment: 201, JSON naming the run, and two cookies.
async fn pay(State(shop): State<Shop>) -> Response {
    let run = shop.ran();
    (
        StatusCode::CREATED,
        AppendHeaders([
            (header::SET_COOKIE, "receipt=r1; Path=/; HttpOnly"),
            (header::SET_COOKIE, "theme=dark; Path=/"),
            (header::CACHE_CONTROL, "no-store"),
        ]),
        Json(serde_json::json!({ "payment": run })),
    )
        .into_response()
}

async fn gated(State(shop): State<Shop>) -> (StatusCode, String) {
    let run = shop.ran();
    shop.pass_gate().await;
    (StatusCode::CREATED, format!("order {run}"))
}

async fn long(State(shop): State<Shop>) -> (StatusCode, String) {
    let run = shop.ran();
    tokio::time::sleep(3 * SHORT_LEASE).await;
    (StatusCode::CREATED, format!("long {run}"))
}

async fn failing(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    StatusCode::INTERNAL_SERVER_ERROR
}

async fn panicking(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    panic!("a bug in the handler");
}

async fn big(State(shop): State<Shop>) -> Vec<u8> {
    shop.ran();
    vec![b'x'; 4 * 1024]
}

/// A receipt long enough for `CompressionLayer` to compress.
fn receipt_text(run: usize) -> String {
    format!("receipt {run}: {}", "one refund of 100, ".repeat(20))
}

async fn receipt(State(shop): State<Shop>) -> (StatusCode, String) {
    (StatusCode::CREATED, receipt_text(shop.ran()))
}

/// Completes its own record, as a handler on a SQL store does inside its transaction.
async fn completes_itself(
    State(shop): State<Shop>,
    Extension(idem): Extension<Idem>,
    record: IdempotencyRecord,
) -> Response {
    let run = shop.ran();
    let response = (
        StatusCode::CREATED,
        format!("order {run}, stored by its handler"),
    );
    let (stored, response) = record
        .stored_response(response)
        .await
        .expect("a body that reads");
    let completed = idem
        .store()
        .complete_record(record.key(), record.owner(), stored, record.retention())
        .await
        .expect("the store answers");
    assert!(
        completed,
        "the record the layer began is the handler's to complete"
    );
    response
}

/// Says whether the request came with a record.
async fn record_if_any(State(shop): State<Shop>, record: Option<IdempotencyRecord>) -> String {
    shop.ran();
    format!("record: {}", record.is_some())
}

async fn callback(State(shop): State<Shop>) -> String {
    format!("acknowledged {}", shop.ran())
}

const CLIENT: HeaderName = HeaderName::from_static("x-client");
const KEY: HeaderName = HeaderName::from_static("idempotency-key");
const REPLAYED: &str = "idempotent-replayed";
const SHORT_LEASE: Duration = Duration::from_millis(300);

#[derive(serde::Deserialize)]
struct Notification {
    source: String,
    seq: u64,
}

fn routes(shop: &Shop) -> Router {
    let guarded = IdempotencyLayer::new;
    Router::new()
        .route("/pay", post(pay).get(pay).route_layer(guarded()))
        .route("/other", post(pay).route_layer(guarded()))
        .route("/carts/{cart}", post(pay).route_layer(guarded()))
        .route(
            "/compressed-outside",
            post(receipt)
                .route_layer(guarded())
                .layer(CompressionLayer::new()),
        )
        .route(
            "/compressed-inside",
            post(receipt)
                .layer(CompressionLayer::new())
                .route_layer(guarded()),
        )
        .route(
            "/shared-pay",
            post(pay).route_layer(guarded().with_record_scope(RecordScope::Shared)),
        )
        .route("/gated", post(gated).route_layer(guarded()))
        .route(
            "/completes-itself",
            post(completes_itself).route_layer(guarded().with_required(true)),
        )
        .route("/completes-unguarded", post(completes_itself))
        .route("/record-if-any", post(record_if_any).route_layer(guarded()))
        .route(
            "/long",
            post(long).route_layer(guarded().with_lease(SHORT_LEASE)),
        )
        .route("/failing", post(failing).route_layer(guarded()))
        .route("/panicking", post(panicking).route_layer(guarded()))
        .route(
            "/required",
            post(pay).route_layer(guarded().with_required(true)),
        )
        .route(
            "/limited",
            post(pay)
                .route_layer(guarded())
                .layer(DefaultBodyLimit::max(64)),
        )
        .route(
            "/big",
            post(big).route_layer(guarded().with_max_stored_response(1024)),
        )
        .route("/big/storable", post(big).route_layer(guarded()))
        .route(
            "/callback",
            post(callback).route_layer(
                guarded()
                    .with_record_scope(RecordScope::Shared)
                    .with_required(true)
                    .with_idempotency_key_fn(|_head, body| {
                        let notification: Notification = serde_json::from_slice(body).ok()?;
                        Some(format!("{}:{}", notification.source, notification.seq))
                    })
                    .with_missing_key_message("a notification names its `source` and `seq`"),
            ),
        )
        .with_state(shop.clone())
}

/// The shop's router under an `Idem` on `store`, clients told apart by `X-Client`.
fn app<S: Store>(store: S, shop: &Shop) -> Router {
    app_with(store, shop, StoreFailure::FailClosed)
}

fn app_with<S: Store>(store: S, shop: &Shop, policy: StoreFailure) -> Router {
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .with_store_failure(policy)
        .build();
    routes(shop)
        .layer(CatchPanicLayer::new())
        .layer(idem.layer())
}

fn request(path: &str, client: &str, key: Option<&str>, body: &str) -> Request<Body> {
    let mut request = Request::post(path)
        .header(&CLIENT, client)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        request = request.header(&KEY, key);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}

/// `POST path` from alice with `key` and a fixed body.
async fn post_key(app: &Router, path: &str, key: &str) -> Response {
    send(app, request(path, "alice", Some(key), r#"{"amount":100}"#)).await
}

/// A response taken apart: status, every header in order, body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    status: StatusCode,
    headers: Vec<(String, Vec<u8>)>,
    body: Bytes,
}

impl Seen {
    async fn of(response: Response) -> Self {
        let (parts, body) = response.into_parts();
        Self {
            status: parts.status,
            headers: parts
                .headers
                .iter()
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                .collect(),
            body: axum::body::to_bytes(body, usize::MAX).await.unwrap(),
        }
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_slice())
    }

    fn replayed(&self) -> bool {
        self.header(REPLAYED) == Some(b"true")
    }

    /// The response without the `Idempotent-Replayed` marker.
    fn unmarked(&self) -> Self {
        let mut unmarked = self.clone();
        unmarked.headers.retain(|(name, _)| name != REPLAYED);
        unmarked
    }

    /// The problem's `type` tail, for a problem+json answer.
    fn problem(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some(b"application/problem+json".as_slice()),
            "{self:?}"
        );
        let problem: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        let kind = problem["type"].as_str().unwrap();
        kind.trim_start_matches("tag:idem-rs,2026:").to_owned()
    }

    fn detail(&self) -> String {
        let problem: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        problem["detail"].as_str().unwrap().to_owned()
    }
}

async fn three_hundred_concurrent_requests_run_the_handler_once<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let answers = all_at_once(300, |_| {
        let app = app.clone();
        async move { Seen::of(post_key(&app, "/pay", "\"order-1\"").await).await }
    })
    .await;
    assert_eq!(shop.runs(), 1, "the handler ran once");
    let first: Vec<_> = answers
        .iter()
        .filter(|seen| seen.status == StatusCode::CREATED && !seen.replayed())
        .collect();
    assert_eq!(first.len(), 1, "one answer is the handler's own");
    let (mut conflicts, mut replays) = (0, 0);
    for seen in &answers {
        if seen.status == StatusCode::CONFLICT {
            assert_eq!(seen.problem(), "request-in-progress");
            assert_eq!(seen.header("retry-after"), Some(b"1".as_slice()));
            conflicts += 1;
        } else if seen.replayed() {
            assert_eq!(&seen.unmarked(), first[0], "a replay is the first response");
            replays += 1;
        }
    }
    assert_eq!(
        1 + conflicts + replays,
        300,
        "every other answer is a 409 or a replay"
    );
}

async fn a_replay_is_the_first_response_byte_for_byte<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let first = Seen::of(post_key(&app, "/pay", "bare-key-1").await).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    let cookies = first
        .headers
        .iter()
        .filter(|(n, _)| n == "set-cookie")
        .count();
    assert_eq!(cookies, 2, "{first:?}");

    let replay = Seen::of(post_key(&app, "/pay", "bare-key-1").await).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(replay.unmarked(), first, "status, every header, body");
    assert_eq!(shop.runs(), 1);

    // The quoted form of the same key is the same key.
    let quoted = Seen::of(post_key(&app, "/pay", "\"bare-key-1\"").await).await;
    assert_eq!(quoted.unmarked(), first);
    assert_eq!(shop.runs(), 1);
}

async fn a_record_its_handler_completed_is_replayed_as_the_handler_stored_it<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let first = Seen::of(post_key(&app, "/completes-itself", "own-1").await).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.body, "order 1, stored by its handler");
    let replay = Seen::of(post_key(&app, "/completes-itself", "own-1").await).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(
        replay.unmarked(),
        first,
        "what the handler stored, byte for byte"
    );
    assert_eq!(shop.runs(), 1);

    // Where a key is optional, the handler sees whether a record was begun.
    let with_key = send(
        &app,
        request("/record-if-any", "alice", Some("own-2"), "{}"),
    )
    .await;
    assert_eq!(idem_tests::body_text(with_key).await, "record: true");
    let without = send(&app, request("/record-if-any", "alice", None, "{}")).await;
    assert_eq!(idem_tests::body_text(without).await, "record: false");

    // A handler that takes the record on a route without the layer names what is missing.
    let unguarded = send(
        &app,
        request("/completes-unguarded", "alice", Some("own-3"), "{}"),
    )
    .await;
    assert_eq!(unguarded.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        idem_tests::body_text(unguarded)
            .await
            .contains("IdempotencyLayer")
    );
    assert_eq!(shop.runs(), 3, "the handler without a record never ran");
}

async fn the_same_key_with_another_request_is_422<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    assert_eq!(
        post_key(&app, "/pay", "k").await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        post_key(&app, "/carts/1", "k").await.status(),
        StatusCode::CREATED
    );
    let other_body = request("/pay", "alice", Some("k"), r#"{"amount":999}"#);
    let other_query = request("/pay?currency=eur", "alice", Some("k"), r#"{"amount":100}"#);
    // One route, another path.
    let other_path = request("/carts/2", "alice", Some("k"), r#"{"amount":100}"#);
    for other in [other_body, other_query, other_path] {
        let seen = Seen::of(send(&app, other).await).await;
        assert_eq!(seen.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(seen.problem(), "idempotency-key-reused");
    }
    assert_eq!(shop.runs(), 2);
    // The original requests still replay.
    assert!(Seen::of(post_key(&app, "/pay", "k").await).await.replayed());
    assert!(
        Seen::of(post_key(&app, "/carts/1", "k").await)
            .await
            .replayed()
    );
    // Another route with the key is another operation: it runs.
    let other_route = Seen::of(post_key(&app, "/other", "k").await).await;
    assert!(!other_route.replayed(), "{other_route:?}");
    assert_eq!(shop.runs(), 3);
}

async fn a_new_router_on_the_same_store_still_replays<B: Backend>() {
    let backend = B::start().await;
    let before_restart = Shop::new();
    let first = {
        let app = app(backend.store(), &before_restart);
        Seen::of(post_key(&app, "/pay", "survives-restarts").await).await
    };
    let after_restart = Shop::new();
    let app = app(backend.store_of_another_instance(), &after_restart);
    let replay = Seen::of(post_key(&app, "/pay", "survives-restarts").await).await;
    assert!(replay.replayed());
    assert_eq!(replay.unmarked(), first);
    assert_eq!(
        after_restart.runs(),
        0,
        "the new instance did not run the handler"
    );
}

async fn a_handler_three_times_longer_than_its_lease_runs_once<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let started = Instant::now();
    let first = tokio::spawn({
        let app = app.clone();
        async move { Seen::of(post_key(&app, "/long", "long-1").await).await }
    });
    shop.until_runs(1).await;
    // Retries throughout the handler's run, well past its first lease.
    let mut conflicts_after_the_lease = 0;
    while !first.is_finished() {
        let seen = Seen::of(post_key(&app, "/long", "long-1").await).await;
        assert!(
            seen.status == StatusCode::CONFLICT || seen.replayed(),
            "a retry during the run is a 409, never a second run: {seen:?}"
        );
        if seen.status == StatusCode::CONFLICT && started.elapsed() > 2 * SHORT_LEASE {
            conflicts_after_the_lease += 1;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        conflicts_after_the_lease > 0,
        "retries came after the lease"
    );
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    let replay = Seen::of(post_key(&app, "/long", "long-1").await).await;
    assert_eq!(replay.unmarked(), first);
    assert_eq!(shop.runs(), 1);
}

async fn a_client_that_disconnects_mid_handler_still_gets_its_response_stored<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let abandoned = tokio::spawn({
        let app = app.clone();
        async move { post_key(&app, "/gated", "walk-away").await }
    });
    shop.until_runs(1).await;
    abandoned.abort(); // the client goes away: the request's future is dropped
    assert!(abandoned.await.unwrap_err().is_cancelled());
    let retry = Seen::of(post_key(&app, "/gated", "walk-away").await).await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "the handler still runs");
    shop.open_gate();
    eventually(Duration::from_secs(5), "the response is stored", || {
        let app = app.clone();
        async move {
            let seen = Seen::of(post_key(&app, "/gated", "walk-away").await).await;
            seen.replayed()
        }
    })
    .await;
    let replay = Seen::of(post_key(&app, "/gated", "walk-away").await).await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.body, "order 1");
    assert_eq!(shop.runs(), 1);
}

async fn a_server_error_is_not_stored_and_a_retry_runs_again<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    for run in 1..=2 {
        let seen = Seen::of(post_key(&app, "/failing", "flaky").await).await;
        assert_eq!(seen.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!seen.replayed());
        assert_eq!(shop.runs(), run);
    }
}

async fn a_panic_removes_the_record<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let seen = post_key(&app, "/panicking", "boom").await;
    assert_eq!(
        seen.status(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "CatchPanicLayer's"
    );
    assert_eq!(shop.runs(), 1);
    // The record is removed in the background as the panic unwinds; retry until it is.
    eventually(
        Duration::from_secs(5),
        "a retry runs the handler again",
        || {
            let (app, shop) = (app.clone(), shop.clone());
            async move {
                post_key(&app, "/panicking", "boom").await;
                shop.runs() == 2
            }
        },
    )
    .await;
}

async fn invalid_keys_are_refused_before_the_handler<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
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

fn invalid_keys() -> Vec<HeaderValue> {
    let texts = [
        String::new(),
        "\"\"".to_owned(),
        "k".repeat(256),
        format!("\"{}\"", "k".repeat(256)),
        "\"tab\there\"".to_owned(),
        "\"unterminated".to_owned(),
        r#""bad \n escape""#.to_owned(),
        "\"key\";param=1".to_owned(),
        "\"a\", \"b\"".to_owned(),
        "two words".to_owned(),
    ];
    let mut keys: Vec<HeaderValue> = texts
        .iter()
        .map(|text| HeaderValue::from_str(text).unwrap())
        .collect();
    keys.push(HeaderValue::from_bytes("\"caf\u{e9}\"".as_bytes()).unwrap());
    keys.push(HeaderValue::from_bytes(b"caf\xe9").unwrap());
    keys
}

async fn a_required_key_that_is_missing_is_400_and_an_optional_one_passes<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
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

async fn unguarded_methods_pass_through_untouched<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
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

async fn an_oversize_request_body_is_413_and_stores_nothing<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let large = format!(r#"{{"note":"{}"}}"#, "x".repeat(100));
    let seen = send(&app, request("/limited", "alice", Some("k"), &large)).await;
    assert_eq!(seen.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(shop.runs(), 0);
    // No record was left: the same key with a small body is a first request, not a 422.
    let small = send(&app, request("/limited", "alice", Some("k"), "{}")).await;
    assert_eq!(small.status(), StatusCode::CREATED);
    assert_eq!(shop.runs(), 1);
}

async fn a_response_too_large_to_store_reaches_its_client_and_never_runs_again<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let first = Seen::of(post_key(&app, "/big", "big-1").await).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.body.len(),
        4 * 1024,
        "the first client gets all of it"
    );
    for _ in 0..2 {
        let retry = Seen::of(post_key(&app, "/big", "big-1").await).await;
        assert_eq!(retry.status, StatusCode::CONFLICT);
        assert_eq!(retry.problem(), "response-not-replayable");
        assert_eq!(retry.header("retry-after"), None, "retrying will not help");
        assert!(retry.detail().contains("status 200"), "{}", retry.detail());
    }
    assert_eq!(shop.runs(), 1);
}

async fn keys_are_scoped_by_client<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    for client in ["alice", "bob"] {
        let seen = Seen::of(send(&app, request("/pay", client, Some("same"), "{}")).await).await;
        assert_eq!(seen.status, StatusCode::CREATED);
        assert!(!seen.replayed(), "{client} has keys of its own");
    }
    assert_eq!(shop.runs(), 2);
    let anonymous = Request::post("/pay")
        .header(&KEY, "same")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&app, anonymous).await.status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(shop.runs(), 2);
}

async fn a_key_function_dedupes_callbacks_from_any_address<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let notification = r#"{"source":"alipay","seq":42,"amount":100}"#;
    let front = Seen::of(
        send(
            &app,
            request("/callback", "front-channel", None, notification),
        )
        .await,
    )
    .await;
    assert_eq!(front.body, "acknowledged 1");
    let back = Seen::of(
        send(
            &app,
            request("/callback", "back-channel", None, notification),
        )
        .await,
    )
    .await;
    assert!(back.replayed(), "the second delivery is a replay: {back:?}");
    assert_eq!(back.body, "acknowledged 1");
    let next = r#"{"source":"alipay","seq":43,"amount":100}"#;
    let seen = Seen::of(send(&app, request("/callback", "front-channel", None, next)).await).await;
    assert_eq!(seen.body, "acknowledged 2");
    let unnamed =
        Seen::of(send(&app, request("/callback", "front-channel", None, "{}")).await).await;
    assert_eq!(unnamed.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        unnamed.detail(),
        "a notification names its `source` and `seq`"
    );
    assert_eq!(shop.runs(), 2);
}

/// A router with one guarded `POST /` whose handler answers `"{name} {run}"`, for nesting.
fn endpoint(name: &'static str, shop: &Shop, scope: RecordScope) -> Router {
    Router::new()
        .route(
            "/",
            post(move |State(shop): State<Shop>| async move {
                (StatusCode::CREATED, format!("{name} {}", shop.ran()))
            }),
        )
        .route_layer(IdempotencyLayer::new().with_record_scope(scope))
        .with_state(shop.clone())
}

fn idem_on<S: Store>(store: S) -> Idem {
    Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build()
}

async fn the_same_key_on_another_nested_route_runs_that_route<B: Backend>() {
    let backend = B::start().await;
    let idem = idem_on(backend.store());
    for scope in [RecordScope::Client, RecordScope::Shared] {
        let (orders, refunds) = (Shop::new(), Shop::new());
        // Under `nest` both handlers see the path `/`.
        let app = Router::new()
            .nest("/orders", endpoint("order", &orders, scope))
            .nest("/refunds", endpoint("refund", &refunds, scope))
            .layer(idem.layer());
        let key = format!("{scope:?}-1");
        let order = Seen::of(post_key(&app, "/orders", &key).await).await;
        assert_eq!(order.status, StatusCode::CREATED, "{scope:?}: {order:?}");
        assert_eq!(order.body, "order 1");
        let refund = Seen::of(post_key(&app, "/refunds", &key).await).await;
        assert!(!refund.replayed(), "{scope:?}: {refund:?}");
        assert_eq!(refund.status, StatusCode::CREATED, "{scope:?}: {refund:?}");
        assert_eq!(refund.body, "refund 1", "{scope:?}: the refund ran");
        assert_eq!((orders.runs(), refunds.runs()), (1, 1), "{scope:?}");
        // Each route still replays its own response.
        for (path, body) in [("/orders", "order 1"), ("/refunds", "refund 1")] {
            let retry = Seen::of(post_key(&app, path, &key).await).await;
            assert!(retry.replayed(), "{scope:?} {path}: {retry:?}");
            assert_eq!(retry.body, body, "{scope:?} {path}");
        }
        assert_eq!((orders.runs(), refunds.runs()), (1, 1), "{scope:?}");
    }
}

async fn a_key_reused_under_another_nest_prefix_is_422<B: Backend>() {
    let backend = B::start().await;
    let orders = Shop::new();
    // One route, `/{shop}/orders`; its handler sees `/` whichever shop is asked.
    let app = Router::new()
        .nest(
            "/{shop}/orders",
            endpoint("order", &orders, RecordScope::Client),
        )
        .layer(idem_on(backend.store()).layer());
    let first = Seen::of(post_key(&app, "/acme/orders", "k").await).await;
    assert_eq!(first.body, "order 1");
    let other_shop = Seen::of(post_key(&app, "/globex/orders", "k").await).await;
    assert_eq!(
        other_shop.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "another shop's order is another request: {other_shop:?}"
    );
    assert_eq!(other_shop.problem(), "idempotency-key-reused");
    assert_eq!(orders.runs(), 1);
    assert!(
        Seen::of(post_key(&app, "/acme/orders", "k").await)
            .await
            .replayed()
    );
}

async fn outside_the_router_a_key_is_scoped_by_the_request_path<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    // Around a whole router no route has matched yet: the request's path is the scope.
    let unguarded = Router::new()
        .route("/pay", post(pay))
        .route("/other", post(pay))
        .with_state(shop.clone());
    let guarded = Idempotency::new(unguarded, IdempotencyLayer::new());
    let app = Router::new()
        .fallback_service(guarded)
        .layer(idem_on(backend.store()).layer());
    let pay = Seen::of(post_key(&app, "/pay", "k").await).await;
    let other = Seen::of(post_key(&app, "/other", "k").await).await;
    assert!(!other.replayed(), "{other:?}");
    assert_eq!(
        (pay.status, other.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert_eq!(shop.runs(), 2);
    assert!(Seen::of(post_key(&app, "/pay", "k").await).await.replayed());
    assert_eq!(shop.runs(), 2);
}

async fn a_shared_key_never_replays_a_cookie_and_a_client_key_does<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let cookies = |seen: &Seen| {
        seen.headers
            .iter()
            .filter(|(name, _)| name == "set-cookie")
            .count()
    };

    let first = Seen::of(post_key(&app, "/shared-pay", "shared-1").await).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(cookies(&first), 2, "the first client gets its cookies");
    let replay = Seen::of(
        send(
            &app,
            request("/shared-pay", "bob", Some("shared-1"), r#"{"amount":100}"#),
        )
        .await,
    )
    .await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(
        cookies(&replay),
        0,
        "another client never gets them: {replay:?}"
    );
    let mut without_cookies = first.clone();
    without_cookies
        .headers
        .retain(|(name, _)| name != "set-cookie");
    assert_eq!(
        replay.unmarked(),
        without_cookies,
        "status, other headers, body"
    );
    assert_eq!(shop.runs(), 1);

    // A client's own key replays to that client only: its cookies with it.
    let first = Seen::of(post_key(&app, "/pay", "own-1").await).await;
    let replay = Seen::of(post_key(&app, "/pay", "own-1").await).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(cookies(&replay), 2, "{replay:?}");
    assert_eq!(replay.unmarked(), first);
    assert_eq!(shop.runs(), 2);
}

/// `POST path` from alice with `key`, accepting `accept` encodings (none when `None`).
async fn post_accepting(app: &Router, path: &str, key: &str, accept: Option<&str>) -> Seen {
    let mut request = request(path, "alice", Some(key), r#"{"amount":100}"#);
    if let Some(accept) = accept {
        let accept = HeaderValue::from_str(accept).unwrap();
        request
            .headers_mut()
            .insert(header::ACCEPT_ENCODING, accept);
    }
    Seen::of(send(app, request).await).await
}

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(bytes), &mut text)
        .expect("a gzip body");
    text
}

async fn compression_outside_the_layer_compresses_each_replay_for_its_own_request<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let path = "/compressed-outside";
    let first = post_accepting(&app, path, "r1", Some("gzip")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.header("content-encoding"), Some(b"gzip".as_slice()));
    assert_eq!(gunzip(&first.body), receipt_text(1));

    // The stored response is the handler's own: a retry that accepts no coding reads it.
    let plain = post_accepting(&app, path, "r1", None).await;
    assert!(plain.replayed(), "{plain:?}");
    assert_eq!(plain.status, StatusCode::CREATED);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.body, receipt_text(1).as_bytes(), "byte for byte");

    let gzip = post_accepting(&app, path, "r1", Some("gzip")).await;
    assert!(gzip.replayed(), "{gzip:?}");
    assert_eq!(gzip.header("content-encoding"), Some(b"gzip".as_slice()));
    assert_eq!(gunzip(&gzip.body), receipt_text(1));
    assert_eq!(shop.runs(), 1);
}

async fn a_response_compressed_inside_the_layer_is_replayed_only_to_requests_that_accept_it<
    B: Backend,
>() {
    let backend = B::start().await;
    let shop = Shop::new();
    let app = app(backend.store(), &shop);
    let path = "/compressed-inside";
    let first = post_accepting(&app, path, "r1", Some("gzip")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.header("content-encoding"), Some(b"gzip".as_slice()));
    assert_eq!(gunzip(&first.body), receipt_text(1));

    for accept in [Some("gzip"), Some("br, GZIP;q=0.5"), Some("*")] {
        let replay = post_accepting(&app, path, "r1", accept).await;
        assert!(replay.replayed(), "{accept:?}: {replay:?}");
        assert_eq!(replay.unmarked(), first, "{accept:?}");
    }
    // A retry that could not read gzip gets no gzip bytes, and the handler does not run
    // again: the request was processed.
    for accept in [None, Some("br"), Some("identity"), Some("gzip;q=0, *")] {
        let refused = post_accepting(&app, path, "r1", accept).await;
        assert_eq!(
            refused.status,
            StatusCode::CONFLICT,
            "{accept:?}: {refused:?}"
        );
        assert_eq!(refused.problem(), "response-not-replayable", "{accept:?}");
        assert_eq!(refused.header("retry-after"), None, "{accept:?}");
        assert!(
            refused.detail().contains("`Accept-Encoding: gzip`"),
            "{accept:?}: {}",
            refused.detail()
        );
    }
    assert_eq!(shop.runs(), 1);
}

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
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.body.len(),
        4 * 1024,
        "the first client gets all of it"
    );
    let retry = Seen::of(post_key(&app, "/big/storable", "no-room").await).await;
    assert_eq!(retry.status, StatusCode::CONFLICT);
    assert_eq!(retry.problem(), "response-not-replayable");
    assert_eq!(shop.runs(), 1);
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
