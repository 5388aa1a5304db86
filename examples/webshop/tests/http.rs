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

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use example_webshop::Shop;
use idem_tests::{Backend, MemoryBackend, RedisBackend, all_at_once, answer};
use serde_json::{Value, json};
use sqlx::SqlitePool;
use tempfile::TempDir;

idem_tests::on_every_store!(
    pages_show_products_and_hand_out_a_session,
    an_unknown_product_has_no_form_and_costs_no_token,
    a_form_places_one_order_however_often_it_is_posted,
    a_double_click_places_one_order,
    a_second_form_inside_the_window_is_refused_for_that_browser_only,
    form_posts_without_token_or_session_are_refused_and_place_nothing,
    api_order_retries_replay_the_first_order,
    concurrent_api_retries_place_one_order,
    api_orders_need_a_key_and_a_client_and_good_json,
    payment_callbacks_pay_once_per_source_and_seq,
    a_string_seq_of_any_length_is_paid_once,
    malformed_callbacks_are_refused_naming_the_field_and_leave_nothing,
    an_order_or_a_payment_and_its_record_commit_together_or_not_at_all,
    a_restarted_shop_on_a_fresh_store_replays_from_its_database,
    withdrawals_deduct_once_per_ticket,
    insufficient_funds_is_the_tickets_recorded_outcome,
    seckill_sells_one_voucher_per_user_and_stops_at_zero,
    two_instances_place_one_order_for_duplicates_split_across_them,
    two_instances_sell_exactly_the_stock_to_200_buyers,
);

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

async fn pages_show_products_and_hand_out_a_session<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let front = answer(&shop.router, get("/", None)).await;
    assert_eq!(front.status, StatusCode::OK);
    assert!(front.text().contains("Hand grinder"), "{}", front.text());
    let cookie = front.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("shop_session="), "{cookie}");
    for setting in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age=86400"] {
        assert!(cookie.contains(setting), "{setting}: {cookie}");
    }
    let s1 = support::session_cookie(&front);

    // A browser that has its session gets no new one: the same session, its day renewed.
    let again = answer(&shop.router, get("/", Some(&s1))).await;
    assert_eq!(support::session_cookie(&again), s1);
    // A session id the shop never gave out is not taken: the browser gets a new one, and
    // the form that page shows is the new session's.
    let malformed = answer(&shop.router, get("/", Some("shop_session=s1"))).await;
    assert_ne!(support::session_cookie(&malformed), "shop_session=s1");
    let unknown = "shop_session=AAAAAAAAAAAAAAAAAAAAAA";
    let form = answer(&shop.router, get("/orders/new?product_id=1", Some(unknown))).await;
    let renewed = support::session_cookie(&form);
    assert_ne!(renewed, unknown);
    let token = token_in(&form.text());
    let placed = answer(&shop.router, form_post(&renewed, &order_form(&token))).await;
    assert_eq!(placed.status, StatusCode::SEE_OTHER, "{}", placed.text());

    // The first page a browser opens is the order form: its token is that new session's.
    let form = answer(&shop.router, get("/orders/new?product_id=1", None)).await;
    assert_eq!(form.status, StatusCode::OK);
    let session = support::session_cookie(&form);
    assert_ne!(session, s1);
    let token = token_in(&form.text());
    let placed = answer(&shop.router, form_post(&session, &order_form(&token))).await;
    assert_eq!(placed.status, StatusCode::SEE_OTHER, "{}", placed.text());

    let missing = answer(&shop.router, get("/orders/new?product_id=99", Some(&s1))).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let bad = answer(&shop.router, get("/orders/new?product_id=x", Some(&s1))).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        status(&shop.router, get("/orders/99", Some(&s1))).await,
        StatusCode::NOT_FOUND
    );
}

