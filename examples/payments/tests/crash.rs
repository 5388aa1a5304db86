//! Proof by crash. The server is killed with `SIGKILL` right after a payment's
//! transaction commits and before its response is sent — the one moment a record kept
//! apart from the data cannot cover — and the request is retried against a restarted
//! server on the same database:
//!
//! - records in the database (SQLite, and PostgreSQL: a real server the harness starts):
//!   the retry gets the stored answer (`Idempotent-Replayed: true`) and the handler does
//!   not run again, one payment per crash;
//! - records in Redis (a real `redis-server` the harness starts, with an append-only file
//!   written with `appendfsync always`, so Redis loses nothing it acknowledged: the window
//!   is not about Redis' durability): the record stays in progress, and once its lease
//!   runs out the retry runs the handler again, two payments per crash.
//!
//! Payments are counted in their table, which has no unique index but the id: every run
//! of the handler that committed is a row. The server kills itself at that point through
//! its test-only switch (`IDEM_EXAMPLE_CRASH_AFTER_COMMIT=1`); every process is started
//! and stopped by the test, by its pid. `IDEM_CRASHES` sets the crashes per set-up
//! (default 3); `scripts/crash.sh` runs 100 and prints the figures.

#![cfg(unix)]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use idem_tests::{
    Answer, HttpClient, RedisServer, ServerProcess, eventually, http_client, send_over_tcp,
};
use serde_json::json;

use common::{Db, Setup, payment, start};

/// How long an attempt holds its key: what a retry waits for after a crash, with the
/// records in Redis.
const LEASE_MS: &str = "1000";

const SIGKILL: i32 = 9;

/// What a run of crashes came to.
#[derive(Debug)]
struct Crashes {
    crashes: usize,
    /// Crashes after which the retry paid a second time.
    paid_twice: usize,
    /// Retries answered with the stored response.
    replayed: usize,
    took: Duration,
}

impl std::fmt::Display for Crashes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} crashes paid twice, {} retries replayed the stored answer ({:.1} s)",
            self.paid_twice,
            self.crashes,
            self.replayed,
            self.took.as_secs_f64()
        )
    }
}

/// The crashes each set-up runs: `IDEM_CRASHES`, else 3.
fn crashes() -> usize {
    std::env::var("IDEM_CRASHES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_records_in_sqlite_a_retry_after_a_crash_is_replayed_and_pays_nothing() {
    let result = crash_and_retry(&Db::sqlite(), None).await;
    println!("records in SQLite, committed with the payments: {result}");
    assert_eq!(result.paid_twice, 0, "{result:?}");
    assert_eq!(result.replayed, result.crashes, "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_records_in_postgresql_a_retry_after_a_crash_is_replayed_and_pays_nothing() {
    let result = crash_and_retry(&Db::postgres(), None).await;
    println!("records in PostgreSQL, committed with the payments: {result}");
    assert_eq!(result.paid_twice, 0, "{result:?}");
    assert_eq!(result.replayed, result.crashes, "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_records_in_redis_a_retry_after_a_crash_pays_again_once_the_lease_runs_out() {
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let result = crash_and_retry(&Db::sqlite(), Some(&redis)).await;
    println!("records in Redis (AOF, appendfsync always), stored after the commit: {result}");
    assert_eq!(result.paid_twice, result.crashes, "{result:?}");
    assert_eq!(result.replayed, 0, "{result:?}");
}

/// Crashes the server after a payment's commit [`crashes`] times, each time retrying the
/// payment against a restarted server on `db`, with the records in `redis` or in `db`.
async fn crash_and_retry(db: &Db, redis: Option<&RedisServer>) -> Crashes {
    let http = http_client();
    let started = Instant::now();
    let mut result = Crashes {
        crashes: crashes(),
        paid_twice: 0,
        replayed: 0,
        took: Duration::ZERO,
    };
    for run in 0..result.crashes {
        let account = format!("crash-{run}");
        let body = json!({ "account": account, "amount": 100 }).to_string();

        let mut crashing = start(db, setup(redis, true));
        let lost = send_over_tcp(&http, payment(&crashing, &account, &body)).await;
        assert!(lost.is_err(), "the server died before answering: {lost:?}");
        let ended = crashing.ended(Duration::from_secs(10)).await;
        assert_eq!(
            ended.signal(),
            Some(SIGKILL),
            "killed by its switch: {ended:?}"
        );
        let (paid, first) = db.payments_of(&account).await;
        assert_eq!(paid, 1, "it died after the commit");
        drop(crashing);

        let server = start(db, setup(redis, false));
        let answer = retry(&http, &server, &account, &body).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
        let (paid, _) = db.payments_of(&account).await;
        assert!(paid <= 2, "{paid} payments for one request");
        if paid == 2 {
            result.paid_twice += 1;
        }
        if answer.replayed() {
            result.replayed += 1;
            assert_eq!(
                answer.json()["payment_id"],
                json!(first),
                "the answer the crashed server never sent"
            );
        }
    }
    result.took = started.elapsed();
    result
}

/// The server, its records in `redis` or in the database, with the crash switch on or
/// off, and a short lease.
fn setup(redis: Option<&RedisServer>, crash: bool) -> Setup<'_> {
    Setup {
        redis,
        lease_ms: LEASE_MS,
        provider_ms: "0",
        crash,
    }
}

/// Retries the payment until it is answered otherwise than `409` (which says the crashed
/// attempt's lease still holds the key), for at most 15 s.
async fn retry(http: &HttpClient, server: &ServerProcess, account: &str, body: &str) -> Answer {
    let last = Arc::new(Mutex::new(None));
    eventually(Duration::from_secs(15), "an answer other than 409", || {
        let (http, last) = (http.clone(), Arc::clone(&last));
        let request = payment(server, account, body);
        async move {
            let answer = send_over_tcp(&http, request)
                .await
                .expect("the restarted server answers");
            let settled = answer.status != StatusCode::CONFLICT;
            *last.lock().expect("not poisoned") = Some(answer);
            settled
        }
    })
    .await;
    let answer = last.lock().expect("not poisoned").take();
    answer.expect("an answer")
}
