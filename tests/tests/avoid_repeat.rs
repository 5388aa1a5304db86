//! `#[avoid_repeat]` and `AvoidRepeatLayer` over HTTP, on `MemoryStore` and on a real
//! Redis. Every concurrency claim counts how often the handler body ran, not only the
//! status codes.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderName, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use idem_axum::identity::ClientHeader;
use idem_axum::{AvoidRepeatLayer, Idem, Release, RepeatBy, avoid_repeat, store::Store};
use idem_tests::{
    Backend, Shop, all_at_once, assert_ran_once, assert_refused_page, body_text, count, eventually,
    send, shop_on, shop_on_two_instances,
};
use tower_http::catch_panic::CatchPanicLayer;

idem_tests::on_every_store!(
    five_hundred_identical_posts_run_the_body_once,
    two_instances_on_one_store_run_the_body_once,
    clients_do_not_block_each_other,
    a_repeat_after_the_window_is_accepted,
    finish_releases_when_the_response_is_produced,
    a_server_error_releases_the_key,
    a_panic_releases_the_key,
    an_abandoned_request_keeps_its_window_and_its_handler_finishes,
    finish_releases_when_an_abandoned_handler_really_finishes,
    a_different_payload_is_not_a_repeat,
    bad_input_takes_no_key,
    a_refusal_of_bad_input_frees_the_key,
);

#[derive(serde::Deserialize)]
struct Transfer {
    amount: u64,
}