async fn an_unknown_product_has_no_form_and_costs_no_token<B: Backend + StoredEntries>() {
    let shop = TestShop::<B>::start().await;
    let before = shop.backend.stored_entries();
    let s1 = new_browser(&shop.router).await;
    for uri in ["/orders/new?product_id=99", "/orders/new?product_id=-1"] {
        let missing = answer(&shop.router, get(uri, Some(&s1))).await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND, "{uri}");
        assert!(!missing.text().contains("form_token"), "{uri}");
    }
    let bad = answer(&shop.router, get("/orders/new?product_id=x", Some(&s1))).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    // A browser without a session yet gets none stored either.
    let fresh = answer(&shop.router, get("/orders/new?product_id=99", None)).await;
    assert_eq!(fresh.status, StatusCode::NOT_FOUND);
    assert_eq!(shop.backend.stored_entries(), before);

    // The count does see a token: a product's form stores one.
    form_token(&shop.router, &s1).await;
    assert!(shop.backend.stored_entries() > before);
}

async fn a_form_places_one_order_however_often_it_is_posted<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let s1 = new_browser(&shop.router).await;
    let s2 = new_browser(&shop.router).await;
    let token = form_token(&shop.router, &s1).await;
    let placed = answer(&shop.router, form_post(&s1, &order_form(&token))).await;
    assert_eq!(placed.status, StatusCode::SEE_OTHER, "{}", placed.text());
    assert_eq!(placed.headers[header::LOCATION], "/orders/1");

    // Back and submit again, or the browser's re-POST: the token is spent, and the
    // repeat lands on the order its first post placed.
    for _ in 0..3 {
        let repeat = answer(&shop.router, form_post(&s1, &order_form(&token))).await;
        assert_eq!(repeat.status, StatusCode::SEE_OTHER);
        assert_eq!(repeat.headers[header::LOCATION], "/orders/1");
        assert_eq!(repeat.headers["idempotent-replayed"], "true");
    }
    // The same form from another browser is refused, in the shop's own page.
    let stolen = answer(&shop.router, form_post(&s2, &order_form(&token))).await;
    assert_eq!(stolen.status, StatusCode::CONFLICT);
    assert!(stolen.text().contains("请勿重复提交"), "{}", stolen.text());
    assert!(
        stolen
            .text()
            .contains(r#"<a href="/">Back to the shop</a>"#),
        "the shop's own page, with a way back: {}",
        stolen.text()
    );
    // The page the redirect leads to; reloading it is a GET and places nothing.
    for _ in 0..2 {
        let page = answer(&shop.router, get("/orders/1", Some(&s1))).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.text().contains("Order 1"));
    }
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);
    let orders = answer(&shop.router, get("/api/orders", None)).await.json();
    assert_eq!(orders[0]["product_id"], 1);
    assert_eq!(orders[0]["quantity"], 2);
    assert!(
        orders[0]["client"]
            .as_str()
            .unwrap()
            .starts_with("browser:")
    );
}

async fn a_double_click_places_one_order<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let s1 = new_browser(&shop.router).await;
    let token = form_token(&shop.router, &s1).await;
    let router = shop.router.clone();
    let statuses = all_at_once(20, |_| {
        let (router, form, s1) = (router.clone(), order_form(&token), s1.clone());
        async move { status(&router, form_post(&s1, &form)).await }
    })
    .await;
    // Every click lands on the one order the first placed.
    assert!(
        statuses.iter().all(|s| *s == StatusCode::SEE_OTHER),
        "{statuses:?}"
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);
}

async fn a_second_form_inside_the_window_is_refused_for_that_browser_only<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let s1 = new_browser(&shop.router).await;
    let s2 = new_browser(&shop.router).await;
    let first = form_token(&shop.router, &s1).await;
    let second = form_token(&shop.router, &s1).await;
    let other = form_token(&shop.router, &s2).await;
    assert_eq!(
        status(&shop.router, form_post(&s1, &order_form(&first))).await,
        StatusCode::SEE_OTHER
    );
    // A fresh token, but the same browser inside `#[avoid_repeat]`'s window.
    assert_eq!(
        status(&shop.router, form_post(&s1, &order_form(&second))).await,
        StatusCode::CONFLICT
    );
    // Another browser is not blocked, and one browser cannot spend another's token.
    assert_eq!(
        status(&shop.router, form_post(&s1, &order_form(&other))).await,
        StatusCode::CONFLICT
    );
    assert_eq!(
        status(&shop.router, form_post(&s2, &order_form(&other))).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 2);
}

