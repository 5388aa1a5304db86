//! The distributed [`Lock`] in a few lines, protecting a row of a SQLite database: each
//! request is a holder that takes the lock, works, and writes the row with its fencing
//! token; the row refuses a token lower than the last one it saw.
//!
//! | route | what |
//! |---|---|
//! | `POST /writes?text=T` | a holder: waits for the lock (up to 30 s), writes `T` into the row with its fencing token, releases: `200` JSON `{text, fencing_token, waited_ms, acquired_at_ms, released_at_ms, written: true}`; a refused write `409`, `written: false`, saying which token the row had seen |
//! | `&work_ms=N` | the holder works N ms before it writes, its lease renewed by the watchdog all along: others wait, however long the lease |
//! | `&stall_ms=N` | the holder stops for N ms, renewing nothing, as a process paused by a long GC or a swapped-out VM would (its watchdog stops with it; here the holder takes a fixed lease instead): past its lease another holder takes the lock, and this one's late write is refused |
//! | `GET /row` | JSON `{text, fencing_token, writes}`: what the row holds, and how many writes it took |
//!
//! `acquired_at_ms` and `released_at_ms` count from the server's start. The lock is in
//! the store given to [`LockExample::open`]: a `MemoryStore`, or a `RedisStore` that
//! several processes share (on one database file, they share the row too).
//!
//! The lock alone keeps two holders apart only while leases hold: a holder that stalls
//! past its lease has lost the lock without knowing it. The fencing token is what makes
//! its late write harmless, because the resource checks it:
//!
//! ```sql
//! UPDATE fenced_row SET text = ?1, fencing_token = ?2, writes = writes + 1
//!  WHERE id = 1 AND fencing_token <= ?2
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_axum::lock::{Lease, Lock, LockError};
use idem_axum::store::{AnyStore, FencingToken, Key, Store, StoreError};
use serde::{Deserialize, Serialize};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};

/// The lock's name in the store.
const LOCK_NAME: &str = "fenced-row";

/// How long a holder waits for the lock before it gives up.
const WAIT: Duration = Duration::from_secs(30);

/// The resource: one row, and the largest fencing token it has seen.
const SCHEMA: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS fenced_row (
        id            INTEGER PRIMARY KEY CHECK (id = 1),
        text          TEXT    NOT NULL,
        fencing_token INTEGER NOT NULL,
        writes        INTEGER NOT NULL
    )",
    "INSERT OR IGNORE INTO fenced_row VALUES (1, '', 0, 0)",
];

/// The example: the lock's store and name, the row's database, the lease.
#[derive(Debug, Clone)]
pub struct LockExample {
    store: AnyStore,
    key: Key,
    db: SqlitePool,
    lease: Duration,
    started: Instant,
}

