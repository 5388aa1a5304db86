//! Proof by crash of the shop's outbound call. The shop (this crate's binary) charges
//! each API order through the payments example (its binary, a process of its own, its
//! records in its own SQLite) and is killed with `SIGKILL` right after the provider
//! answered the charge, before the order and its record commit; the order is then retried
//! against a restarted shop, whose rerun of the handler charges again:
//!
//! - with the key derived from the order's record, the provider answers the rerun's
//!   charge with the first one: one payment per order, whatever the kills;
//! - with a random key per call (the shop's test-only `IDEM_EXAMPLE_RANDOM_PAYMENT_KEYS`),
//!   the provider cannot tell the rerun's charge from a new one: two payments per kill.
//!
//! Payments are counted in the provider's table, orders in the shop's. The shop kills
//! itself at that point through its test-only switch (`IDEM_EXAMPLE_CRASH_AFTER_CHARGE`);
//! every process is started and stopped by the test, by its pid. `IDEM_OUTBOUND_CRASHES`
//! sets the kills per set-up (default 3); `scripts/outbound-crash.sh` runs 100.
//!
//! The provider is the `example-payments` binary beside this test's, which `cargo test`
//! on the workspace builds; run alone, this test builds it first if it is missing.

#![cfg(unix)]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use bytes::Bytes;
use example_webshop::{CRASH_AFTER_CHARGE, RANDOM_PAYMENT_KEYS};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_client::{IdempotentRetryLayer, RetryPolicy};
use idem_tests::{ServerProcess, http_client, send_over_tcp, workspace_binary};
use serde_json::json;
use sqlx::SqlitePool;
use sqlx::sqlite::SqliteConnectOptions;
use tower::{Layer, ServiceExt};

const SIGKILL: i32 = 9;

/// How long an order's attempt holds its key: what the retry waits for after a kill.
const ORDER_LEASE_MS: &str = "500";

/// What a run of kills came to.
#[derive(Debug)]
struct Kills {
    kills: usize,
    /// Kills after which the order was charged twice.
    charged_twice: usize,
    took: Duration,
}

impl std::fmt::Display for Kills {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} killed orders charged twice ({:.1} s)",
            self.charged_twice,
            self.kills,
            self.took.as_secs_f64()
        )
    }
}