async fn form_posts_without_token_or_session_are_refused_and_place_nothing<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let s1 = new_browser(&shop.router).await;
    let no_token = answer(&shop.router, form_post(&s1, "product_id=1&quantity=1")).await;
    assert_eq!(no_token.status, StatusCode::BAD_REQUEST);
    let forged = answer(&shop.router, form_post(&s1, &order_form("forged"))).await;
    assert_eq!(forged.status, StatusCode::CONFLICT);
    // The browser's own token, posted without its session cookie: the post is a new
    // session's, and the token is not that session's.
    let token = form_token(&shop.router, &s1).await;
    let mut no_session = form_post(&s1, &order_form(&token));
    no_session.headers_mut().remove(header::COOKIE);
    assert_eq!(status(&shop.router, no_session).await, StatusCode::CONFLICT);
    let token = form_token(&shop.router, &s1).await;
    let bad_quantity = answer(
        &shop.router,
        form_post(&s1, &format!("product_id=1&quantity=0&form_token={token}")),
    )
    .await;
    assert_eq!(bad_quantity.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 0);
}

fn api_order(key: &str, user: &str, body: &Value) -> Request<Body> {
    json_request(
        Method::POST,
        "/api/orders",
        &[("idempotency-key", key), ("x-user-id", user)],
        body,
    )
}

async fn api_order_retries_replay_the_first_order<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let body = json!({ "product_id": 2, "quantity": 3 });
    let first = answer(&shop.router, api_order("k1", "7", &body)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        first.json(),
        json!({ "id": 1, "product_id": 2, "quantity": 3, "client": "user:7" })
    );
    for _ in 0..3 {
        let retry = answer(&shop.router, api_order("k1", "7", &body)).await;
        assert_eq!(retry.status, StatusCode::CREATED);
        assert_eq!(retry.body, first.body);
        assert_eq!(retry.headers["idempotent-replayed"], "true");
    }
    // The same key with another order is refused; another user's key is their own.
    let other = json!({ "product_id": 2, "quantity": 4 });
    assert_eq!(
        status(&shop.router, api_order("k1", "7", &other)).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        status(&shop.router, api_order("k1", "8", &body)).await,
        StatusCode::CREATED
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 2);
    let orders = answer(&shop.router, get("/api/orders", None)).await;
    assert_eq!(orders.status, StatusCode::OK);
    assert_eq!(orders.json().as_array().unwrap().len(), 2);
}

async fn concurrent_api_retries_place_one_order<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let router = shop.router.clone();
    let statuses = all_at_once(20, |_| {
        let router = router.clone();
        async move {
            let body = json!({ "product_id": 1, "quantity": 1 });
            status(&router, api_order("k", "7", &body)).await
        }
    })
    .await;
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);
}

async fn api_orders_need_a_key_and_a_client_and_good_json<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let body = json!({ "product_id": 1, "quantity": 1 });
    let no_key = json_request(Method::POST, "/api/orders", &[("x-user-id", "7")], &body);
    assert_eq!(status(&shop.router, no_key).await, StatusCode::BAD_REQUEST);
    let no_client = json_request(
        Method::POST,
        "/api/orders",
        &[("idempotency-key", "k")],
        &body,
    );
    assert_eq!(
        status(&shop.router, no_client).await,
        StatusCode::BAD_REQUEST
    );
    let broken = Request::post("/api/orders")
        .header("idempotency-key", "k2")
        .header("x-user-id", "7")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{\"product_id\":"))
        .unwrap();
    assert!(status(&shop.router, broken).await.is_client_error());
    let no_product = json!({ "product_id": 99, "quantity": 1 });
    assert_eq!(
        status(&shop.router, api_order("k3", "7", &no_product)).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 0);
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

