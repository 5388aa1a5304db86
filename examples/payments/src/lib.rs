//! A payments API in a few lines whose idempotency records are rows of its own database
//! (SQLite, or PostgreSQL), each completed in the transaction that writes its payment: a
//! payment and the answer a retry gets commit together, or neither does.
//!
//! | route | what |
//! |---|---|
//! | `POST /payments` | JSON `{account, amount}` (amount in cents, 1 to 100,000,000) and an `Idempotency-Key` (required): `201 {payment_id, account, amount}`; a retry with the key gets that answer again, `Idempotent-Replayed: true`, and pays nothing; the key with another body → `422`; while the first attempt runs → `409` |
//! | `GET /payments` | JSON array of every payment, oldest first |
//!
//! A request whose body is not a payment gets a `4xx` and leaves nothing behind: no
//! payment, no record, so the client may send the corrected request with the same key.
//! Keys are scoped by client, told by the peer's IP address.
//!
//! The handler that pays (`src/pay.rs`) is a transaction with one more call in it, the
//! same on either database (`DB` is `sqlx::Sqlite` or `sqlx::Postgres`):
//!
//! ```ignore
//! record.take_over(); // the layer leaves the record to this handler
//! let mut tx = pool.begin_with(DB::BEGIN).await?;
//! let paid = insert(&mut tx, payment).await?;
//! let (stored, response) = record.stored_response((StatusCode::CREATED, Json(paid))).await?;
//! SqlStore::<DB>::commit_with_record(tx, record.key(), record.owner(), stored, record.retention()).await?;
//! Ok(response)
//! ```
//!
//! A record kept in Redis ([`Records::InRedis`]) is completed by the layer once the
//! handler has answered, after the payment committed: a process that dies in between
//! leaves the payment made and its record in progress, and once the record's lease runs
//! out the client's retry pays a second time. `tests/crash.rs` kills the server at that
//! moment, in both set-ups, and counts the payments.

mod pay;

use std::error::Error;
use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use idem_axum::{Idem, IdempotencyLayer, RedisStore};
use idem_sqlx::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use idem_sqlx::sqlx::{PgPool, SqlitePool};
use idem_sqlx::{PostgresStore, SqlBackend, SqlStore, SqliteStore};

pub use example_cli::crash::CRASH_AFTER_COMMIT;

/// idem's runtime for `records`, and whether they are in the database: there, on the store
/// `open` connects (its tables created if missing).
async fn runtime<DB, F>(
    records: Records,
    open: impl FnOnce() -> F,
) -> Result<(Idem, bool), Box<dyn Error + Send + Sync>>
where
    DB: SqlBackend,
    F: Future<Output = Result<SqlStore<DB>, idem_sqlx::sqlx::Error>>,
{
    Ok(match records {
        Records::InDatabase => {
            let store = open().await?;
            store.migrate().await?;
            (Idem::new(store), true)
        }
        Records::InRedis(store) => (Idem::new(store), false),
    })
}

/// The payments table, in SQLite. No unique index but the id: a payment request names
/// nothing that makes it unique (two payments of 12.00 by alice are two payments) but its
/// idempotency key, so the record is all that stands between a retry and a second
/// payment — and every run of the handler is a row the crash tests can count.
const SQLITE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS payments (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    account TEXT    NOT NULL,
    amount  INTEGER NOT NULL CHECK (amount > 0)
)";

/// The same table in PostgreSQL.
const POSTGRES_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS payments (
    id      BIGSERIAL PRIMARY KEY,
    account TEXT      NOT NULL,
    amount  BIGINT    NOT NULL CHECK (amount > 0)
)";

/// The database the payments (and, with [`Records::InDatabase`], the records) are in.
#[derive(Debug, Clone)]
pub enum Database {
    /// A SQLite file.
    Sqlite(SqlitePool),
    /// A PostgreSQL database.
    Postgres(PgPool),
}

/// Where the idempotency records are kept.
#[derive(Debug, Clone)]
pub enum Records {
    /// In the payments' database, completed in each payment's transaction (the point of
    /// this example): a `SqliteStore` or a `PostgresStore` on it.
    InDatabase,
    /// In Redis, completed by [`IdempotencyLayer`] after the handler answered: after the
    /// payment committed. For comparison.
    InRedis(RedisStore),
}

