//! One-time form tokens (`FormToken` + `VerifyFormTokenLayer`) over HTTP, on
//! `MemoryStore` and on a real Redis. Every "the handler ran once" claim counts handler
//! runs, not only status codes; every "no token spent" claim spends the token afterwards.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Multipart, State};
use axum::http::{Request, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Json, Router};
use idem_axum::client::ClientCookie;
use idem_axum::{
    AvoidRepeatLayer, FormToken, FormTokenConfig, Idem, VerifyFormTokenLayer, avoid_repeat,
    store::Store,
};
use idem_tests::{Backend, Shop, all_at_once, body_text, eventually, problem_code, send};

idem_tests::on_every_store!(
    two_hundred_posts_with_one_token_run_the_handler_once,
    with_replay_every_post_of_one_token_lands_where_the_first_did,
    with_replay_another_clients_or_an_unknown_token_is_still_refused,
    two_instances_on_one_store_accept_a_token_once,
    a_token_is_refused_from_another_client_and_stays_usable,
    an_expired_token_is_refused,
    a_missing_token_is_a_bad_request,
    bad_bodies_spend_no_token,
    an_oversize_body_spends_no_token,
    a_token_in_the_header_leaves_the_body_to_the_handler,
    multipart_forms_reach_the_handler_whole,
    rotation_hands_out_a_fresh_token,
    beside_avoid_repeat_in_either_order,
    over_tcp_a_get_issues_and_one_post_spends,
);

#[derive(serde::Deserialize)]
struct Order {
    item: String,
}

async fn order_form(token: FormToken) -> Html<String> {
    Html(format!(
        r#"<form method="post" action="/orders"><input name="item">{}</form>"#,
        token.hidden_input()
    ))
}

async fn place_order(State(shop): State<Shop>, Form(order): Form<Order>) -> (StatusCode, String) {
    shop.ran();
    (StatusCode::CREATED, format!("ordered {}", order.item))
}

async fn api_order(State(shop): State<Shop>, Json(order): Json<Order>) -> (StatusCode, String) {
    shop.ran();
    (StatusCode::CREATED, format!("ordered {}", order.item))
}

/// Every field the handler's own `Multipart` extractor reads, as `name=value;…`.
async fn upload(State(shop): State<Shop>, mut multipart: Multipart) -> (StatusCode, String) {
    shop.ran();
    let mut seen = Vec::new();
    while let Some(field) = multipart.next_field().await.expect("a whole body") {
        let name = field.name().unwrap_or_default().to_owned();
        seen.push(format!("{name}={}", field.text().await.expect("text")));
    }
    (StatusCode::CREATED, seen.join(";"))
}

/// Answers with the token its `FormToken` extractor gets: the rotated one.
async fn keep_editing(
    State(shop): State<Shop>,
    token: FormToken,
    Form(_order): Form<Order>,
) -> String {
    shop.ran();
    token.value().to_owned()
}

/// Places the order and sends the browser to its page, as a shop's form does.
async fn place_and_redirect(State(shop): State<Shop>, Form(_order): Form<Order>) -> Response {
    let order = shop.ran();
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, format!("/orders/{order}"))],
    )
        .into_response()
}

#[avoid_repeat(timeout = "30s")]
async fn guarded_twice(State(shop): State<Shop>, Form(_order): Form<Order>) -> StatusCode {
    shop.ran();
    StatusCode::CREATED
}

const WINDOW: Duration = Duration::from_secs(30);