async fn payment_callbacks_pay_once_per_source_and_seq<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let order = json!({ "product_id": 1, "quantity": 1 });
    assert_eq!(
        status(&shop.router, api_order("k", "7", &order)).await,
        StatusCode::CREATED
    );

    let paid = json!({ "source": "alipay", "seq": 42, "order_id": 1, "amount": 2400 });
    let first = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.json(), json!({ "payment_id": 1, "status": "paid" }));
    // The back channel, from another address, and the provider's retries.
    for caller in ["10.0.0.2", "10.0.0.1"] {
        let repeat = answer(&shop.router, callback(&paid, caller)).await;
        assert_eq!(repeat.status, StatusCode::OK);
        assert_eq!(repeat.body, first.body);
    }
    let other = json!({ "source": "alipay", "seq": 42, "order_id": 1, "amount": 1 });
    assert_eq!(
        status(&shop.router, callback(&other, "10.0.0.1")).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // Many deliveries of a new pair at once: one payment.
    let router = shop.router.clone();
    let next = json!({ "source": "wechat", "seq": 1, "order_id": 1, "amount": 2400 });
    let statuses = all_at_once(20, |_| {
        let (router, next) = (router.clone(), next.clone());
        async move { status(&router, callback(&next, "10.0.0.3")).await }
    })
    .await;
    assert!(statuses.contains(&StatusCode::OK), "{statuses:?}");
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 2);

    let broken = Request::post("/api/payments/callback")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{not json"))
        .unwrap();
    assert_eq!(status(&shop.router, broken).await, StatusCode::BAD_REQUEST);
    let no_order = json!({ "source": "alipay", "seq": 43, "order_id": 9, "amount": 1 });
    assert_eq!(
        status(&shop.router, callback(&no_order, "10.0.0.1")).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 2);
}

/// A callback with a body as sent, which need not be JSON.
fn raw_callback(body: &str) -> Request<Body> {
    Request::post("/api/payments/callback")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("a request")
}

async fn a_string_seq_of_any_length_is_paid_once<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let order = json!({ "product_id": 1, "quantity": 1 });
    assert_eq!(
        status(&shop.router, api_order("k", "7", &order)).await,
        StatusCode::CREATED
    );

    // A trade number longer than any integer type holds.
    let trade = "2013112011001004330000121536";
    let paid = json!({ "source": "alipay", "seq": trade, "order_id": 1, "amount": 2400 });
    let first = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    assert_eq!(first.json(), json!({ "payment_id": 1, "status": "paid" }));
    for caller in ["10.0.0.2", "10.0.0.1", "10.0.0.3"] {
        let repeat = answer(&shop.router, callback(&paid, caller)).await;
        assert_eq!(repeat.status, StatusCode::OK);
        assert_eq!(repeat.body, first.body);
    }
    // The same delivery in other words: keys reordered, spaced, with a field the shop
    // does not read.
    let reworded = format!(
        r#"{{ "amount": 2400, "order_id": 1, "seq": "{trade}", "source": "alipay", "sign": "x" }}"#
    );
    let repeat = answer(&shop.router, raw_callback(&reworded)).await;
    assert_eq!(repeat.status, StatusCode::OK);
    assert_eq!(repeat.body, first.body);
    let stored: String = sqlx::query_scalar("SELECT seq FROM payments WHERE id = 1")
        .fetch_one(&shop.db)
        .await
        .unwrap();
    assert_eq!(stored, trade);

    // A number and its digits as a string are one delivery; a string is kept exactly,
    // leading zeros and all.
    let number = json!({ "source": "wechat", "seq": 7, "order_id": 1, "amount": 100 });
    let as_number = answer(&shop.router, callback(&number, "10.0.0.1")).await;
    assert_eq!(as_number.status, StatusCode::OK);
    assert_eq!(as_number.json()["payment_id"], 2);
    let text = json!({ "source": "wechat", "seq": "7", "order_id": 1, "amount": 100 });
    let as_text = answer(&shop.router, callback(&text, "10.0.0.2")).await;
    assert_eq!(as_text.status, StatusCode::OK);
    assert_eq!(as_text.body, as_number.body);
    assert_eq!(as_text.headers["idempotent-replayed"], "true");
    let padded = json!({ "source": "wechat", "seq": "007", "order_id": 1, "amount": 100 });
    let other = answer(&shop.router, callback(&padded, "10.0.0.1")).await;
    assert_eq!(other.json()["payment_id"], 3);
    // And the same number with another amount is the same delivery, refused.
    let changed = json!({ "source": "wechat", "seq": "7", "order_id": 1, "amount": 1 });
    assert_eq!(
        status(&shop.router, callback(&changed, "10.0.0.1")).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 3);
}