#[avoid_repeat(timeout = "30s")]
async fn place_order(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

#[avoid_repeat(timeout = "30s", release = "finish")]
async fn slow_order(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    shop.pass_gate().await;
    StatusCode::CREATED
}

#[avoid_repeat(timeout = "300ms")]
async fn short_window(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

#[avoid_repeat(timeout = "30s")]
async fn failing(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    StatusCode::SERVICE_UNAVAILABLE
}

#[avoid_repeat(timeout = "30s")]
async fn panicking(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    panic!("a bug in the handler");
}

#[avoid_repeat(timeout = "30s")]
async fn committing(State(shop): State<Shop>) -> StatusCode {
    shop.commit_then_wait().await
}

#[avoid_repeat(timeout = "30s", release = "finish")]
async fn committing_finish(State(shop): State<Shop>) -> StatusCode {
    shop.commit_then_wait().await
}

/// Refuses an amount of 0 itself, after its extractor accepted the body.
#[avoid_repeat(timeout = "30s")]
async fn validating(State(shop): State<Shop>, Json(transfer): Json<Transfer>) -> StatusCode {
    plain_validating(State(shop), Json(transfer)).await
}

#[avoid_repeat(timeout = "30s", by = "client+body")]
async fn transfer(State(shop): State<Shop>, Json(transfer): Json<Transfer>) -> String {
    shop.ran();
    transfer.amount.to_string()
}

#[avoid_repeat(timeout = "30s")]
async fn strict(State(shop): State<Shop>, Json(_transfer): Json<Transfer>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

#[avoid_repeat(timeout = "30s", message = "请勿重复提交")]
async fn localized(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

/// The same handlers without the attribute, guarded by `AvoidRepeatLayer` instead.
async fn plain_order(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

async fn plain_slow_order(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    shop.pass_gate().await;
    StatusCode::CREATED
}

async fn plain_transfer(State(shop): State<Shop>, Json(transfer): Json<Transfer>) -> String {
    shop.ran();
    transfer.amount.to_string()
}

async fn plain_committing(State(shop): State<Shop>) -> StatusCode {
    shop.commit_then_wait().await
}

async fn plain_validating(State(shop): State<Shop>, Json(transfer): Json<Transfer>) -> StatusCode {
    if transfer.amount == 0 {
        return StatusCode::UNPROCESSABLE_ENTITY;
    }
    shop.ran();
    StatusCode::CREATED
}

const CLIENT: HeaderName = HeaderName::from_static("x-client");
const WINDOW: Duration = Duration::from_secs(30);

/// The signed-in user, an extractor of the application's own, from `x-user-id`.
struct CurrentUser(String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for CurrentUser {
    type Rejection = StatusCode;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let user = parts
            .headers
            .get("x-user-id")
            .ok_or(StatusCode::UNAUTHORIZED)?;
        let user = user.to_str().map_err(|_| StatusCode::BAD_REQUEST)?;
        Ok(Self(user.to_owned()))
    }
}

#[avoid_repeat(timeout = "30s")]
async fn as_user(State(shop): State<Shop>, user: CurrentUser) -> (StatusCode, String) {
    shop.ran();
    (StatusCode::CREATED, user.0)
}

fn routes(shop: &Shop) -> Router {
    Router::new()
        .route("/orders", post(place_order))
        .route("/as-user", post(as_user))
        .route("/slow", post(slow_order))
        .route("/short", post(short_window))
        .route("/failing", post(failing))
        .route("/panicking", post(panicking))
        .route("/committing", post(committing))
        .route("/committing/finish", post(committing_finish))
        .route("/validating", post(validating))
        .route("/transfer", post(transfer))
        .route("/strict", post(strict))
        .route("/localized", post(localized))
        .route(
            "/layered/orders",
            post(plain_order).route_layer(AvoidRepeatLayer::new(WINDOW)),
        )
        .route(
            "/layered/slow",
            post(plain_slow_order)
                .route_layer(AvoidRepeatLayer::new(WINDOW).with_release(Release::Finish)),
        )
        .route(
            "/layered/transfer",
            post(plain_transfer)
                .route_layer(AvoidRepeatLayer::new(WINDOW).with_repeat_by(RepeatBy::ClientAndBody)),
        )
        .route(
            "/layered/committing",
            post(plain_committing).route_layer(AvoidRepeatLayer::new(WINDOW)),
        )
        .route(
            "/layered/committing/finish",
            post(plain_committing)
                .route_layer(AvoidRepeatLayer::new(WINDOW).with_release(Release::Finish)),
        )
        .route(
            "/layered/validating",
            post(plain_validating).route_layer(AvoidRepeatLayer::new(WINDOW)),
        )
        .with_state(shop.clone())
}

/// The shop's router under an `Idem` on `store`, clients told apart by `X-Client`.
fn app<S: Store>(store: S, shop: &Shop) -> Router {
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientHeader::new(CLIENT))
        .build();
    routes(shop)
        .layer(CatchPanicLayer::new())
        .layer(idem.layer())
}

fn request(path: &str, client: &str) -> axum::http::request::Builder {
    Request::post(path).header(&CLIENT, client)
}

async fn post_as(app: &Router, path: &str, client: &str) -> Response {
    send(app, request(path, client).body(Body::empty()).unwrap()).await
}

async fn post_json(app: &Router, path: &str, client: &str, json: &str) -> Response {
    let request = request(path, client)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json.to_owned()))
        .unwrap();
    send(app, request).await
}

async fn five_hundred_identical_posts_run_the_body_once<B: Backend>() {
    let backend = B::start().await;
    for path in ["/orders", "/layered/orders"] {
        let shop = Shop::new();
        let app = app(backend.store(), &shop);
        let responses = all_at_once(500, |_| {
            let app = app.clone();
            async move { post_as(&app, path, "alice").await }
        })
        .await;
        let statuses: Vec<StatusCode> = responses.iter().map(Response::status).collect();
        assert_eq!(shop.runs(), 1, "{path}: the body ran once");
        assert_eq!(count(&statuses, StatusCode::CREATED), 1, "{path}");
        assert_eq!(count(&statuses, StatusCode::CONFLICT), 499, "{path}");
        for response in responses
            .iter()
            .filter(|r| r.status() == StatusCode::CONFLICT)
        {
            let retry_after: u64 = response.headers()[header::RETRY_AFTER]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                (1..=30).contains(&retry_after),
                "{path}: Retry-After {retry_after}"
            );
        }
    }
}

async fn two_instances_on_one_store_run_the_body_once<B: Backend>() {
    let (_backend, shop, instances) = shop_on_two_instances::<B>(app).await;
    let responses = all_at_once(500, |i| {
        let app = instances[i % 2].clone();
        async move { post_as(&app, "/orders", "alice").await.status() }
    })
    .await;
    assert_eq!(responses.len(), 500);
    assert_ran_once(&shop, &responses);
}

async fn clients_do_not_block_each_other<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    // 50 clients, each double-clicking four times, all at once.
    let responses = all_at_once(200, |i| {
        let app = app.clone();
        async move {
            (
                i % 50,
                post_as(&app, "/orders", &format!("client-{}", i % 50))
                    .await
                    .status(),
            )
        }
    })
    .await;
    assert_eq!(shop.runs(), 50);
    for client in 0..50 {
        let created = responses
            .iter()
            .filter(|(c, status)| *c == client && *status == StatusCode::CREATED)
            .count();
        assert_eq!(created, 1, "client-{client}");
    }
}

