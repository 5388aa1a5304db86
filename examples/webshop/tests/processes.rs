//! Two shop *processes* — the `example-webshop` binary itself, started twice on two ports
//! with `--redis` and `--db` pointing at one Redis and one SQLite file — spoken to over
//! TCP, as a load balancer would spread one user's requests over two instances.
//!
//! `http/two_instances.rs` checks the same with two routers in one process, on every
//! store; this is the binary, its command line and its real sockets.

mod support;

use std::process::Command;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use idem_tests::{HttpClient, RedisServer, ServerProcess, all_at_once, http_client, send_over_tcp};
use serde_json::{Value, json};

/// Starts the shop on a port of its choosing, on `db` and `redis`.
fn start_shop(db: &str, redis: &str) -> ServerProcess {
    let mut shop = Command::new(env!("CARGO_BIN_EXE_example-webshop"));
    shop.args(["--port", "0", "--db", db, "--redis", redis]);
    ServerProcess::start(shop)
}

/// Sends `request` and returns the status and the body.
async fn send(http: &HttpClient, request: Request<Body>) -> (StatusCode, Vec<u8>) {
    let answer = send_over_tcp(http, request)
        .await
        .expect("the shop answers");
    (answer.status, answer.body.to_vec())
}

async fn get_json(http: &HttpClient, url: String) -> Value {
    let (status, body) = send(http, Request::get(url).body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_slice(&body).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_on_one_redis_and_one_database_act_as_one_shop() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = format!("sqlite://{}", dir.path().join("shop.db").display());
    // One after the other, so the second finds the schema the first made.
    let first = start_shop(&db, &redis.url());
    let second = start_shop(&db, &redis.url());
    let bases = [first.base().to_owned(), second.base().to_owned()];
    let http = http_client();

    // An API client's retries, spread over both.
    let statuses = all_at_once(20, |i| {
        let (http, url) = (http.clone(), format!("{}/api/orders", bases[i % 2]));
        async move {
            let request = Request::post(url)
                .header(header::CONTENT_TYPE, "application/json")
                .header("x-user-id", "7")
                .header("idempotency-key", "retry-me")
                .body(Body::from(
                    json!({ "product_id": 1, "quantity": 1 }).to_string(),
                ))
                .unwrap();
            send(&http, request).await.0
        }
    })
    .await;
    assert!(statuses.contains(&StatusCode::CREATED), "{statuses:?}");
    let orders = get_json(&http, format!("{}/api/orders", bases[1])).await;
    assert_eq!(orders.as_array().map(Vec::len), Some(1), "{orders}");

    // A double-clicked form: the browser's session started by one instance, its form
    // issued by the other, its posts spread over both.
    let front = send_over_tcp(
        &http,
        Request::get(format!("{}/", bases[1]))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .expect("the shop answers");
    assert_eq!(front.status, StatusCode::OK);
    let session = support::session_cookie(&front);
    let (_, form) = send(
        &http,
        Request::get(format!("{}/orders/new?product_id=2", bases[0]))
            .header(header::COOKIE, &session)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let form = String::from_utf8(form).expect("HTML");
    let start = form.find("name=\"form_token\" value=\"").expect("a token") + 25;
    let token = form[start..start + form[start..].find('"').unwrap()].to_owned();
    let statuses = all_at_once(20, |i| {
        let (http, url) = (http.clone(), format!("{}/orders", bases[i % 2]));
        let body = format!("product_id=2&quantity=1&form_token={token}");
        let session = session.clone();
        async move {
            let request = Request::post(url)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header(header::COOKIE, session)
                .body(Body::from(body))
                .unwrap();
            send(&http, request).await.0
        }
    })
    .await;
    // One order, and every post, whichever process it reached, lands on it.
    assert!(
        statuses.iter().all(|s| *s == StatusCode::SEE_OTHER),
        "{statuses:?}"
    );
    let orders = get_json(&http, format!("{}/api/orders", bases[0])).await;
    assert_eq!(orders.as_array().map(Vec::len), Some(2), "{orders}");

    // The flash sale: 200 buyers, each clicking once on each instance, for 100 vouchers.
    let statuses = all_at_once(400, |i| {
        let (http, url) = (
            http.clone(),
            format!("{}/api/vouchers/1/seckill", bases[i % 2]),
        );
        let user = format!("buyer-{}", i / 2);
        async move {
            let request = Request::post(url)
                .header("x-user-id", user)
                .body(Body::empty())
                .unwrap();
            send(&http, request).await.0
        }
    })
    .await;
    support::assert_sold_exactly(&statuses, 100);
    let voucher = get_json(&http, format!("{}/api/vouchers/1", bases[1])).await;
    assert_eq!(voucher, json!({ "id": 1, "stock": 0, "sold": 100 }));

    // Each buyer at most once, as the database has it.
    let pool = example_webshop::connect(&db).await.expect("the database");
    let (rows, buyers): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT user_id) FROM voucher_orders")
            .fetch_one(&pool)
            .await
            .expect("counts");
    assert_eq!((rows, buyers), (100, 100));
}
