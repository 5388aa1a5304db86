//! The idempotency records of the API's orders and the payment callbacks: rows of the
//! shop's own database, each completed in the transaction that writes its order or its
//! payment, so the two commit together or not at all.
//!
//! A record kept apart from the data (in memory, in Redis) can only be completed after
//! the order is committed: a shop that dies in between leaves the order placed and its
//! record in progress, and once the record's lease runs out the client's retry places the
//! order a second time. Here a retry finds the order and its stored response both, or
//! neither, whatever moment the shop died at.
//!
//! The order form's guards run on this runtime too — its tokens, its submissions and its
//! anti-repeat window are rows of the database. The other guards — the flash sale's
//! locks, the withdrawals' records — keep their keys in the shop's main store: they write nothing
//! that must commit with their keys, and Redis decides them in a fraction of a
//! millisecond.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_axum::Idem;
use idem_axum::idempotency::IdempotencyRecord;
use idem_sqlx::{CommitError, SqliteStore};
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::error::ApiError;
use crate::{client, refusal};

/// How long a record's statement may wait for SQLite's write lock, which the shop's own
/// transactions take too.
const TIMEOUT: Duration = Duration::from_secs(1);

/// The runtime of the routes whose records live in the shop's database: a
/// [`SqliteStore`] on it, and the shop's client identity.
///
/// The store writes through a connection of its own, so that its statements queue for it
/// rather than poll SQLite's lock from the pool's connections (see [`SqliteStore`]); it
/// opens on the first request.
pub(crate) fn runtime(db: &SqlitePool) -> Idem {
    let options = db.connect_options().as_ref().clone().busy_timeout(TIMEOUT);
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(TIMEOUT)
        .test_before_acquire(false)
        .connect_lazy_with(options);
    let store = SqliteStore::builder().with_timeout(TIMEOUT).build(pool);
    Idem::builder()
        .with_store(store)
        .with_client_identity(client::client_identity())
        .with_namespace("shop")
        .with_responder(refusal::respond)
        .build()
}

/// Creates idem's tables in the shop's database, beside the shop's own.
///
/// # Errors
///
/// A migration failed.
pub(crate) async fn migrate(db: &SqlitePool) -> Result<(), idem_axum::store::StoreError> {
    SqliteStore::new(db.clone()).migrate().await
}

/// Starts the transaction of a handler whose record commits with it: `BEGIN IMMEDIATE`,
/// which takes SQLite's write lock at once, so the transaction waits for another writer
/// instead of failing when a read would turn into a write.
pub(crate) async fn begin(db: &SqlitePool) -> Result<Transaction<'static, Sqlite>, ApiError> {
    Ok(db.begin_with("BEGIN IMMEDIATE").await?)
}

/// Completes the request's idempotency record with `response` in `tx`, commits, and
/// returns the response. Nothing of `tx` is committed if the record was lost (its lease
/// ran out and a retry took the key over): that retry's outcome is the request's.
pub(crate) async fn commit_with_response(
    tx: Transaction<'_, Sqlite>,
    record: &IdempotencyRecord,
    response: impl IntoResponse,
) -> Result<Response, ApiError> {
    let (stored, response) = record.stored_response(response).await.map_err(|error| {
        eprintln!("response error: {error}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the answer failed")
    })?;
    SqliteStore::commit_with_record(tx, record.key(), record.owner(), stored, record.retention())
        .await?;
    Ok(response)
}

impl From<CommitError> for ApiError {
    fn from(error: CommitError) -> Self {
        match error {
            CommitError::RecordLost => Self::new(
                StatusCode::CONFLICT,
                "another attempt of this request took it over; send it again for its outcome",
            ),
            error => {
                let cause = std::error::Error::source(&error).map(ToString::to_string);
                eprintln!("database error: {error}: {}", cause.unwrap_or_default());
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "the database failed")
            }
        }
    }
}