async fn a_repeat_after_the_window_is_accepted<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    assert_eq!(
        post_as(&app, "/short", "alice").await.status(),
        StatusCode::CREATED
    );
    let repeat = post_as(&app, "/short", "alice").await;
    assert_eq!(repeat.status(), StatusCode::CONFLICT);
    assert_eq!(repeat.headers()[header::RETRY_AFTER], "1");
    tokio::time::sleep(Duration::from_millis(350)).await; // past the 300 ms window
    assert_eq!(
        post_as(&app, "/short", "alice").await.status(),
        StatusCode::CREATED
    );
    assert_eq!(shop.runs(), 2);
}

async fn finish_releases_when_the_response_is_produced<B: Backend>() {
    let backend = B::start().await;
    for path in ["/slow", "/layered/slow"] {
        let shop = Shop::new();
        let app = app(backend.store(), &shop);
        let first = tokio::spawn({
            let app = app.clone();
            async move { post_as(&app, path, "alice").await.status() }
        });
        shop.until_exactly(1, "the first request is in flight")
            .await;
        let duplicates = all_at_once(100, |_| {
            let app = app.clone();
            async move { post_as(&app, path, "alice").await.status() }
        })
        .await;
        assert_eq!(
            count(&duplicates, StatusCode::CONFLICT),
            100,
            "{path}: refused while in flight"
        );

        shop.open_gate();
        assert_eq!(first.await.unwrap(), StatusCode::CREATED);
        // Released with the response: the next one is accepted at once.
        shop.open_gate();
        assert_eq!(
            post_as(&app, path, "alice").await.status(),
            StatusCode::CREATED,
            "{path}"
        );
        assert_eq!(shop.runs(), 2, "{path}");
    }
}

async fn a_server_error_releases_the_key<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    for _ in 0..3 {
        assert_eq!(
            post_as(&app, "/failing", "alice").await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    assert_eq!(
        shop.runs(),
        3,
        "each retry ran: the failure released the key"
    );
}

/// Retries `path` until a request is let through: the key of an abandoned request is
/// released in the background, right after it is abandoned.
async fn retry_until_accepted(app: &Router, path: &str, shop: &Shop, runs_before: usize) {
    eventually(Duration::from_secs(5), "the key is released", || {
        let (app, shop) = (app.clone(), shop.clone());
        async move {
            post_as(&app, path, "alice").await;
            shop.runs() > runs_before
        }
    })
    .await;
}

async fn a_panic_releases_the_key<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    assert_eq!(
        post_as(&app, "/panicking", "alice").await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    retry_until_accepted(&app, "/panicking", &shop, 1).await;
    assert_eq!(shop.runs(), 2);
}

/// Starts a POST to `path` that commits, waits until it has, then drops it as a browser
/// drops the first POST of a double click.
async fn abandon_after_commit(app: &Router, path: &str, shop: &Shop) {
    let runs_before = shop.runs();
    let abandoned = tokio::spawn({
        let (app, path) = (app.clone(), path.to_owned());
        async move { post_as(&app, &path, "alice").await }
    });
    eventually(
        Duration::from_secs(5),
        "the first request committed",
        || {
            let shop = shop.clone();
            async move { shop.runs() > runs_before }
        },
    )
    .await;
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled(), "{path}");
}

