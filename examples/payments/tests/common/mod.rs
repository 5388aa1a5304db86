//! What the process-level suites (`crash.rs`, `drain.rs`) share: the server started as a
//! process of its own on a database file, the payment request, and the payments counted
//! in their table.

use std::path::Path;
use std::process::Command;

use axum::body::Body;
use axum::http::{Request, header};
use example_payments::CRASH_AFTER_COMMIT;
use idem_sqlx::sqlx::SqlitePool;
use idem_sqlx::sqlx::sqlite::SqliteConnectOptions;
use idem_tests::{RedisServer, ServerProcess};

/// How the server under test is started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup<'a> {
    /// The Redis its records are in; `None`: the database.
    pub(crate) redis: Option<&'a RedisServer>,
    /// How long an attempt holds its key, in milliseconds.
    pub(crate) lease_ms: &'a str,
    /// How long the payment provider takes, in milliseconds.
    pub(crate) provider_ms: &'a str,
    /// Whether the server kills itself right after a payment commits.
    pub(crate) crash: bool,
}

/// Starts the server on `db` as `setup` says.
pub(crate) fn start(db: &Path, setup: Setup<'_>) -> ServerProcess {
    let mut server = Command::new(env!("CARGO_BIN_EXE_example-payments"));
    server
        .args(["--port", "0", "--lease-ms", setup.lease_ms])
        .args(["--provider-ms", setup.provider_ms, "--db"])
        .arg(db)
        .env_remove("IDEM_REDIS_URL")
        .env_remove(CRASH_AFTER_COMMIT);
    if let Some(redis) = setup.redis {
        server.args(["--redis", &redis.url()]);
    }
    if setup.crash {
        server.env(CRASH_AFTER_COMMIT, "1");
    }
    ServerProcess::start(server)
}

/// `POST /payments` of `body`, its idempotency key the account's name.
pub(crate) fn payment(server: &ServerProcess, account: &str, body: &str) -> Request<Body> {
    Request::post(server.url("/payments"))
        .header(header::CONTENT_TYPE, "application/json")
        .header("idempotency-key", account)
        .body(Body::from(body.to_owned()))
        .expect("a request")
}

/// The payments database, opened beside the server.
pub(crate) async fn database(db: &Path) -> SqlitePool {
    SqlitePool::connect_with(SqliteConnectOptions::new().filename(db))
        .await
        .expect("the payments database")
}

/// How many payments `account` has, and the id of its first.
pub(crate) async fn payments_of(db: &Path, account: &str) -> (i64, Option<i64>) {
    idem_sqlx::sqlx::query_as("SELECT COUNT(*), MIN(id) FROM payments WHERE account = ?")
        .bind(account)
        .fetch_one(&database(db).await)
        .await
        .expect("a count")
}