async fn malformed_callbacks_are_refused_naming_the_field_and_leave_nothing<
    B: Backend + StoredEntries,
>() {
    let shop = TestShop::<B>::start().await;
    let order = json!({ "product_id": 1, "quantity": 1 });
    assert_eq!(
        status(&shop.router, api_order("k", "7", &order)).await,
        StatusCode::CREATED
    );
    let before = shop.backend.stored_entries();

    let bad = [
        (
            r#"{"source": "alipay", "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": null, "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": {"n": 9}, "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": 9.5, "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": 2013112011001004330000121536, "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (
            r#"{"source": "alipay", "seq": "", "order_id": 1, "amount": 2400}"#,
            "`seq`",
        ),
        (r#"{"seq": "9", "order_id": 1, "amount": 2400}"#, "`source`"),
        (
            r#"{"source": 7, "seq": "9", "order_id": 1, "amount": 2400}"#,
            "`source`",
        ),
        (
            r#"{"source": "alipay", "seq": "9", "order_id": "1", "amount": 2400}"#,
            "`order_id`",
        ),
        (
            r#"{"source": "alipay", "seq": "9", "order_id": 1}"#,
            "`amount`",
        ),
        (r#"["alipay", "9", 1, 2400]"#, "object"),
        ("{not json", "JSON"),
        ("", "JSON"),
    ];
    for (body, field) in bad {
        let refused = answer(&shop.router, raw_callback(body)).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{body}");
        let error = refused.json()["error"].as_str().map(str::to_owned);
        assert!(
            error.is_some_and(|error| error.contains(field)),
            "{body}: {}",
            refused.text()
        );
    }
    let unpaid = r#"{"source": "alipay", "seq": "9", "order_id": 1, "amount": 0}"#;
    let refused = answer(&shop.router, raw_callback(unpaid)).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(refused.text().contains("`amount`"), "{}", refused.text());
    let untyped = Request::post("/api/payments/callback")
        .body(Body::from(
            r#"{"source": "alipay", "seq": "9", "order_id": 1, "amount": 2400}"#,
        ))
        .unwrap();
    let refused = answer(&shop.router, untyped).await;
    assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(
        refused.text().contains("Content-Type"),
        "{}",
        refused.text()
    );

    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 0);
    assert_eq!(shop.backend.stored_entries(), before, "no record was left");
    assert_eq!(
        shop.count(RECORDS).await,
        1,
        "the order's record, and no callback's"
    );

    // The provider corrects the delivery and sends it again: it is the first.
    let corrected = json!({ "source": "alipay", "seq": "9", "order_id": 1, "amount": 2400 });
    let paid = answer(&shop.router, callback(&corrected, "10.0.0.1")).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    assert_eq!(paid.json(), json!({ "payment_id": 1, "status": "paid" }));
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 1);
}

/// The idempotency records of API orders and payment callbacks, in the shop's database.
const RECORDS: &str = "SELECT COUNT(*) FROM idem_records";

/// Those of them that are completed: a stored response, no attempt owning them.
const COMPLETED_RECORDS: &str =
    "SELECT COUNT(*) FROM idem_records WHERE response IS NOT NULL AND owner IS NULL";