async fn an_abandoned_request_keeps_its_window_and_its_handler_finishes<B: Backend>() {
    let backend = B::start().await;
    for path in ["/committing", "/layered/committing"] {
        let shop = Shop::new();
        let app = app(backend.store(), &shop);
        abandon_after_commit(&app, path, &shop).await;
        // Bounded: a second run of the handler would wait at the gate.
        let second = tokio::time::timeout(Duration::from_secs(5), post_as(&app, path, "alice"))
            .await
            .expect("the second POST is answered, not run");
        assert_eq!(second.status(), StatusCode::CONFLICT, "{path}: in flight");
        shop.open_gate();
        eventually(
            Duration::from_secs(5),
            "the abandoned handler ran to its end",
            || {
                let shop = shop.clone();
                async move { shop.finished() == 1 }
            },
        )
        .await;
        let third = post_as(&app, path, "alice").await;
        assert_eq!(
            third.status(),
            StatusCode::CONFLICT,
            "{path}: the window outlives the client"
        );
        assert_eq!(shop.runs(), 1, "{path}: one commit");
    }
}

async fn finish_releases_when_an_abandoned_handler_really_finishes<B: Backend>() {
    let backend = B::start().await;
    for path in ["/committing/finish", "/layered/committing/finish"] {
        let shop = Shop::new();
        let app = app(backend.store(), &shop);
        abandon_after_commit(&app, path, &shop).await;
        let duplicates = all_at_once(50, |_| {
            let app = app.clone();
            async move {
                // Bounded: a second run of the handler would wait at the gate.
                let answer =
                    tokio::time::timeout(Duration::from_secs(5), post_as(&app, path, "alice"));
                answer
                    .await
                    .map_or(StatusCode::REQUEST_TIMEOUT, |r| r.status())
            }
        })
        .await;
        assert_eq!(
            count(&duplicates, StatusCode::CONFLICT),
            50,
            "{path}: the key is held while the handler still runs"
        );
        assert_eq!(shop.runs(), 1, "{path}");
        shop.open_gate();
        // The key is released once the handler has finished; the next request then runs
        // (and passes the gate opened for it here).
        shop.open_gate();
        eventually(Duration::from_secs(5), "the key is released", || {
            let (app, shop) = (app.clone(), shop.clone());
            async move {
                let status = post_as(&app, path, "alice").await.status();
                status == StatusCode::CREATED && shop.finished() == 2
            }
        })
        .await;
        assert_eq!(shop.runs(), 2, "{path}");
    }
}

