//! One client's flood never takes the guards down for the others: form pages rendered ten
//! times the store's capacity, by one client or by 10,000 throwaway ones, leave every
//! other client's guarded requests answering 201 — on a `MemoryStore` with small budgets,
//! and on a real Redis whose `maxmemory` (with `noeviction`) a flood of unbudgeted
//! tokens would fill.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode, header};
use axum::response::{Html, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use idem_axum::identity::ClientCookie;
use idem_axum::{
    AvoidRepeatLayer, FormToken, Idem, IdempotencyLayer, MemoryStore, RedisStore,
    VerifyFormTokenLayer, store::Store,
};
use idem_tests::{RedisServer, all_at_once};
use tower::ServiceExt;

/// The store's budgets in these tests: windows, locks and records, and tokens apart.
const CAPACITY: usize = 1_000;
/// Ten times the capacity.
const FLOOD: usize = 10 * CAPACITY;

async fn order_form(token: FormToken) -> Html<String> {
    Html(format!(
        r#"<form method="post" action="/orders"><input name="item">{}</form>"#,
        token.hidden_input()
    ))
}

async fn place_order(
    State(orders): State<Arc<AtomicUsize>>,
    Form(_order): Form<HashMap<String, String>>,
) -> StatusCode {
    orders.fetch_add(1, Ordering::SeqCst);
    StatusCode::CREATED
}

/// A form page, its submission, a route under `AvoidRepeatLayer` and one under
/// `IdempotencyLayer`, clients told apart by their `session` cookie.
fn app<S: Store>(store: S, orders: &Arc<AtomicUsize>) -> Router {
    let idem = Idem::builder()
        .with_store(store)
        .with_client_identity(ClientCookie::new("session"))
        .build();
    Router::new()
        .route("/form", get(order_form))
        .route(
            "/orders",
            post(place_order).route_layer(VerifyFormTokenLayer::new()),
        )
        .route(
            "/once",
            post(place_order).route_layer(AvoidRepeatLayer::new(Duration::from_secs(60))),
        )
        .route(
            "/api/orders",
            post(place_order).route_layer(IdempotencyLayer::new().with_required(true)),
        )
        .with_state(Arc::clone(orders))
        .layer(idem.layer())
}

async fn send(app: &Router, client: &str, request: axum::http::request::Builder) -> Response {
    let request = request
        .header(header::COOKIE, format!("session={client}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("idempotency-key", format!("order-of-{client}"))
        .body(Body::from("item=tea"))
        .expect("a request");
    app.clone()
        .oneshot(request)
        .await
        .expect("routers are infallible")
}

/// Renders the form for `client`; its token, or the status when it was refused.
async fn render(app: &Router, client: &str) -> Result<String, StatusCode> {
    let response = send(app, client, Request::get("/form")).await;
    if response.status() != StatusCode::OK {
        return Err(response.status());
    }
    let page = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a page");
    let page = String::from_utf8_lossy(&page);
    let value = page
        .split(r#"name="form_token" value=""#)
        .nth(1)
        .expect("a token");
    Ok(value.split('"').next().unwrap_or_default().to_owned())
}

async fn post_order(app: &Router, client: &str, token: &str) -> StatusCode {
    let request = Request::post("/orders")
        .header(header::COOKIE, format!("session={client}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("item=tea&form_token={token}")))
        .expect("a request");
    let response = app
        .clone()
        .oneshot(request)
        .await
        .expect("routers are infallible");
    response.status()
}

/// `count` form pages for the clients `client(i)`, 500 at a time; each page must be
/// served (a flood of tokens never fails a page).
async fn flood(app: &Router, count: usize, client: impl Fn(usize) -> String) {
    for batch in (0..count).step_by(500) {
        let clients: Vec<String> = (batch..(batch + 500).min(count)).map(&client).collect();
        let pages = all_at_once(clients.len(), |i| {
            let (app, client) = (app.clone(), clients[i].clone());
            async move { render(&app, &client).await }
        })
        .await;
        for page in pages {
            page.expect("every form page is served during the flood");
        }
    }
}

/// What every other client can still do after a flood: render a form and post it, and
/// pass an anti-repeat window and an idempotency key, each answered 201 and run once.
async fn others_are_unharmed(app: &Router, orders: &Arc<AtomicUsize>, client: &str) {
    let before = orders.load(Ordering::SeqCst);
    let token = render(app, client).await.expect("a form page");
    assert_eq!(
        post_order(app, client, &token).await,
        StatusCode::CREATED,
        "{client}: form"
    );
    assert_eq!(
        send(app, client, Request::post("/once")).await.status(),
        StatusCode::CREATED,
        "{client}: anti-repeat window"
    );
    assert_eq!(
        send(app, client, Request::post("/api/orders"))
            .await
            .status(),
        StatusCode::CREATED,
        "{client}: idempotency key"
    );
    assert_eq!(orders.load(Ordering::SeqCst), before + 3, "{client}");
}

/// One client renders the form ten times the capacity: it keeps its newest tokens, and
/// nobody else notices.
async fn one_client_floods<S: Store>(store: S) {
    let orders = Arc::new(AtomicUsize::new(0));
    let app = app(store, &orders);
    let first = render(&app, "mallory").await.expect("a form page");
    flood(&app, FLOOD, |_| "mallory".to_owned()).await;
    let newest = render(&app, "mallory").await.expect("a form page");
    others_are_unharmed(&app, &orders, "bob").await;
    assert_eq!(
        post_order(&app, "mallory", &first).await,
        StatusCode::CONFLICT,
        "the flooder's oldest token lapsed"
    );
    assert_eq!(
        post_order(&app, "mallory", &newest).await,
        StatusCode::CREATED
    );
}

/// 10,000 throwaway clients render the form once each.
async fn throwaway_clients_flood<S: Store>(store: S) {
    let orders = Arc::new(AtomicUsize::new(0));
    let app = app(store, &orders);
    flood(&app, FLOOD, |i| format!("throwaway-{i}")).await;
    others_are_unharmed(&app, &orders, "carol").await;
    flood(&app, FLOOD, |i| format!("throwaway-again-{i}")).await;
    others_are_unharmed(&app, &orders, "dave").await;
}

fn small_memory_store() -> MemoryStore {
    MemoryStore::builder()
        .with_capacity(CAPACITY)
        .with_token_capacity(CAPACITY)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_one_client_flooding_form_pages_harms_no_one_else() {
    one_client_floods(small_memory_store()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_throwaway_clients_flooding_form_pages_harm_no_one_else() {
    throwaway_clients_flood(small_memory_store()).await;
}

/// A Redis that refuses writes (`noeviction`) once it holds `headroom` bytes more than it
/// does empty: less than a flood's tokens would take without a budget, more than the
/// token budget needs.
fn tight_redis(headroom: u64) -> RedisServer {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let used = server.info_number("memory", "used_memory");
    server.command(&["CONFIG", "SET", "maxmemory", &(used + headroom).to_string()]);
    server
}

/// Room for the token budget and the guards, not for a flood's worth of tokens.
const REDIS_HEADROOM: u64 = 1024 * 1024;

fn budgeted(server: &RedisServer) -> RedisStore {
    server.store_with(RedisStore::builder().with_token_capacity(CAPACITY))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_one_client_flooding_form_pages_harms_no_one_else() {
    let server = tight_redis(REDIS_HEADROOM);
    one_client_floods(budgeted(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_throwaway_clients_flooding_form_pages_harm_no_one_else() {
    let server = tight_redis(REDIS_HEADROOM);
    throwaway_clients_flood(budgeted(&server)).await;
    // The data alone: `used_memory` also counts the flood's client connections' buffers,
    // which can take the server past `maxmemory` by a few bytes with no token in excess.
    let data = server.info_number("memory", "used_memory_dataset");
    assert!(
        data < REDIS_HEADROOM,
        "the tokens outgrew their budget: {data} bytes of data, {REDIS_HEADROOM} of headroom"
    );
    let errors: String = server.query(&["INFO", "errorstats"]);
    assert!(
        !errors.contains("errorstat_OOM"),
        "the server refused writes for memory: {errors}"
    );
}

/// The headroom above is a real limit: without the token budget, the same flood fills it
/// and the server refuses writes. If this fails, the tests above prove nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_without_a_token_budget_the_flood_would_fill_the_headroom() {
    let server = tight_redis(REDIS_HEADROOM);
    let unbudgeted = server.store_with(RedisStore::builder().with_token_capacity(usize::MAX / 2));
    let orders = Arc::new(AtomicUsize::new(0));
    let app = app(unbudgeted, &orders);
    let mut refused = 0;
    for batch in (0..2 * FLOOD).step_by(500) {
        let pages = all_at_once(500, |i| {
            let app = app.clone();
            async move { render(&app, &format!("throwaway-{}", batch + i)).await }
        })
        .await;
        refused += pages.iter().filter(|page| page.is_err()).count();
    }
    assert!(
        refused > 0,
        "{} flood pages all fit in the headroom",
        2 * FLOOD
    );
}