fn routes(shop: &Shop) -> Router {
    Router::new()
        .route("/form", get(order_form))
        .route(
            "/orders",
            post(place_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .route(
            "/api/orders",
            post(api_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .route(
            "/upload",
            post(upload).route_layer(VerifyFormTokenLayer::new()),
        )
        .route(
            "/small",
            post(place_order).route_layer(VerifyFormTokenLayer::new().with_body_limit(1024)),
        )
        .route(
            "/editing",
            post(keep_editing).route_layer(VerifyFormTokenLayer::new().with_rotation(true)),
        )
        .route(
            "/replayed",
            post(place_and_redirect).route_layer(VerifyFormTokenLayer::new().with_replay(true)),
        )
        .route(
            "/localized",
            post(place_order).route_layer(VerifyFormTokenLayer::new().with_message("请勿重复提交")),
        )
        .route(
            "/both/attribute",
            post(guarded_twice).route_layer(VerifyFormTokenLayer::new()),
        )
        // The last `route_layer` added is the outermost.
        .route(
            "/both/token-outside",
            post(place_order)
                .route_layer(AvoidRepeatLayer::new(WINDOW))
                .route_layer(VerifyFormTokenLayer::new()),
        )
        .route(
            "/both/token-inside",
            post(place_order)
                .route_layer(VerifyFormTokenLayer::new())
                .route_layer(AvoidRepeatLayer::new(WINDOW)),
        )
        .with_state(shop.clone())
}

fn idem<S: Store>(store: S) -> Idem {
    Idem::builder()
        .with_store(store)
        .with_client_identity(ClientCookie::new("session"))
        .build()
}

/// The shop under an `Idem` on `store`, clients told apart by their `session` cookie.
fn app<S: Store>(store: S, shop: &Shop) -> Router {
    app_with(store, shop, FormTokenConfig::new())
}

/// A backend, the shop's counters, and the shop on the backend's store.
async fn shop_on<B: Backend>() -> (B, Shop, Router) {
    let backend = B::start().await;
    let shop = Shop::default();
    let app = app(backend.store(), &shop);
    (backend, shop, app)
}

fn app_with<S: Store>(store: S, shop: &Shop, config: FormTokenConfig) -> Router {
    routes(shop)
        .layer(Extension(config))
        .layer(idem(store).layer())
}

fn as_client(request: axum::http::request::Builder, client: &str) -> axum::http::request::Builder {
    request.header(header::COOKIE, format!("theme=dark; session={client}"))
}

/// The value of the hidden input named `field` in a page.
fn token_in(page: &str, field: &str) -> String {
    let value = page
        .split(&format!(r#"name="{field}" value=""#))
        .nth(1)
        .unwrap_or_else(|| panic!("the page has a hidden input named {field}: {page}"));
    value.split('"').next().unwrap_or_default().to_owned()
}

/// Renders the form for `client` and returns its token.
async fn issue(app: &Router, client: &str) -> String {
    issue_in_field(app, client, "form_token").await
}

async fn issue_in_field(app: &Router, client: &str, field: &str) -> String {
    let response = send(
        app,
        as_client(Request::get("/form"), client)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    token_in(&body_text(response).await, field)
}

/// Posts `body` to `path` as `application/x-www-form-urlencoded`.
async fn post_form(app: &Router, path: &str, client: &str, body: impl Into<Body>) -> Response {
    post_typed(app, path, client, "application/x-www-form-urlencoded", body).await
}

async fn post_typed(
    app: &Router,
    path: &str,
    client: &str,
    content_type: &str,
    body: impl Into<Body>,
) -> Response {
    let request = as_client(Request::post(path), client)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .unwrap();
    send(app, request).await
}

/// An order form as a browser posts it.
fn order(token: &str) -> String {
    format!("item=tea+cup&form_token={token}")
}

const BOUNDARY: &str = "----idem-boundary-7MA4YWxkTrZu0gW";

fn multipart_content_type() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

/// A multipart form with the token between a text field and a file.
fn multipart_order(token: &str) -> String {
    format!(
        "--{BOUNDARY}\r\n\
         Content-Disposition: form-data; name=\"item\"\r\n\r\n\
         tea cup\r\n\
         --{BOUNDARY}\r\n\
         Content-Disposition: form-data; name=\"form_token\"\r\n\r\n\
         {token}\r\n\
         --{BOUNDARY}\r\n\
         Content-Disposition: form-data; name=\"photo\"; filename=\"cup.txt\"\r\n\
         Content-Type: text/plain\r\n\r\n\
         a picture of a cup\r\n\
         --{BOUNDARY}--\r\n"
    )
}

/// Posts the order form with `token` to `path` and expects it accepted: proof that
/// whatever came before left the token unspent.
async fn accepted(app: &Router, path: &str, client: &str, token: &str, why: &str) -> Response {
    let response = post_form(app, path, client, order(token)).await;
    assert_eq!(response.status(), StatusCode::CREATED, "{path}: {why}");
    response
}

fn count(statuses: &[StatusCode], status: StatusCode) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

async fn two_hundred_posts_with_one_token_run_the_handler_once<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    for path in ["/orders", "/upload"] {
        let token = issue(&app, "alice").await;
        let runs_before = shop.runs();
        let statuses = all_at_once(200, |_| {
            let (app, token) = (app.clone(), token.clone());
            async move {
                let response = if path == "/upload" {
                    let content_type = multipart_content_type();
                    post_typed(&app, path, "alice", &content_type, multipart_order(&token)).await
                } else {
                    post_form(&app, path, "alice", order(&token)).await
                };
                response.status()
            }
        })
        .await;
        assert_eq!(shop.runs() - runs_before, 1, "{path}: the handler ran once");
        assert_eq!(count(&statuses, StatusCode::CREATED), 1, "{path}");
        assert_eq!(count(&statuses, StatusCode::CONFLICT), 199, "{path}");
    }
}

async fn two_instances_on_one_store_accept_a_token_once<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::default();
    let instances = [
        app(backend.store(), &shop),
        app(backend.store_of_another_instance(), &shop),
    ];
    // Issued by one instance, posted to both.
    let token = issue(&instances[0], "alice").await;
    let statuses = all_at_once(200, |i| {
        let (app, token) = (instances[i % 2].clone(), token.clone());
        async move {
            post_form(&app, "/orders", "alice", order(&token))
                .await
                .status()
        }
    })
    .await;
    assert_eq!(shop.runs(), 1);
    assert_eq!(count(&statuses, StatusCode::CREATED), 1);
    assert_eq!(count(&statuses, StatusCode::CONFLICT), 199);
}

async fn a_token_is_refused_from_another_client_and_stays_usable<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let alices = issue(&app, "alice").await;
    let bobs = issue(&app, "bob").await;
    let stolen = post_form(&app, "/orders", "bob", order(&alices)).await;
    assert_eq!(stolen.status(), StatusCode::CONFLICT);
    assert_eq!(problem_code(stolen).await, "invalid-form-token");
    assert_eq!(shop.runs(), 0);

    let own = accepted(&app, "/orders", "alice", &alices, "still usable by alice").await;
    assert_eq!(body_text(own).await, "ordered tea cup");
    let why = "bob's own token was not touched by his attempt with alice's";
    accepted(&app, "/orders", "bob", &bobs, why).await;
    assert_eq!(shop.runs(), 2);
}

async fn an_expired_token_is_refused<B: Backend>() {
    let backend = B::start().await;
    let shop = Shop::default();
    let config = FormTokenConfig::new().with_ttl(Duration::from_millis(300));
    let app = app_with(backend.store(), &shop, config);
    let stale = issue(&app, "alice").await;
    let fresh = issue(&app, "alice").await;
    accepted(&app, "/orders", "alice", &fresh, "inside its TTL").await;
    tokio::time::sleep(Duration::from_millis(400)).await; // past the 300 ms TTL
    let expired = post_form(&app, "/orders", "alice", order(&stale)).await;
    assert_eq!(expired.status(), StatusCode::CONFLICT);
    assert_eq!(problem_code(expired).await, "invalid-form-token");
    assert_eq!(shop.runs(), 1);
}

async fn a_missing_token_is_a_bad_request<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let token = issue(&app, "alice").await;
    let no_content_type = send(
        &app,
        as_client(Request::post("/orders"), "alice")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let multipart_without = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"item\"\r\n\r\ntea\r\n--{BOUNDARY}--\r\n"
    );
    let responses = [
        post_form(&app, "/orders", "alice", "item=tea").await,
        post_form(&app, "/orders", "alice", "item=tea&form_token=").await,
        post_form(&app, "/orders", "alice", "").await,
        post_typed(
            &app,
            "/upload",
            "alice",
            &multipart_content_type(),
            multipart_without,
        )
        .await,
        no_content_type,
    ];
    for response in responses {
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let problem = body_text(response).await;
        assert!(problem.contains("missing-form-token"), "{problem}");
        assert!(
            problem.contains("form_token") && problem.contains("x-form-token"),
            "names where the token goes: {problem}"
        );
    }
    assert_eq!(shop.runs(), 0);
    accepted(&app, "/orders", "alice", &token, "no token was spent").await;
}

async fn bad_bodies_spend_no_token<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let token = issue(&app, "alice").await;

    let json = post_typed(
        &app,
        "/orders",
        "alice",
        "application/json",
        format!(r#"{{"item":"tea","form_token":"{token}"}}"#),
    )
    .await;
    assert_eq!(json.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(problem_code(json).await, "unsupported-media-type");

    for body in [
        [order(&token).as_bytes(), b"&note=\xff\xfe"].concat(),
        [b"note=%FF&".as_slice(), order(&token).as_bytes()].concat(),
    ] {
        let not_utf8 = post_form(&app, "/orders", "alice", body).await;
        assert_eq!(not_utf8.status(), StatusCode::BAD_REQUEST);
        assert_eq!(problem_code(not_utf8).await, "invalid-body");
    }

    let whole = multipart_order(&token);
    let cut = whole.find("a picture").unwrap();
    for (content_type, body) in [
        (multipart_content_type(), whole[..cut].to_owned()),
        (
            multipart_content_type(),
            whole[..whole.len() - 4].to_owned(),
        ),
        ("multipart/form-data".to_owned(), whole.clone()),
        (
            "multipart/form-data; boundary=other".to_owned(),
            whole.clone(),
        ),
    ] {
        let broken = post_typed(&app, "/upload", "alice", &content_type, body).await;
        assert_eq!(broken.status(), StatusCode::BAD_REQUEST, "{content_type}");
        assert_eq!(problem_code(broken).await, "invalid-body");
    }
    assert_eq!(shop.runs(), 0);

    accepted(&app, "/orders", "alice", &token, "no bad body spent it").await;
    assert_eq!(shop.runs(), 1);
}

async fn an_oversize_body_spends_no_token<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let token = issue(&app, "alice").await;
    // Over the layer's own limit (1 KiB on `/small`), and over the router's default
    // (axum's 2 MB) on `/orders`; the token comes first, the padding after it.
    for (path, padding) in [("/small", 2 * 1024), ("/orders", 3 * 1024 * 1024)] {
        let body = format!("{}&note={}", order(&token), "x".repeat(padding));
        let too_large = post_form(&app, path, "alice", body).await;
        assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert_eq!(problem_code(too_large).await, "payload-too-large");
    }
    assert_eq!(shop.runs(), 0);
    accepted(&app, "/small", "alice", &token, "no oversize body spent it").await;
    assert_eq!(shop.runs(), 1);
}

async fn a_token_in_the_header_leaves_the_body_to_the_handler<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let token = issue(&app, "alice").await;
    let with_header = || {
        as_client(Request::post("/api/orders"), "alice")
            .header("x-form-token", &token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"item":"teapot"}"#))
            .unwrap()
    };
    let first = send(&app, with_header()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(
        body_text(first).await,
        "ordered teapot",
        "the JSON reached it"
    );
    let again = send(&app, with_header()).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let garbage = send(
        &app,
        as_client(Request::post("/api/orders"), "alice")
            .header("x-form-token", "not a token we issued ✓")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"item":"teapot"}"#))
            .unwrap(),
    )
    .await;
    assert_eq!(
        garbage.status(),
        StatusCode::CONFLICT,
        "unknown, like any other"
    );
    assert_eq!(shop.runs(), 1);
}

async fn multipart_forms_reach_the_handler_whole<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let token = issue(&app, "alice").await;
    let content_type = multipart_content_type();
    let first = post_typed(
        &app,
        "/upload",
        "alice",
        &content_type,
        multipart_order(&token),
    )
    .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(
        body_text(first).await,
        format!("item=tea cup;form_token={token};photo=a picture of a cup")
    );
    let again = post_typed(
        &app,
        "/upload",
        "alice",
        &content_type,
        multipart_order(&token),
    )
    .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(shop.runs(), 1);
}

async fn rotation_hands_out_a_fresh_token<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let first = issue(&app, "alice").await;

    let response = post_form(&app, "/editing", "alice", order(&first)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let second = response.headers()["x-form-token"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(second, first);
    assert_eq!(
        body_text(response).await,
        second,
        "the handler's FormToken is the rotated token"
    );

    let replay = post_form(&app, "/editing", "alice", order(&first)).await;
    assert_eq!(replay.status(), StatusCode::CONFLICT);
    assert!(replay.headers().get("x-form-token").is_none());
    assert_eq!(
        post_form(&app, "/editing", "bob", order(&second))
            .await
            .status(),
        StatusCode::CONFLICT,
        "the rotated token is alice's too"
    );
    let next = post_form(&app, "/editing", "alice", order(&second)).await;
    assert_eq!(next.status(), StatusCode::OK);
    assert!(next.headers().contains_key("x-form-token"));
    assert_eq!(shop.runs(), 2);

    // Routes without rotation send no token back.
    let token = issue(&app, "alice").await;
    let plain = post_form(&app, "/orders", "alice", order(&token)).await;
    assert_eq!(plain.status(), StatusCode::CREATED);
    assert!(plain.headers().get("x-form-token").is_none());
}

async fn beside_avoid_repeat_in_either_order<B: Backend>() {
    let backend = B::start().await;
    for path in [
        "/both/attribute",
        "/both/token-outside",
        "/both/token-inside",
    ] {
        let shop = Shop::default();
        let app = app(backend.store(), &shop);
        // One token, a burst of posts: exactly one runs, whichever guard refuses the rest.
        let token = issue(&app, "alice").await;
        let statuses = all_at_once(50, |_| {
            let (app, token) = (app.clone(), token.clone());
            async move { post_form(&app, path, "alice", order(&token)).await.status() }
        })
        .await;
        assert_eq!(shop.runs(), 1, "{path}");
        assert_eq!(count(&statuses, StatusCode::CREATED), 1, "{path}");
        assert_eq!(count(&statuses, StatusCode::CONFLICT), 49, "{path}");

        // A second rendering of the form inside the anti-repeat window: its token is
        // good, the window still refuses the same client.
        let token = issue(&app, "alice").await;
        let repeat = post_form(&app, path, "alice", order(&token)).await;
        assert_eq!(repeat.status(), StatusCode::CONFLICT, "{path}");
        assert_eq!(shop.runs(), 1, "{path}");

        // Another client is subject to neither.
        let token = issue(&app, "bob").await;
        accepted(&app, path, "bob", &token, "another client").await;
        assert_eq!(shop.runs(), 2, "{path}");
    }

    // With the token layer outside, a post refused for its token takes no anti-repeat
    // key; inside, the window is taken first and given back by the 400. Either way the
    // same client's next, valid post goes through.
    for path in [
        "/both/attribute",
        "/both/token-outside",
        "/both/token-inside",
    ] {
        let shop = Shop::default();
        let app = app(backend.store(), &shop);
        let missing = post_form(&app, path, "carol", "item=tea").await;
        assert_eq!(missing.status(), StatusCode::BAD_REQUEST, "{path}");
        let token = issue(&app, "carol").await;
        accepted(&app, path, "carol", &token, "the 400 held no key").await;
        assert_eq!(shop.runs(), 1, "{path}");
    }
}

async fn over_tcp_a_get_issues_and_one_post_spends<B: Backend>() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (_backend, shop, app) = shop_on::<B>().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // One HTTP/1.1 exchange on a connection of its own: (status, head, body).
    let exchange = |request: String| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_owned(), body.to_owned())
    };
    let cookie = "Cookie: session=s3ss10n-alice\r\n";

    let (status, _, page) = exchange(format!(
        "GET /form HTTP/1.1\r\nHost: shop\r\n{cookie}Connection: close\r\n\r\n"
    ))
    .await;
    assert_eq!(status, 200);
    let token = token_in(&page, "form_token");
    let post = |body: String| {
        format!(
            "POST /orders HTTP/1.1\r\nHost: shop\r\n{cookie}\
             Content-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let (status, _, body) = exchange(post(order(&token))).await;
    assert_eq!(status, 201);
    assert_eq!(body, "ordered tea cup");
    let (status, head, body) = exchange(post(order(&token))).await;
    assert_eq!(status, 409, "the second post of the page is refused");
    assert!(head.contains("application/problem+json"), "{head}");
    assert!(body.contains("invalid-form-token"), "{body}");
    server.abort();
    assert_eq!(shop.runs(), 1);
}

// What does not depend on the store: run on one store only.

/// The store keeps a hash of the token, never the token: a dump of Redis gives nothing
/// to post. One script (one round trip) per issued token, one per verified one, and with
/// rotation one of each.
#[tokio::test]
async fn redis_holds_no_raw_token_and_one_command_does_each_step() {
    let server = idem_tests::RedisServer::start();
    let shop = Shop::default();
    let app = app(server.store(), &shop);
    // Opens the store's connection and loads both scripts.
    let warm_up = issue(&app, "warm-up").await;
    accepted(&app, "/orders", "warm-up", &warm_up, "warm-up").await;

    let evalsha = |calls: &std::collections::BTreeMap<String, u64>| {
        let scripted = [
            "evalsha",
            "time",
            "zrangebyscore",
            "zadd",
            "zcard",
            "pttl",
            "pexpire",
            "zscore",
            "zrem",
        ];
        let outside: Vec<_> = calls
            .keys()
            .filter(|name| !scripted.contains(&name.as_str()))
            .collect();
        assert!(
            outside.is_empty(),
            "commands outside the scripts: {outside:?}"
        );
        calls.get("evalsha").copied().unwrap_or_default()
    };
    let before = server.command_calls();
    let mut tokens = Vec::new();
    for client in ["alice", "bob", "carol"] {
        tokens.push((client, issue(&app, client).await));
    }
    assert_eq!(
        evalsha(&server.command_calls_since(&before)),
        3,
        "one script per issued token"
    );
    let keys = server.keys();
    assert_eq!(
        keys.iter().filter(|key| key.contains(":scope:")).count(),
        3,
        "one set per client holding tokens: {keys:?}"
    );
    for key in &keys {
        let members: Vec<String> = server.query(&["ZRANGE", key, "0", "-1"]);
        for (_, token) in &tokens {
            assert!(!key.contains(token.as_str()), "{key} holds a token");
            assert!(
                members
                    .iter()
                    .all(|member| !member.contains(token.as_str())),
                "{key}'s members hold a token"
            );
        }
    }

    let before = server.command_calls();
    for (client, token) in &tokens {
        let response = post_form(&app, "/orders", client, order(token)).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    assert_eq!(
        evalsha(&server.command_calls_since(&before)),
        3,
        "one script per verified token"
    );

    let token = issue(&app, "alice").await;
    let before = server.command_calls();
    let response = post_form(&app, "/editing", "alice", order(&token)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        evalsha(&server.command_calls_since(&before)),
        2,
        "rotation: the script that spends, the one that issues"
    );
}

async fn slow_order(State(shop): State<Shop>, Form(_order): Form<Order>) -> StatusCode {
    tokio::time::sleep(Duration::from_millis(100)).await;
    shop.ran();
    StatusCode::CREATED
}

/// A browser abandons the first POST of a double click: the request's future is dropped
/// after its token was spent. The submission must still be made — else the second click
/// is refused as a duplicate of an order that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_post_still_makes_its_submission() {
    let shop = Shop::default();
    let app = Router::new()
        .route("/form", get(order_form))
        .route(
            "/slow",
            post(slow_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .with_state(shop.clone())
        .layer(idem(idem_axum::MemoryStore::new()).layer());
    let token = issue(&app, "alice").await;
    let abandoned = tokio::time::timeout(
        Duration::from_millis(30),
        post_form(&app, "/slow", "alice", order(&token)),
    )
    .await;
    assert!(abandoned.is_err(), "the first POST is dropped mid-handler");
    let second = post_form(&app, "/slow", "alice", order(&token)).await;
    assert_eq!(second.status(), StatusCode::CONFLICT, "the token is spent");
    eventually(
        Duration::from_secs(5),
        "the abandoned submission completes",
        || {
            let shop = shop.clone();
            async move { shop.runs() == 1 }
        },
    )
    .await;
}

#[tokio::test]
async fn a_missing_layer_answers_500_and_names_it() {
    let shop = Shop::default();
    let app = routes(&shop); // no `idem.layer()`
    let page = send(&app, Request::get("/form").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_text(page).await.contains("idem.layer()"));
    let post = post_form(&app, "/orders", "alice", order("AAAAAAAAAAAAAAAAAAAAAA")).await;
    assert_eq!(post.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_text(post).await.contains("idem.layer()"));
    assert_eq!(shop.runs(), 0);
}

#[tokio::test]
async fn a_client_that_cannot_be_told_is_refused() {
    let shop = Shop::default();
    let app = app(idem_axum::MemoryStore::new(), &shop);
    let page = send(&app, Request::get("/form").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status(), StatusCode::BAD_REQUEST);
    assert!(
        body_text(page).await.contains("session"),
        "names the cookie"
    );
    let post = send(
        &app,
        Request::post("/orders")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(order("AAAAAAAAAAAAAAAAAAAAAA")))
            .unwrap(),
    )
    .await;
    assert_eq!(post.status(), StatusCode::BAD_REQUEST);
    assert_eq!(problem_code(post).await, "missing-client-identity");
    assert_eq!(shop.runs(), 0);
}

#[tokio::test]
async fn a_browser_gets_html_with_the_configured_message() {
    let shop = Shop::default();
    let app = app(idem_axum::MemoryStore::new(), &shop);
    let token = issue(&app, "alice").await;
    let browser = |token: &str| {
        as_client(Request::post("/localized"), "alice")
            .header(header::ACCEPT, "text/html,application/xhtml+xml,*/*;q=0.8")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(order(token)))
            .unwrap()
    };
    assert_eq!(
        send(&app, browser(&token)).await.status(),
        StatusCode::CREATED
    );
    let again = send(&app, browser(&token)).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(
        again.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    assert!(body_text(again).await.contains("<p>请勿重复提交</p>"));
    assert_eq!(shop.runs(), 1);
}

#[tokio::test]
async fn the_field_and_header_names_are_configurable() {
    let shop = Shop::default();
    let config = FormTokenConfig::new()
        .with_field_name("subToken")
        .with_header_name(axum::http::HeaderName::from_static("x-sub-token"));
    let app = app_with(idem_axum::MemoryStore::new(), &shop, config);
    let token = issue_in_field(&app, "alice", "subToken").await;
    let body = format!("item=tea&subToken={token}");
    assert_eq!(
        post_form(&app, "/orders", "alice", body).await.status(),
        StatusCode::CREATED
    );
    let old_name = post_form(&app, "/orders", "alice", order(&token)).await;
    assert_eq!(old_name.status(), StatusCode::BAD_REQUEST);
    assert!(body_text(old_name).await.contains("subToken"));

    let token = issue_in_field(&app, "alice", "subToken").await;
    let in_header = send(
        &app,
        as_client(Request::post("/editing"), "alice")
            .header("x-sub-token", &token)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from("item=tea"))
            .unwrap(),
    )
    .await;
    assert_eq!(in_header.status(), StatusCode::OK);
    assert!(in_header.headers().contains_key("x-sub-token"), "rotated");
    assert_eq!(shop.runs(), 2);
}

#[tokio::test]
async fn a_store_outage_follows_the_policy_without_hanging() {
    let down = || {
        idem_tests::lazy_store(
            idem_axum::RedisStore::builder().with_timeout(Duration::from_millis(200)),
            idem_axum::RedisServer::url(format!(
                "redis://127.0.0.1:{}/",
                idem_tests::unused_port()
            )),
        )
    };
    let shop = Shop::default();
    let closed = app(down(), &shop);
    let started = std::time::Instant::now();
    let page = send(
        &closed,
        as_client(Request::get("/form"), "alice")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(page.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(page.headers()[header::RETRY_AFTER], "1");
    let post = post_form(&closed, "/orders", "alice", order("AAAAAAAAAAAAAAAAAAAAAA")).await;
    assert_eq!(post.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "each bounded by the store timeout"
    );
    assert_eq!(shop.runs(), 0);

    let open = routes(&shop).layer(
        Idem::builder()
            .with_store(down())
            .with_client_identity(ClientCookie::new("session"))
            .with_store_failure(idem_axum::StoreFailure::FailOpen)
            .build()
            .layer(),
    );
    let token = issue(&open, "alice").await;
    assert_eq!(token.len(), 22, "the page still renders, with a token");
    let post = post_form(&open, "/orders", "alice", order(&token)).await;
    assert_eq!(post.status(), StatusCode::CREATED, "let through unverified");
    assert_eq!(shop.runs(), 1);
}

/// A double click — and a hundred — with replay on: the handler runs once, and every post
/// of the token, concurrent or later, gets the first one's redirect.
async fn with_replay_every_post_of_one_token_lands_where_the_first_did<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let token = issue(&app, "alice").await;
    let answers = all_at_once(100, |_| {
        let (app, body) = (app.clone(), order(&token));
        async move { post_form(&app, "/replayed", "alice", body).await }
    })
    .await;
    assert_eq!(shop.runs(), 1, "the handler ran once");
    let mut replayed = 0;
    for answer in &answers {
        assert_eq!(answer.status(), StatusCode::SEE_OTHER, "{answer:?}");
        assert_eq!(answer.headers()[header::LOCATION], "/orders/1");
        replayed += usize::from(answer.headers().contains_key("idempotent-replayed"));
    }
    assert_eq!(replayed, 99, "all but the first are replays");
    // Later, too, for the token's life.
    let later = post_form(&app, "/replayed", "alice", order(&token)).await;
    assert_eq!(later.headers()[header::LOCATION], "/orders/1");
    assert_eq!(shop.runs(), 1);
}

/// Replay does not open the door to other clients' tokens or to made-up ones.
async fn with_replay_another_clients_or_an_unknown_token_is_still_refused<B: Backend>() {
    let (_backend, shop, app) = shop_on::<B>().await;
    let token = issue(&app, "alice").await;
    let stolen = post_form(&app, "/replayed", "mallory", order(&token)).await;
    assert_eq!(stolen.status(), StatusCode::CONFLICT);
    let made_up = post_form(&app, "/replayed", "alice", order("A".repeat(22).as_str())).await;
    assert_eq!(made_up.status(), StatusCode::CONFLICT);
    assert_eq!(shop.runs(), 0);
    // Neither refusal spent alice's token or left a submission behind.
    let first = post_form(&app, "/replayed", "alice", order(&token)).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert!(!first.headers().contains_key("idempotent-replayed"));
    let stolen_again = post_form(&app, "/replayed", "mallory", order(&token)).await;
    assert_eq!(
        stolen_again.status(),
        StatusCode::CONFLICT,
        "not mallory's replay either"
    );
    assert_eq!(shop.runs(), 1);
}