async fn a_different_payload_is_not_a_repeat<B: Backend>() {
    let backend = B::start().await;
    for path in ["/transfer", "/layered/transfer"] {
        let shop = Shop::new();
        let app = app(backend.store(), &shop);
        let first = post_json(&app, path, "alice", r#"{"amount": 10}"#).await;
        assert_eq!(first.status(), StatusCode::OK, "{path}");
        assert_eq!(body_text(first).await, "10", "the handler saw the body");
        let same = post_json(&app, path, "alice", r#"{"amount": 10}"#).await;
        assert_eq!(same.status(), StatusCode::CONFLICT, "{path}");
        let other = post_json(&app, path, "alice", r#"{"amount": 11}"#).await;
        assert_eq!(other.status(), StatusCode::OK, "{path}");
        assert_eq!(body_text(other).await, "11");
        assert_eq!(shop.runs(), 2, "{path}");
    }
}

async fn bad_input_takes_no_key<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>(app).await;
    let malformed = post_json(&app, "/strict", "alice", r#"{"amount": "#).await;
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    let wrong_type = send(
        &app,
        request("/strict", "alice")
            .body(Body::from("amount=1"))
            .unwrap(),
    )
    .await;
    assert_eq!(wrong_type.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(shop.runs(), 0);
    let valid = post_json(&app, "/strict", "alice", r#"{"amount": 1}"#).await;
    assert_eq!(
        valid.status(),
        StatusCode::CREATED,
        "the bad requests held no key"
    );
    assert_eq!(shop.runs(), 1);
}

/// A 4xx the handler, its extractors or the route produce frees the key at once: the user
/// who fixes the input is not locked out for the window.
async fn a_refusal_of_bad_input_frees_the_key<B: Backend>() {
    let backend = B::start().await;
    for path in ["/validating", "/layered/validating"] {
        let shop = Shop::new();
        let app = app(backend.store(), &shop);
        let refused = post_json(&app, path, "alice", r#"{"amount": 0}"#).await;
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        if path.starts_with("/layered") {
            // The layer takes the key before the route's `Json` extractor refuses.
            let malformed = post_json(&app, path, "alice", r#"{"amount": "#).await;
            assert_eq!(malformed.status(), StatusCode::BAD_REQUEST, "{path}");
        }
        assert_eq!(shop.runs(), 0, "{path}");
        let fixed = post_json(&app, path, "alice", r#"{"amount": 5}"#).await;
        assert!(fixed.status().is_success(), "{path}: {}", fixed.status());
        assert_eq!(shop.runs(), 1, "{path}");
        let repeat = post_json(&app, path, "alice", r#"{"amount": 5}"#).await;
        assert_eq!(
            repeat.status(),
            StatusCode::CONFLICT,
            "{path}: success keeps it"
        );
        assert_eq!(shop.runs(), 1, "{path}");
    }
}

// What does not depend on the store: run on `MemoryStore` only.

#[tokio::test]
async fn the_message_is_configurable_and_browsers_get_html() {
    let shop = Shop::new();
    let app = app(idem_axum::MemoryStore::new(), &shop);
    assert_eq!(
        post_as(&app, "/localized", "alice").await.status(),
        StatusCode::CREATED
    );

    let api = send(
        &app,
        request("/localized", "alice")
            .header(header::ACCEPT, "application/json")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(api.status(), StatusCode::CONFLICT);
    assert_eq!(
        api.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    let problem: serde_json::Value = serde_json::from_str(&body_text(api).await).unwrap();
    assert_eq!(problem["detail"], "请勿重复提交");
    assert_eq!(problem["status"], 409);

    let browser = send(
        &app,
        request("/localized", "alice")
            .header(header::ACCEPT, "text/html,application/xhtml+xml,*/*;q=0.8")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_refused_page(browser, "请勿重复提交").await;
    assert_eq!(shop.runs(), 1);
}

#[tokio::test]
async fn a_missing_layer_answers_500_and_names_it() {
    let shop = Shop::new();
    let app = routes(&shop); // no `idem.layer()`
    for path in ["/orders", "/layered/orders"] {
        let response = post_as(&app, path, "alice").await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body_text(response).await.contains("idem.layer()"), "{path}");
    }
    assert_eq!(shop.runs(), 0);
}

#[tokio::test]
async fn a_request_without_client_identity_is_refused_not_pooled() {
    let shop = Shop::new();
    let app = app(idem_axum::MemoryStore::new(), &shop);
    for path in ["/orders", "/layered/orders"] {
        let response = send(&app, Request::post(path).body(Body::empty()).unwrap()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(
            body_text(response).await.contains("x-client"),
            "{path}: names the header"
        );
    }
    assert_eq!(shop.runs(), 0);

    // The default, the peer address, is a server-side setting: without `ConnectInfo`, 500.
    let by_peer = routes(&shop).layer(Idem::builder().build().layer());
    let response = post_as(&by_peer, "/orders", "alice").await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        body_text(response)
            .await
            .contains("into_make_service_with_connect_info")
    );
    assert_eq!(shop.runs(), 0);
}

#[tokio::test]
async fn a_store_outage_follows_the_policy_without_hanging() {
    let down = || idem_tests::unreachable_redis_store(Duration::from_millis(200));
    let shop = Shop::new();
    let closed = routes(&shop).layer(
        Idem::builder()
            .with_store(down())
            .with_client_identity(ClientHeader::new(CLIENT))
            .build()
            .layer(),
    );
    let started = std::time::Instant::now();
    let refused = post_as(&closed, "/orders", "alice").await;
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "bounded by the store timeout"
    );
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
    assert_eq!(shop.runs(), 0);

    let open = routes(&shop).layer(
        Idem::builder()
            .with_store(down())
            .with_client_identity(ClientHeader::new(CLIENT))
            .with_store_failure(idem_axum::StoreFailure::FailOpen)
            .build()
            .layer(),
    );
    assert_eq!(
        post_as(&open, "/orders", "alice").await.status(),
        StatusCode::CREATED
    );
    assert_eq!(shop.runs(), 1);
}

#[tokio::test]
async fn a_custom_responder_replaces_the_rendering() {
    let shop = Shop::new();
    let idem = Idem::builder()
        .with_client_identity(ClientHeader::new(CLIENT))
        .with_responder(|rejection| {
            (
                StatusCode::TOO_MANY_REQUESTS,
                format!("custom: {}", rejection.kind().code()),
            )
                .into_response()
        })
        .build();
    let app = routes(&shop).layer(idem.layer());
    post_as(&app, "/orders", "alice").await;
    let response = post_as(&app, "/orders", "alice").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body_text(response).await, "custom: duplicate-request");
}

/// The accept path of `release = "expire"` is one Redis command; `"finish"` adds the
/// release script.
#[tokio::test]
async fn redis_commands_per_accepted_request() {
    let server = idem_tests::RedisServer::start();
    let shop = Shop::new();
    let app = app(server.store(), &shop);
    // Open the connection and load the release script: neither is the accept path.
    post_as(&app, "/failing", "warm-up").await;

    let before = server.command_calls();
    for i in 0..100 {
        let response = post_as(&app, "/orders", &format!("client-{i}")).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let expire = server.command_calls_since(&before);
    assert_eq!(
        expire,
        [("set".to_owned(), 100)].into(),
        "expire: one SET each"
    );

    shop.open_gate_for(100);
    let before = server.command_calls();
    for i in 0..100 {
        let response = post_as(&app, "/slow", &format!("client-{i}")).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let finish = server.command_calls_since(&before);
    // SET, then one EVALSHA of the release script, whose GET and DEL count too.
    let expected = [("set", 100), ("evalsha", 100), ("get", 100), ("del", 100)];
    assert_eq!(
        finish,
        expected.map(|(name, n)| (name.to_owned(), n)).into(),
        "finish"
    );
}

/// Over real TCP, with clients told apart by their peer address (`ConnectInfo`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_tcp_concurrent_posts_from_one_peer_run_the_body_once() {
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let shop = Shop::new();
    let app = routes(&shop).layer(Idem::builder().build().layer());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    let statuses = all_at_once(200, |_| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"POST /orders HTTP/1.1\r\nHost: shop\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer.split(' ').nth(1).and_then(|code| code.parse::<u16>().ok()).unwrap()
    })
    .await;
    server.abort();
    assert_eq!(shop.runs(), 1);
    assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1);
    assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 199);
}

#[tokio::test]
async fn an_extractor_of_the_applications_own_can_be_last() {
    let shop = Shop::new();
    let app = app(idem_axum::MemoryStore::new(), &shop);
    let as_user = |user: &str| {
        request("/as-user", "alice")
            .header("x-user-id", user)
            .body(Body::empty())
            .unwrap()
    };
    let first = send(&app, as_user("u-1")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(body_text(first).await, "u-1");
    assert_eq!(
        send(&app, as_user("u-1")).await.status(),
        StatusCode::CONFLICT
    );
    assert_eq!(shop.runs(), 1);
    // The extractor's own refusal takes no key.
    let anonymous = request("/as-user", "bob").body(Body::empty()).unwrap();
    assert_eq!(
        send(&app, anonymous).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(shop.runs(), 1);
}
