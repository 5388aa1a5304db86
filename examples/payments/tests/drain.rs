//! A deploy's `SIGTERM` while a payment runs for a client that went away. The server
//! stops taking requests, waits for that payment to end — its record completed — and
//! only then exits; the client's retry, on the restarted server, is replayed and pays
//! nothing more. Without the drain the process would exit in the middle of the payment,
//! and the retry would pay once the record's lease ran out.
//!
//! The server runs as a process of its own (records in a real Redis the harness starts,
//! or in the payments' database: SQLite, or a real PostgreSQL the harness starts); the payment provider takes 1.5 s, and the first client
//! closes its connection once the server holds the payment's key.

#![cfg(unix)]

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use axum::http::StatusCode;
use idem_tests::{RedisServer, ServerProcess, eventually, http_client, send_over_tcp};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use common::{Db, Setup, payment, start};

/// How long a payment takes at the provider: the time the drain must wait.
const PROVIDER_MS: &str = "1500";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_records_in_redis_a_sigterm_lets_the_detached_payment_finish_and_its_retry_is_replayed()
 {
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    sigterm_while_a_payment_runs_detached(&Db::sqlite(), Some(&redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_records_in_sqlite_a_sigterm_lets_the_detached_payment_finish_and_its_retry_is_replayed()
 {
    sigterm_while_a_payment_runs_detached(&Db::sqlite(), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_records_in_postgresql_a_sigterm_lets_the_detached_payment_finish_and_its_retry_is_replayed()
 {
    sigterm_while_a_payment_runs_detached(&Db::postgres(), None).await;
}

async fn sigterm_while_a_payment_runs_detached(db: &Db, redis: Option<&RedisServer>) {
    let setup = Setup {
        redis,
        lease_ms: "10000",
        provider_ms: PROVIDER_MS,
        crash: false,
    };
    let (account, http) = ("deploy-1", http_client());
    let body = json!({ "account": account, "amount": 100 }).to_string();
    let mut server = start(db, setup);

    let abandoned = send_and_keep_open(&server, account, &body).await;
    eventually(
        Duration::from_secs(10),
        "the first attempt holds its key",
        || async move { records_begun(db, redis).await > 0 },
    )
    .await;
    let retry = send_over_tcp(&http, payment(&server, account, &body))
        .await
        .expect("the server answers");
    assert_eq!(retry.status, StatusCode::CONFLICT, "in progress: {retry:?}");
    drop(abandoned); // the first client goes away
    terminate(&server);
    let ended = server.ended(Duration::from_secs(30)).await;
    assert!(
        ended.success(),
        "it stopped by itself, after the drain: {ended:?}"
    );
    let (paid, first) = db.payments_of(account).await;
    assert_eq!(
        paid, 1,
        "the payment ran to its end before the process exited"
    );
    drop(server);

    let restarted = start(db, setup);
    let retry = send_over_tcp(&http, payment(&restarted, account, &body))
        .await
        .expect("the restarted server answers");
    assert_eq!(retry.status, StatusCode::CREATED, "{retry:?}");
    assert!(retry.replayed(), "the record completed: {retry:?}");
    assert_eq!(retry.json()["payment_id"], json!(first));
    assert_eq!(
        db.payments_of(account).await.0,
        1,
        "and nothing more was paid"
    );
}

/// How many idempotency records the store holds: in `redis`, or else in the database.
async fn records_begun(db: &Db, redis: Option<&RedisServer>) -> usize {
    match redis {
        Some(redis) => redis.keys().len(),
        None => usize::try_from(db.records().await).unwrap_or(0),
    }
}

/// Sends the payment over a connection of its own, and gives the connection back open:
/// dropping it is the client going away.
async fn send_and_keep_open(server: &ServerProcess, account: &str, body: &str) -> TcpStream {
    let address: SocketAddr = server
        .base()
        .trim_start_matches("http://")
        .parse()
        .expect("the server's address");
    let mut connection = TcpStream::connect(address)
        .await
        .expect("a connection to the server");
    let request = format!(
        "POST /payments HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         idempotency-key: {account}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    connection
        .write_all(request.as_bytes())
        .await
        .expect("the request is sent");
    connection
}

/// `SIGTERM`, what a deploy sends.
fn terminate(server: &ServerProcess) {
    let sent = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -TERM");
}
