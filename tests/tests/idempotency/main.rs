//! `IdempotencyLayer` over HTTP, on `MemoryStore` and on a real Redis. Every claim that a
//! handler ran once counts how often its body ran, not only the status codes.
//!
//! One module per topic, each listing its cases for every store; this file holds the
//! application they all drive and how they read its answers.

mod advertised;
mod compression;
mod dropped_begin;
mod failures;
mod key_header;
mod key_scope;
mod outliving;
mod over_a_connection;
mod payload;
mod replay;
mod runs_once;
mod sizes;
mod store_outages;

use idem_axum::store::RecordStore;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Extension, Path, State};
use axum::http::{HeaderName, HeaderValue, Request, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use idem_axum::idempotency::{DoNotKeep, IdempotencyRecord, RecordScope};
use idem_axum::identity::ClientHeader;
use idem_axum::store::Store;
use idem_axum::{Idem, IdempotencyLayer, StoreFailure};
use idem_tests::{Shop, send};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;

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

async fn answers(State(shop): State<Shop>, Path(status): Path<u16>) -> StatusCode {
    shop.ran();
    StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST)
}

async fn panicking(State(shop): State<Shop>) -> StatusCode {
    shop.ran();
    panic!("a bug in the handler");
}

/// Answers 201, then its body breaks after a first chunk — a moment later, as a stream
/// from a backend does: the server has sent what came before.
async fn broken_body(State(shop): State<Shop>) -> (StatusCode, Body) {
    shop.ran();
    let first = futures_util::stream::iter([Ok(Bytes::from_static(b"order "))]);
    let broken = futures_util::stream::once(async {
        tokio::task::yield_now().await;
        Err(std::io::Error::other("the stream broke"))
    });
    let body = Body::from_stream(futures_util::StreamExt::chain(first, broken));
    (StatusCode::CREATED, body)
}

/// Refuses a body without an amount, marking the refusal not to be kept.
async fn validated(State(shop): State<Shop>, body: String) -> Response {
    if !body.contains("amount") {
        let refusal = (StatusCode::UNPROCESSABLE_ENTITY, "an amount is required");
        return (DoNotKeep, refusal).into_response();
    }
    (StatusCode::CREATED, format!("order {}", shop.ran())).into_response()
}

/// Takes the body, as a handler whose extractor enforces a body limit does.
async fn noted(State(shop): State<Shop>, _body: String) -> (StatusCode, String) {
    (StatusCode::CREATED, format!("order {}", shop.ran()))
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
        .route("/answers/{status}", post(answers).route_layer(guarded()))
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
        .route("/broken-body", post(broken_body).route_layer(guarded()))
        .route("/validated", post(validated).route_layer(guarded()))
        .route(
            "/limited-inside",
            post(noted)
                .layer(DefaultBodyLimit::max(64))
                .route_layer(guarded()),
        )
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

/// The body of [`post_key`]'s requests.
const BODY: &str = r#"{"amount":100}"#;

/// `POST path` from alice with `key` and a fixed body.
async fn post_key(app: &Router, path: &str, key: &str) -> Response {
    send(app, request(path, "alice", Some(key), BODY)).await
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

    /// The problem's code, for a problem+json answer.
    fn problem(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some(b"application/problem+json".as_slice()),
            "{self:?}"
        );
        let problem: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        let kind = problem["type"].as_str().unwrap();
        idem_tests::refusal_code(kind).to_owned()
    }

    fn detail(&self) -> String {
        let problem: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        problem["detail"].as_str().unwrap().to_owned()
    }
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
