//! One-time form tokens (`FormToken` + `VerifyFormTokenLayer`) over HTTP, on
//! `MemoryStore` and on a real Redis. Every "the handler ran once" claim counts handler
//! runs, not only status codes; every "no token spent" claim spends the token afterwards.
//!
//! One module per topic, each listing its cases for every store; this file holds the
//! application they all drive and how they post to it.

mod beside_other_guards;
mod bodies;
mod client_gone;
mod in_transaction;
mod payload;
mod redis;
mod refusals;
mod replay;
mod spent_once;

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Multipart, State};
use axum::http::{Request, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Json, Router};
use idem_axum::identity::ClientCookie;
use idem_axum::payload::PayloadFingerprint;
use idem_axum::store::Store;
use idem_axum::{
    AvoidRepeatLayer, FormToken, FormTokenConfig, Idem, VerifyFormTokenLayer, avoid_repeat,
};
use idem_tests::{Shop, body_text, count, send};

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

async fn place_when_let_through(State(shop): State<Shop>, Form(_order): Form<Order>) -> Response {
    let order = shop.ran();
    shop.pass_gate().await;
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
            "/replayed/by-body",
            post(place_and_redirect).route_layer(by_body()),
        )
        .route(
            "/replayed/by-body/gated",
            post(place_when_let_through).route_layer(by_body()),
        )
        .route(
            "/replayed/api",
            post(api_order).route_layer(
                VerifyFormTokenLayer::new()
                    .with_payload_fingerprint(PayloadFingerprint::CanonicalJson),
            ),
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

/// Replay that counts the posted form's bytes beside its token.
fn by_body() -> VerifyFormTokenLayer {
    VerifyFormTokenLayer::new().with_payload_fingerprint(PayloadFingerprint::Raw)
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

fn app_with<S: Store>(store: S, shop: &Shop, config: FormTokenConfig) -> Router {
    routes(shop)
        .layer(Extension(config))
        .layer(idem(store).layer())
}

fn as_client(request: axum::http::request::Builder, client: &str) -> axum::http::request::Builder {
    request.header(header::COOKIE, format!("theme=dark; session={client}"))
}

/// `request`, without a body, sent as `client`.
async fn send_empty_as(
    app: &Router,
    request: axum::http::request::Builder,
    client: &str,
) -> Response {
    send(app, as_client(request, client).body(Body::empty()).unwrap()).await
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
    let response = send_empty_as(app, Request::get("/form"), client).await;
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