/// Makes every completion of a record fail inside its transaction, after the handler's
/// writes and before the commit, until [`HEAL`].
const BREAK_COMPLETION: &str = "CREATE TRIGGER fail_completion BEFORE UPDATE ON idem_records \
     BEGIN SELECT RAISE(ABORT, 'injected failure'); END";
const HEAL: &str = "DROP TRIGGER fail_completion";

async fn an_order_or_a_payment_and_its_record_commit_together_or_not_at_all<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let order = json!({ "product_id": 1, "quantity": 1 });
    let paid = json!({ "source": "alipay", "seq": "t1", "order_id": 1, "amount": 2400 });

    shop.execute(BREAK_COMPLETION).await;
    let failed = answer(&shop.router, api_order("k", "7", &order)).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 0);
    assert_eq!(shop.count(RECORDS).await, 0, "a 5xx keeps no record");
    shop.execute(HEAL).await;

    // The retry runs the handler once, and commits the order and its record.
    let placed = answer(&shop.router, api_order("k", "7", &order)).await;
    assert_eq!(placed.status, StatusCode::CREATED, "{}", placed.text());
    assert!(!placed.headers.contains_key("idempotent-replayed"));
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);
    assert_eq!(shop.count(COMPLETED_RECORDS).await, 1);
    let replayed = answer(&shop.router, api_order("k", "7", &order)).await;
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(replayed.body, placed.body);

    // The same for a payment callback.
    shop.execute(BREAK_COMPLETION).await;
    let failed = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 0);
    assert_eq!(shop.count(RECORDS).await, 1, "the order's only");
    shop.execute(HEAL).await;
    let recorded = answer(&shop.router, callback(&paid, "10.0.0.2")).await;
    assert_eq!(recorded.status, StatusCode::OK, "{}", recorded.text());
    assert_eq!(
        recorded.json(),
        json!({ "payment_id": 1, "status": "paid" })
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 1);
    assert_eq!(shop.count(COMPLETED_RECORDS).await, 2);
    let replayed = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(replayed.body, recorded.body);
}

async fn a_restarted_shop_on_a_fresh_store_replays_from_its_database<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let order = json!({ "product_id": 2, "quantity": 1 });
    let placed = answer(&shop.router, api_order("k", "7", &order)).await;
    assert_eq!(placed.status, StatusCode::CREATED);
    let paid = json!({ "source": "wechat", "seq": 5, "order_id": 1, "amount": 4900 });
    let recorded = answer(&shop.router, callback(&paid, "10.0.0.1")).await;
    assert_eq!(recorded.status, StatusCode::OK);

    let (restarted, _store) = shop.restarted().await;
    let replayed = answer(&restarted, api_order("k", "7", &order)).await;
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(replayed.body, placed.body);
    let replayed = answer(&restarted, callback(&paid, "10.0.0.2")).await;
    assert_eq!(replayed.headers["idempotent-replayed"], "true");
    assert_eq!(replayed.body, recorded.body);
    assert_eq!(
        shop.count("SELECT COUNT(*) FROM orders").await,
        1,
        "the handlers did not run again"
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM payments").await, 1);
}