/// The payments service: its database and its idem runtime.
#[derive(Debug, Clone)]
pub struct Payments {
    db: Database,
    idem: Idem,
    records_in_database: bool,
    lease: Duration,
    crash_after_commit: bool,
    provider_time: Duration,
}

impl Payments {
    /// The service on the SQLite database file at `path` (created if missing), its table
    /// and, for [`Records::InDatabase`], idem's created if missing.
    ///
    /// # Errors
    ///
    /// The file cannot be opened or created, or a table cannot be created.
    pub async fn open(
        path: impl AsRef<Path>,
        records: Records,
    ) -> Result<Self, Box<dyn Error + Send + Sync>> {
        let options = SqliteConnectOptions::new()
            .filename(path.as_ref())
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let db = SqlitePool::connect_with(options).await?;
        idem_sqlx::sqlx::query(SQLITE_SCHEMA).execute(&db).await?;
        let open_store = || SqliteStore::open(path);
        let (idem, records_in_database) = runtime(records, open_store).await?;
        Ok(Self::on(Database::Sqlite(db), idem, records_in_database))
    }

    /// The service on the PostgreSQL database at `url`
    /// (`postgres://user:password@host/database`), its table and, for
    /// [`Records::InDatabase`], idem's created if missing.
    ///
    /// # Errors
    ///
    /// No connection can be opened, or a table cannot be created.
    pub async fn open_postgres(
        url: &str,
        records: Records,
    ) -> Result<Self, Box<dyn Error + Send + Sync>> {
        let db = PgPool::connect(url).await?;
        idem_sqlx::sqlx::query(POSTGRES_SCHEMA).execute(&db).await?;
        let (idem, records_in_database) = runtime(records, || PostgresStore::connect(url)).await?;
        Ok(Self::on(Database::Postgres(db), idem, records_in_database))
    }

    /// The service on `db`, behind `idem`.
    fn on(db: Database, idem: Idem, records_in_database: bool) -> Self {
        Self {
            db,
            idem,
            records_in_database,
            lease: Duration::from_secs(10),
            crash_after_commit: false,
            provider_time: Duration::ZERO,
        }
    }

    /// How long an attempt holds its key before a retry may run it again, should the
    /// process running it die (default 10 s; see [`IdempotencyLayer::with_lease`]).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long the payment provider takes to answer (default: no time at all): each
    /// payment waits that long before it is written, as it would for a card network.
    pub fn with_provider_time(mut self, provider_time: Duration) -> Self {
        self.provider_time = provider_time;
        self
    }

    /// The payment provider's call, simulated: it takes [`with_provider_time`](Self::with_provider_time).
    async fn call_the_provider(&self) {
        if !self.provider_time.is_zero() {
            tokio::time::sleep(self.provider_time).await;
        }
    }

    /// **For tests only**: when `crash` is true the process ends itself with `SIGKILL`
    /// (elsewhere than on Unix, an abort) right after a payment's transaction commits,
    /// before its response is sent, as a crash at the worst moment would. The server
    /// turns it on when [`CRASH_AFTER_COMMIT`] is set to `1`.
    pub fn with_crash_after_commit(mut self, crash: bool) -> Self {
        self.crash_after_commit = crash;
        self
    }

    /// The idem runtime: what `main` drains when the server stops.
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// The database.
    pub fn db(&self) -> &Database {
        &self.db
    }

    /// The routes, behind idem.
    pub fn router(&self) -> Router {
        let create = if self.records_in_database {
            post(pay::pay)
        } else {
            post(pay::pay_then_record)
        };
        let idempotency = IdempotencyLayer::new()
            .with_required(true)
            .with_lease(self.lease)
            // A refusal of bad input is not kept: the corrected request may use the key.
            .with_stored_statuses(|status| status.is_success());
        Router::new()
            .route("/payments", create.get(pay::list).route_layer(idempotency))
            .layer(self.idem.layer())
            .with_state(self.clone())
    }

    /// Ends the process here if [`with_crash_after_commit`](Self::with_crash_after_commit)
    /// asked for it.
    fn crash_point(&self) {
        if self.crash_after_commit {
            example_cli::crash::now();
        }
    }
}
