//! Proof by crash, for the order form. The shop *process* is killed with `SIGKILL` right
//! after a form order's transaction commits — the order, its spent form token and the page
//! a repeat gets, in one transaction — and before the page is sent; the browser's post is
//! then repeated against a restarted shop on the same database. The repeat must land on
//! the order the dead shop placed (`Idempotent-Replayed: true`, the same order page): never
//! a 409, never a second order.
//!
//! Orders are counted in their table. The shop kills itself at that point through its
//! test-only switch (`IDEM_EXAMPLE_CRASH_AFTER_COMMIT=1`); every process is started and
//! stopped by the test, by its pid. `IDEM_CRASHES` sets the crashes (default 3).

#![cfg(unix)]

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{Answer, HttpClient, ServerProcess, http_client, send_over_tcp};

const SIGKILL: i32 = 9;

/// The crashes: `IDEM_CRASHES`, else 3.
fn crashes() -> usize {
    std::env::var("IDEM_CRASHES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// The shop on the database file `db`, with the crash switch on or off.
fn start_shop(db: &Path, crash: bool) -> ServerProcess {
    let mut shop = Command::new(env!("CARGO_BIN_EXE_example-webshop"));
    let url = format!("sqlite://{}", db.display());
    shop.args(["--port", "0", "--db", &url])
        .env_remove("IDEM_REDIS_URL")
        .env(
            "IDEM_EXAMPLE_CRASH_AFTER_COMMIT",
            if crash { "1" } else { "0" },
        );
    ServerProcess::start(shop)
}

async fn get(http: &HttpClient, shop: &ServerProcess, path: &str, session: &str) -> Answer {
    let mut request = Request::get(format!("{}{path}", shop.base()));
    if !session.is_empty() {
        request = request.header(header::COOKIE, session);
    }
    send_over_tcp(http, request.body(Body::empty()).unwrap())
        .await
        .expect("the shop answers")
}

/// The order form's post, as the browser sends it.
fn post_order(shop: &ServerProcess, session: &str, token: &str) -> Request<Body> {
    Request::post(format!("{}/orders", shop.base()))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, session)
        .body(Body::from(format!(
            "product_id=1&quantity=1&form_token={token}"
        )))
        .unwrap()
}

async fn orders(db: &Path) -> i64 {
    let pool = example_webshop::connect(&format!("sqlite://{}", db.display()))
        .await
        .expect("the database");
    let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM orders")
        .fetch_one(&pool)
        .await
        .expect("the orders' count");
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_order_repeated_after_the_shop_died_past_its_commit_lands_on_that_order() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("shop.db");
    let http = http_client();
    let (mut replayed, mut placed_twice) = (0, 0);
    for run in 0..crashes() {
        let mut crashing = start_shop(&db, true);
        let front = get(&http, &crashing, "/", "").await;
        let session = support::session_cookie(&front);
        let form = get(&http, &crashing, "/orders/new?product_id=1", &session).await;
        assert_eq!(form.status, StatusCode::OK);
        let token = idem_tests::form_token_in(&form.text());
        let before = orders(&db).await;

        let lost = send_over_tcp(&http, post_order(&crashing, &session, &token)).await;
        assert!(lost.is_err(), "the shop died before answering: {lost:?}");
        let ended = crashing.ended(Duration::from_secs(10)).await;
        assert_eq!(ended.signal(), Some(SIGKILL), "killed by its switch");
        assert_eq!(orders(&db).await, before + 1, "it died after the commit");
        drop(crashing);

        let shop = start_shop(&db, false);
        let repeat = send_over_tcp(&http, post_order(&shop, &session, &token))
            .await
            .expect("the restarted shop answers");
        assert_eq!(
            repeat.status,
            StatusCode::SEE_OTHER,
            "run {run}: {repeat:?}"
        );
        let location = &repeat.headers[header::LOCATION];
        assert_eq!(location, &format!("/orders/{}", before + 1), "run {run}");
        replayed += usize::from(repeat.replayed());
        placed_twice += usize::from(orders(&db).await > before + 1);
    }
    println!(
        "form orders, committed with their tokens and pages: {placed_twice} of {} crashes \
         placed twice, {replayed} repeats replayed the order's page",
        crashes()
    );
    assert_eq!(placed_twice, 0);
    assert_eq!(replayed, crashes());
}