async fn new_ticket(router: &Router) -> String {
    let ticket = answer(
        router,
        Request::post("/api/tickets").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(ticket.status, StatusCode::CREATED);
    ticket.json()["ticket_id"]
        .as_str()
        .expect("a ticket id")
        .to_owned()
}

fn withdraw(account: i64, ticket: &str, amount: i64) -> Request<Body> {
    json_request(
        Method::PUT,
        &format!("/api/accounts/{account}/withdrawals/{ticket}"),
        &[],
        &json!({ "amount": amount }),
    )
}

async fn balance(router: &Router) -> i64 {
    let account = answer(router, get("/api/accounts/1", None)).await;
    assert_eq!(account.status, StatusCode::OK);
    assert_eq!(account.json()["id"], 1);
    account.json()["balance"].as_i64().unwrap()
}

async fn withdrawals_deduct_once_per_ticket<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    assert_eq!(balance(&shop.router).await, 1000);
    let ticket = new_ticket(&shop.router).await;
    let first = answer(&shop.router, withdraw(1, &ticket, 300)).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.json(),
        json!({ "ticket_id": ticket, "amount": 300, "balance": 700 })
    );
    for _ in 0..3 {
        let retry = answer(&shop.router, withdraw(1, &ticket, 300)).await;
        assert_eq!(retry.status, StatusCode::OK);
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(balance(&shop.router).await, 700);
    // The ticket cannot be spent on another amount or another account.
    assert_eq!(
        status(&shop.router, withdraw(1, &ticket, 1)).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // Concurrent retries of one new ticket: one deduction.
    let ticket = new_ticket(&shop.router).await;
    let router = shop.router.clone();
    let statuses = all_at_once(20, |_| {
        let (router, ticket) = (router.clone(), ticket.clone());
        async move { status(&router, withdraw(1, &ticket, 100)).await }
    })
    .await;
    assert!(statuses.contains(&StatusCode::OK), "{statuses:?}");
    assert_eq!(balance(&shop.router).await, 600);
    assert_eq!(shop.count("SELECT COUNT(*) FROM withdrawals").await, 2);

    assert_eq!(
        status(&shop.router, withdraw(1, "no-such-ticket", 1)).await,
        StatusCode::NOT_FOUND
    );
    let ticket = new_ticket(&shop.router).await;
    assert_eq!(
        status(&shop.router, withdraw(1, &ticket, 0)).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        status(
            &shop.router,
            withdraw(9, &new_ticket(&shop.router).await, 1)
        )
        .await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status(&shop.router, get("/api/accounts/9", None)).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(balance(&shop.router).await, 600);
}

async fn insufficient_funds_is_the_tickets_recorded_outcome<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let ticket = new_ticket(&shop.router).await;
    let refused = answer(&shop.router, withdraw(1, &ticket, 5000)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.json()["balance"], 1000);
    assert_eq!(refused.json()["ticket_id"], ticket.as_str());
    // Money arrives; the ticket's outcome stays what it was.
    sqlx::query("UPDATE accounts SET balance = 10000 WHERE id = 1")
        .execute(&shop.db)
        .await
        .unwrap();
    let retry = answer(&shop.router, withdraw(1, &ticket, 5000)).await;
    assert_eq!(retry.status, StatusCode::CONFLICT);
    assert_eq!(retry.body, refused.body);
    assert_eq!(balance(&shop.router).await, 10000);
}

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

async fn seckill_sells_one_voucher_per_user_and_stops_at_zero<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    assert_eq!(
        voucher(&shop.router).await,
        json!({ "id": 1, "stock": 100, "sold": 0 })
    );
    assert_eq!(
        status(&shop.router, seckill(1, Some("u1"))).await,
        StatusCode::CREATED
    );
    assert_eq!(
        status(&shop.router, seckill(1, Some("u1"))).await,
        StatusCode::CONFLICT
    );

    // One user's many clicks at once: one voucher.
    let router = shop.router.clone();
    let statuses = all_at_once(20, |_| {
        let router = router.clone();
        async move { status(&router, seckill(1, Some("u2"))).await }
    })
    .await;
    let bought = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    assert_eq!(bought, 1, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT)
    );
    assert_eq!(
        voucher(&shop.router).await,
        json!({ "id": 1, "stock": 98, "sold": 2 })
    );

    sqlx::query("UPDATE vouchers SET stock = 1 WHERE id = 1")
        .execute(&shop.db)
        .await
        .unwrap();
    assert_eq!(
        status(&shop.router, seckill(1, Some("u3"))).await,
        StatusCode::CREATED
    );
    assert_eq!(
        status(&shop.router, seckill(1, Some("u4"))).await,
        StatusCode::GONE
    );
    assert_eq!(voucher(&shop.router).await["stock"], 0);

    assert_eq!(
        status(&shop.router, seckill(1, None)).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        status(&shop.router, seckill(9, Some("u5"))).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status(&shop.router, get("/api/vouchers/9", None)).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM voucher_orders").await, 3);
}

