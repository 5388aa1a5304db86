//! The shop's HTTP contract, on `MemoryStore` and on a real Redis (the harness starts
//! `redis-server`): every route and every duplicate path, counted in the database —
//! orders rows, payments, balances, stock — not only in status codes. The records of API
//! orders and payment callbacks are in the shop's SQLite database whatever the store:
//! they commit with the order or the payment, or not at all. Then two shop instances on
//! one store and one SQLite file, as two processes behind a load balancer would be.
//!
//! These tests live beside the shop (not in `tests/`) because they drive its router
//! (`Shop::router`, no sockets) and read its database; they borrow only the workspace's
//! store harness.
//!
//! One module per part of the shop, each listing its cases for every store; this file
//! holds the shop under test and how the cases talk to it.

mod api_orders;
mod form_orders;
mod metrics;
mod openapi;
mod pages;
mod payment_callbacks;
mod records;
mod seckill;
#[path = "../support/mod.rs"]
mod support;
mod two_instances;
mod withdrawals;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use example_webshop::Shop;
use idem_tests::{Backend, MemoryBackend, RedisBackend, all_at_once, answer};
use serde_json::Value;
use sqlx::SqlitePool;
use tempfile::TempDir;

/// One shop instance under test, on a database of its own (or shared, see
/// [`TestShop::another_instance`]).
struct TestShop<B> {
    router: Router,
    db: SqlitePool,
    url: String,
    backend: B,
    _dir: TempDir,
}

impl<B: Backend> TestShop<B> {
    async fn start() -> Self {
        let backend = B::start().await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("shop.db").display());
        let db = example_webshop::connect(&url).await.expect("the database");
        let router = Shop::new(db.clone(), backend.store()).router();
        Self {
            router,
            db,
            url,
            backend,
            _dir: dir,
        }
    }

    /// A second instance on the same database file and the same store data, with its own
    /// connections to both.
    async fn another_instance(&self) -> Router {
        let db = example_webshop::connect(&self.url)
            .await
            .expect("the database");
        Shop::new(db, self.backend.store_of_another_instance()).router()
    }

    /// The shop restarted on the same database file, its main store a fresh one (a new
    /// `MemoryStore`, an empty Redis): what it still knows, it knows from the database.
    async fn restarted(&self) -> (Router, B) {
        let backend = B::start().await;
        let db = example_webshop::connect(&self.url)
            .await
            .expect("the database");
        (Shop::new(db, backend.store()).router(), backend)
    }

    async fn execute(&self, sql: &str) {
        sqlx::query(sql)
            .execute(&self.db)
            .await
            .expect("the test's statement");
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.db)
            .await
            .expect("a count")
    }
}

/// What a store holds, counted, so a test can tell that a request left nothing behind.
trait StoredEntries {
    /// What the store holds now: tokens, records, locks (in Redis, its keys).
    fn stored_entries(&self) -> usize;
}

impl StoredEntries for MemoryBackend {
    fn stored_entries(&self) -> usize {
        self.store().entry_count() + self.store().token_count()
    }
}

impl StoredEntries for RedisBackend {
    fn stored_entries(&self) -> usize {
        self.server.keys().len()
    }
}

/// Only the status of the answer to `request`.
async fn status(router: &Router, request: Request<Body>) -> StatusCode {
    answer(router, request).await.status
}

/// A `GET` of `uri`, with the `Cookie` header `cookie` (a [`new_browser`]'s session).
fn get(uri: &str, cookie: Option<&str>) -> Request<Body> {
    let mut request = Request::get(uri);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    request.body(Body::empty()).expect("a request")
}

fn json_request(
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Request<Body> {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
        .body(Body::from(body.to_string()))
        .expect("a request")
}

/// A browser's post of the order form `form`, with the `Cookie` header `cookie`.
fn form_post(cookie: &str, form: &str) -> Request<Body> {
    Request::post("/orders")
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "text/html")
        .body(Body::from(form.to_owned()))
        .expect("a request")
}

/// A new browser: it opens the front page, and its session cookie is what it sends from
/// then on (the `Cookie` header's value).
async fn new_browser(router: &Router) -> String {
    let front = answer(router, get("/", None)).await;
    assert_eq!(front.status, StatusCode::OK);
    support::session_cookie(&front)
}

/// Opens the order form of product 1 as the browser with `cookie` and returns its
/// one-time token.
async fn form_token(router: &Router, cookie: &str) -> String {
    let page = answer(router, get("/orders/new?product_id=1", Some(cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    token_in(&page.text())
}

/// The one-time token in an order form's HTML.
fn token_in(html: &str) -> String {
    let field = "name=\"form_token\" value=\"";
    let start = html.find(field).expect("a token field") + field.len();
    let len = html[start..].find('"').expect("a closing quote");
    html[start..start + len].to_owned()
}

fn order_form(token: &str) -> String {
    format!("product_id=1&quantity=2&form_token={token}")
}

/// The status of an order posted through the form with `token`, from the browser whose
/// session is `cookie`.
async fn order_with(router: &Router, cookie: &str, token: &str) -> StatusCode {
    status(router, form_post(cookie, &order_form(token))).await
}

/// Twenty clicks at once on one form's "Place order", spread over `routers` in turn:
/// their statuses.
async fn twenty_clicks(routers: &[Router], cookie: &str, token: &str) -> Vec<StatusCode> {
    all_at_once(20, |i| {
        let router = routers[i % routers.len()].clone();
        let (cookie, token) = (cookie.to_owned(), token.to_owned());
        async move { order_with(&router, &cookie, &token).await }
    })
    .await
}

fn api_order(key: &str, user: &str, body: &Value) -> Request<Body> {
    json_request(
        Method::POST,
        "/api/orders",
        &[("idempotency-key", key), ("x-user-id", user)],
        body,
    )
}

fn callback(body: &Value, caller: &str) -> Request<Body> {
    // Callers differ by address in life; here by a header the shop must not care about.
    json_request(
        Method::POST,
        "/api/payments/callback",
        &[("x-forwarded-for", caller)],
        body,
    )
}

/// The idempotency records of API orders and payment callbacks, in the shop's database.
const RECORDS: &str = "SELECT COUNT(*) FROM idem_records";

fn seckill(voucher: i64, user: Option<&str>) -> Request<Body> {
    let mut request = Request::post(format!("/api/vouchers/{voucher}/seckill"));
    if let Some(user) = user {
        request = request.header("x-user-id", user);
    }
    request.body(Body::empty()).unwrap()
}

async fn voucher(router: &Router) -> Value {
    let voucher = answer(router, get("/api/vouchers/1", None)).await;
    assert_eq!(voucher.status, StatusCode::OK);
    voucher.json()
}
