//! What the process-level suites (`crash.rs`, `drain.rs`) share: the payments' database
//! (a SQLite file, or a PostgreSQL server the harness starts), the server started as a
//! process of its own on it, the payment request, and the payments counted in their
//! table.

use std::process::Command;

use axum::body::Body;
use axum::http::{Request, header};
use example_payments::CRASH_AFTER_COMMIT;
use idem_sqlx::sqlx::sqlite::SqliteConnectOptions;
use idem_sqlx::sqlx::{self, SqlitePool};
use idem_tests::{PostgresServer, RedisServer, ServerProcess};

/// The payments' database, which outlives the servers a test starts on it.
#[derive(Debug)]
pub(crate) enum Db {
    /// A SQLite file in a temporary directory of its own.
    Sqlite(tempfile::TempDir),
    /// A PostgreSQL server of its own.
    Postgres(PostgresServer),
}

/// Runs `$query` (a `sqlx` query, built anew for each) on `$db`'s pool, whichever database
/// it is.
macro_rules! on_db {
    ($db:expr, $query:expr) => {
        match $db {
            Db::Sqlite(dir) => {
                let file = dir.path().join(SQLITE_FILE);
                let pool = SqlitePool::connect_with(SqliteConnectOptions::new().filename(file))
                    .await
                    .expect("the payments database");
                $query.fetch_one(&pool).await
            }
            Db::Postgres(server) => $query.fetch_one(&server.pool().await).await,
        }
        .expect("a count")
    };
}

/// The SQLite database's file name in its directory.
const SQLITE_FILE: &str = "payments.db";

impl Db {
    /// A new SQLite file.
    pub(crate) fn sqlite() -> Self {
        Self::Sqlite(tempfile::tempdir().expect("a temporary directory"))
    }

    /// A new PostgreSQL server.
    pub(crate) fn postgres() -> Self {
        Self::Postgres(PostgresServer::start())
    }

    /// How many payments `account` has, and the id of its first.
    pub(crate) async fn payments_of(&self, account: &str) -> (i64, Option<i64>) {
        on_db!(
            self,
            sqlx::query_as("SELECT COUNT(*), MIN(id) FROM payments WHERE account = $1")
                .bind(account)
        )
    }

    /// How many idempotency records the database holds.
    #[allow(dead_code)] // drain.rs counts them; crash.rs, which compiles this too, does not
    pub(crate) async fn records(&self) -> i64 {
        on_db!(
            self,
            sqlx::query_scalar("SELECT COUNT(*) FROM idem_records")
        )
    }

    /// The server's arguments that name this database.
    fn args(&self) -> Vec<String> {
        match self {
            Self::Sqlite(dir) => vec![
                "--db".to_owned(),
                dir.path().join(SQLITE_FILE).display().to_string(),
            ],
            Self::Postgres(server) => vec!["--postgres".to_owned(), server.url()],
        }
    }
}

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
pub(crate) fn start(db: &Db, setup: Setup<'_>) -> ServerProcess {
    let mut server = Command::new(env!("CARGO_BIN_EXE_example-payments"));
    server
        .args(["--port", "0", "--lease-ms", setup.lease_ms])
        .args(["--provider-ms", setup.provider_ms])
        .args(db.args())
        .env_remove("IDEM_REDIS_URL")
        .env_remove("DATABASE_URL")
        .env_remove("DATABASE_PATH")
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