/// The kills each set-up runs: `IDEM_OUTBOUND_CRASHES`, else 3.
fn kills() -> usize {
    std::env::var("IDEM_OUTBOUND_CRASHES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_derived_from_the_order_s_record_a_killed_order_is_charged_once() {
    let result = kill_and_retry(false).await;
    println!("outbound keys derived from the record: {result}");
    assert_eq!(result.charged_twice, 0, "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_random_key_per_call_every_killed_order_is_charged_twice() {
    let result = kill_and_retry(true).await;
    println!("outbound keys random per call: {result}");
    assert_eq!(result.charged_twice, result.kills, "{result:?}");
}

/// Kills the shop between the provider's answer and the order's commit [`kills`] times,
/// each time retrying the order against a restarted shop, and counts the payments.
async fn kill_and_retry(random_keys: bool) -> Kills {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let payments_db = dir.path().join("payments.db");
    let shop_db = format!("sqlite://{}", dir.path().join("shop.db").display());
    let provider = start_provider(&payments_db);
    let http = http_client();
    let started = Instant::now();
    let mut result = Kills {
        kills: kills(),
        charged_twice: 0,
        took: Duration::ZERO,
    };
    for kill in 0..result.kills {
        let user = format!("buyer-{kill}");
        let account = format!("user:{user}");
        let key = format!("order-{kill}");

        let mut crashing = start_shop(&shop_db, &provider, random_keys, true);
        let lost = send_over_tcp(
            &http,
            order(&crashing, &user, &key).map(axum::body::Body::new),
        )
        .await;
        assert!(lost.is_err(), "the shop died before answering: {lost:?}");
        let ended = crashing.ended(Duration::from_secs(10)).await;
        assert_eq!(
            ended.signal(),
            Some(SIGKILL),
            "killed by its switch: {ended:?}"
        );
        assert_eq!(payments_of(&payments_db, &account).await, 1, "charged once");
        assert_eq!(
            orders_of(&shop_db, &account).await,
            0,
            "died before the order"
        );
        drop(crashing);

        let shop = start_shop(&shop_db, &provider, random_keys, false);
        let (status, body) = retry(order(&shop, &user, &key)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(orders_of(&shop_db, &account).await, 1, "one order");
        let paid = payments_of(&payments_db, &account).await;
        assert!((1..=2).contains(&paid), "{paid} payments for one order");
        if paid == 2 {
            result.charged_twice += 1;
        }
    }
    result.took = started.elapsed();
    result
}

/// The payments example on `db`, its records in the database.
fn start_provider(db: &Path) -> ServerProcess {
    let mut provider = Command::new(workspace_binary("example-payments", "example-payments"));
    provider
        .args(["--port", "0", "--db"])
        .arg(db)
        .env_remove("IDEM_REDIS_URL")
        .env_remove("IDEM_EXAMPLE_CRASH_AFTER_COMMIT");
    ServerProcess::start(provider)
}

/// The shop on `db`, charging through `provider`, its switches as asked.
fn start_shop(db: &str, provider: &ServerProcess, random_keys: bool, crash: bool) -> ServerProcess {
    let mut shop = Command::new(env!("CARGO_BIN_EXE_example-webshop"));
    shop.args([
        "--port",
        "0",
        "--db",
        db,
        "--order-lease-ms",
        ORDER_LEASE_MS,
    ])
    .args(["--payment-provider", provider.base()])
    .env_remove("IDEM_REDIS_URL")
    .env_remove(CRASH_AFTER_CHARGE)
    .env_remove(RANDOM_PAYMENT_KEYS);
    if crash {
        shop.env(CRASH_AFTER_CHARGE, "1");
    }
    if random_keys {
        shop.env(RANDOM_PAYMENT_KEYS, "1");
    }
    ServerProcess::start(shop)
}

/// `POST /api/orders` of product 1 for `user`, under `key`.
fn order(shop: &ServerProcess, user: &str, key: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(shop.url("/api/orders"))
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-user-id", user)
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from(
            json!({ "product_id": 1, "quantity": 2 }).to_string(),
        )))
        .expect("a request")
}

/// Sends the order through idem-client's layer, which retries it while the killed
/// attempt's lease still holds its key (the shop's `409` in progress), within 20 s.
async fn retry(order: http::Request<Full<Bytes>>) -> (StatusCode, String) {
    let hyper = Client::builder(TokioExecutor::new()).build_http();
    let policy = RetryPolicy::new()
        .with_max_attempts(50)
        .with_max_elapsed(Duration::from_secs(20));
    let answer = IdempotentRetryLayer::new(policy)
        .layer(hyper)
        .oneshot(order)
        .await
        .expect("the restarted shop answers");
    let status = answer.status();
    let body = answer
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// How many payments the provider made to `account`.
async fn payments_of(db: &Path, account: &str) -> i64 {
    let pool = SqlitePool::connect_with(SqliteConnectOptions::new().filename(db))
        .await
        .expect("the payments database");
    count(
        &pool,
        "SELECT COUNT(*) FROM payments WHERE account = ?",
        account,
    )
    .await
}

/// How many orders the shop placed for `client`.
async fn orders_of(db: &str, client: &str) -> i64 {
    let pool = SqlitePool::connect(db).await.expect("the shop's database");
    count(
        &pool,
        "SELECT COUNT(*) FROM orders WHERE client = ?",
        client,
    )
    .await
}

async fn count(pool: &SqlitePool, query: &str, of: &str) -> i64 {
    let (count,): (i64,) = sqlx::query_as(query)
        .bind(of)
        .fetch_one(pool)
        .await
        .expect("a count");
    pool.close().await;
    count
}