async fn two_instances_place_one_order_for_duplicates_split_across_them<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let instances = [shop.router.clone(), shop.another_instance().await];
    // A browser whose session one instance started, its form issued by the other, and
    // its posts spread over both: the session is the same browser on either.
    let s1 = new_browser(&instances[1]).await;

    let token = form_token(&instances[0], &s1).await;
    let routers = instances.clone();
    let statuses = all_at_once(20, |i| {
        let (router, form, s1) = (routers[i % 2].clone(), order_form(&token), s1.clone());
        async move { status(&router, form_post(&s1, &form)).await }
    })
    .await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::SEE_OTHER),
        "every click lands on the order: {statuses:?}"
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);

    // An API client's retries, spread the same way.
    let routers = instances.clone();
    all_at_once(20, |i| {
        let router = routers[i % 2].clone();
        async move {
            let body = json!({ "product_id": 1, "quantity": 1 });
            status(&router, api_order("k", "7", &body)).await
        }
    })
    .await;
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 2);
    let retry = answer(
        &instances[1],
        api_order("k", "7", &json!({ "product_id": 1, "quantity": 1 })),
    )
    .await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(retry.json()["id"], 2);
}

async fn two_instances_sell_exactly_the_stock_to_200_buyers<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let instances = [shop.router.clone(), shop.another_instance().await];
    // 200 buyers, each clicking twice — once on each instance.
    let routers = instances.clone();
    let statuses = all_at_once(400, |i| {
        let router = routers[i % 2].clone();
        let user = format!("buyer-{}", i / 2);
        async move { status(&router, seckill(1, Some(&user))).await }
    })
    .await;
    support::assert_sold_exactly(&statuses, 100);
    assert_eq!(
        voucher(&instances[1]).await,
        json!({ "id": 1, "stock": 0, "sold": 100 })
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM voucher_orders").await, 100);
    assert_eq!(
        shop.count("SELECT COUNT(DISTINCT user_id) FROM voucher_orders")
            .await,
        100
    );
}

/// The value of the `idem_outcomes_total` counter of `guard` and `outcome` in a scrape of
/// `GET /metrics`; 0 when it has not been counted yet.
fn outcomes(scrape: &str, guard: &str, outcome: &str) -> u64 {
    scrape
        .lines()
        .filter(|line| line.starts_with("idem_outcomes_total{"))
        .filter(|line| {
            line.contains(&format!(r#"guard="{guard}""#))
                && line.contains(&format!(r#"outcome="{outcome}""#))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// After a duplicate storm, `GET /metrics` counts what the guards decided. Other tests in
/// this process count into the same recorder, so the figures are compared as increases.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_what_the_guards_decided_in_a_duplicate_storm() {
    let shop = TestShop::<idem_tests::MemoryBackend>::start().await;
    let scrape = || async { answer(&shop.router, get("/metrics", None)).await.text() };
    let before = scrape().await;
    let storm = new_browser(&shop.router).await;

    let token = form_token(&shop.router, &storm).await;
    let router = shop.router.clone();
    all_at_once(20, |_| {
        let (router, form, storm) = (router.clone(), order_form(&token), storm.clone());
        async move { status(&router, form_post(&storm, &form)).await }
    })
    .await;
    let body = json!({ "product_id": 1, "quantity": 1 });
    for _ in 0..5 {
        status(&shop.router, api_order("storm-key", "storm-user", &body)).await;
    }

    let after = scrape().await;
    let increase =
        |guard, outcome| outcomes(&after, guard, outcome) - outcomes(&before, guard, outcome);
    assert!(increase("form_token", "issued") >= 1, "{after}");
    assert!(increase("form_token", "accepted") >= 1, "{after}");
    assert!(increase("form_token", "replayed") >= 19, "{after}");
    assert!(increase("idempotency", "accepted") >= 1, "{after}");
    assert!(increase("idempotency", "replayed") >= 4, "{after}");
    assert!(
        after.contains("idem_store_seconds"),
        "the store's latency: {after}"
    );
}