impl LockExample {
    /// The example with its lock in `store` and its row in the SQLite database file at
    /// `path` (created if missing); a lease of 1 s.
    ///
    /// # Errors
    ///
    /// The database cannot be opened, or its table created.
    pub async fn open(store: impl Store, path: &Path) -> Result<Self, sqlx::Error> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let db = SqlitePool::connect_with(options).await?;
        for statement in SCHEMA {
            sqlx::query(statement).execute(&db).await?;
        }
        Ok(Self {
            store: AnyStore::new(store),
            key: Key::new(LOCK_NAME).expect("a valid key"),
            db,
            lease: Duration::from_secs(1),
            started: Instant::now(),
        })
    }

    /// The lease every holder takes: renewed every third of it by the watchdog, so it
    /// bounds only how long a holder that died or stalled keeps others out.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/writes", post(write))
            .route("/row", get(row))
            .with_state(self.clone())
    }

    fn since_start(&self, at: Instant) -> u64 {
        millis(at - self.started)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What `POST /writes` takes.
#[derive(Debug, Deserialize)]
struct Write {
    text: String,
    #[serde(default)]
    work_ms: u64,
    #[serde(default)]
    stall_ms: u64,
}

/// What a holder did.
#[derive(Debug, Serialize)]
struct Held {
    text: String,
    fencing_token: u64,
    waited_ms: u64,
    acquired_at_ms: u64,
    released_at_ms: u64,
    written: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<String>,
}

/// `POST /writes`: one holder.
async fn write(
    State(app): State<LockExample>,
    Query(write): Query<Write>,
) -> Result<(StatusCode, Json<Held>), Failure> {
    let lease = if write.stall_ms > 0 {
        Lease::Fixed(app.lease)
    } else {
        Lease::Watchdog(app.lease)
    };
    // A lock of its own, so a random owner of its own: every request is another holder.
    let lock = Lock::new(app.store.clone(), app.key.clone(), lease).fenced();
    let asked = Instant::now();
    let guard = lock.acquire_within(WAIT).await?;
    let acquired = Instant::now();
    let pause = Duration::from_millis(write.work_ms.saturating_add(write.stall_ms));
    tokio::time::sleep(pause).await;
    let token = guard.fencing_token();
    let seen = write_fenced(&app.db, &write.text, token).await?;
    guard.release().await?;
    let refused = seen.map(|seen| {
        format!(
            "the row has seen fencing token {seen}, larger than this holder's: its lease ran \
             out and another holder took the lock"
        )
    });
    let status = match refused {
        Some(_) => StatusCode::CONFLICT,
        None => StatusCode::OK,
    };
    let held = Held {
        text: write.text,
        fencing_token: token.get(),
        waited_ms: millis(acquired - asked),
        acquired_at_ms: app.since_start(acquired),
        released_at_ms: app.since_start(Instant::now()),
        written: refused.is_none(),
        refused,
    };
    Ok((status, Json(held)))
}

/// Writes `text` into the row if `token` is not lower than the last one it saw: `None`
/// when written, else the token it had seen.
async fn write_fenced(
    db: &SqlitePool,
    text: &str,
    token: FencingToken,
) -> Result<Option<i64>, Failure> {
    let token = i64::try_from(token.get()).map_err(|_| Failure::TokenOutOfRange(token))?;
    let written = sqlx::query(
        "UPDATE fenced_row SET text = ?1, fencing_token = ?2, writes = writes + 1
          WHERE id = 1 AND fencing_token <= ?2",
    )
    .bind(text)
    .bind(token)
    .execute(db)
    .await?;
    if written.rows_affected() == 1 {
        return Ok(None);
    }
    let seen = sqlx::query_scalar("SELECT fencing_token FROM fenced_row WHERE id = 1")
        .fetch_one(db)
        .await?;
    Ok(Some(seen))
}

/// What the row holds.
#[derive(Debug, Serialize)]
struct Row {
    text: String,
    fencing_token: i64,
    writes: i64,
}

/// `GET /row`.
async fn row(State(app): State<LockExample>) -> Result<Json<Row>, Failure> {
    let (text, fencing_token, writes) =
        sqlx::query_as("SELECT text, fencing_token, writes FROM fenced_row WHERE id = 1")
            .fetch_one(&app.db)
            .await?;
    Ok(Json(Row {
        text,
        fencing_token,
        writes,
    }))
}

/// Why a request failed: `503` when the lock stayed held for the whole wait, `500` for
/// the rest, as JSON `{"error"}`.
#[derive(Debug)]
enum Failure {
    Lock(LockError),
    Store(StoreError),
    Database(sqlx::Error),
    TokenOutOfRange(FencingToken),
}

impl From<LockError> for Failure {
    fn from(error: LockError) -> Self {
        Self::Lock(error)
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

impl From<sqlx::Error> for Failure {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, error) = match self {
            Self::Lock(error @ LockError::TimedOut { .. }) => {
                (StatusCode::SERVICE_UNAVAILABLE, error.to_string())
            }
            Self::Lock(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
            Self::Store(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
            Self::Database(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
            Self::TokenOutOfRange(token) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("fencing token {} is beyond SQLite's integers", token.get()),
            ),
        };
        (status, Json(serde_json::json!({ "error": error }))).into_response()
    }
}
